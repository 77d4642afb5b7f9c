#!/usr/bin/env python3
"""`make mutate`: mutation testing (mutmut 3) of the functions whose guarantees are security or numbers, then
reports/mutation.json and reports/mutation.md: the commit it ran at, the counts, and every surviving mutant with the
line it changes and why it may survive (.ci/mutation_explained.txt) or UNEXPLAINED. Exit 1 on an unexplained survivor.

mutmut runs the pytest files of `[tool.mutmut]` in pyproject.toml against each mutant, in processes forked from one
that imported the mutated copy of the library (mutants/); tests that run the CLI in a subprocess import the library
unmutated, so only in-process tests kill mutants. It takes tens of minutes on 2 cores and is not part of `.ci/run`.

python .ci/mutate.py            # run, then write the report
python .ci/mutate.py --report   # write the report from the last run's results (mutants/)"""

import fnmatch
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

root = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
EXPLAINED = root / ".ci" / "mutation_explained.txt"

# module: the functions mutated (mutmut's names; "*" every function of the module). mutmut 3 leaves decorated functions
# alone (the context managers utils.folder_lock and atomic_dir among them): .ci/breakages.py holds their guarantees.
SCOPE = {
    "vtreetrm.demo": ["mean_sd", "seed_verdict", "verdict_margin", "verdict_text"],
    "vtreetrm.harness.store": ["connect", "connect_readonly", "scored", "HarnessStore.*", "extract_run_db"],
    "vtreetrm.release.rollout": ["_gate_figures", "check_gate_report", "_gate_episodes", "_gate_model"],
    "vtreetrm.utils": ["atomic_write"],
    "vtreetrm.harness.gate": ["GateParams.*", "EProcess.*", "GateRound.*", "Watch.*"],
    "vtreetrm.eval.metrics": ["_encode", "first_predictions", "_class_scores", "_top1", "_sample_scores",
                              "metrics_from_pairs", "compute_metrics", "verify_metrics"],
    "vtreetrm.eval.parse": ["norm_label", "_snap", "parse_actions", "label_survives_parsing", "check_label",
                            "LabelMap.*", "_first_pairs", "_dedup_pairs"],
    "vtreetrm.release.audit": ["_key_digest", "_unknown_label", "_Audit.*", "_conflict_entries"],
}  # fmt: skip


def _name(mod: str, f: str) -> str:
    "mutmut's mutant-name glob of function `f` (or `Class.method`) of `mod`: `mod.x_f__mutmut_*`, `mod.xǁClassǁmethod__mutmut_*`."
    if "." in f:
        cls, meth = f.split(".")
        return f"{mod}.xǁ{cls}ǁ{meth}__mutmut_*"
    return f"{mod}.x_{f}__mutmut_*"


def patterns() -> list:
    "mutmut's mutant-name globs of the scope."
    return [f"{mod}.*" if fns == ["*"] else _name(mod, f) for mod, fns in SCOPE.items() for f in fns]


def results() -> dict:
    "{mutant name: status} of the last run, from `mutmut results --all true`."
    p = subprocess.run([BIN / "mutmut", "results", "--all", "true"], cwd=root, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"mutmut results failed: {p.stderr.strip()[-500:]}")
    out = {}
    for line in p.stdout.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and "__mutmut_" in name:
            out[name] = status
    return out


def in_scope(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns())


def changed_line(name: str) -> str:
    "The line the mutant writes (the first + line of `mutmut show`), stripped; `removes: LINE` for a deleted line."
    p = subprocess.run([BIN / "mutmut", "show", name], cwd=root, capture_output=True, text=True)
    lines = p.stdout.splitlines()
    plus = [ln[1:].strip() for ln in lines if ln.startswith("+") and not ln.startswith("+++")]
    minus = [ln[1:].strip() for ln in lines if ln.startswith("-") and not ln.startswith("---")]
    if len(minus) > len(plus):  # an argument or a line removed (a closing bracket may move with it)
        return f"removes: {minus[0]}"
    return plus[0] if plus else "(no diff)"


def explanations() -> list:
    "(function glob, regex on the changed line, why) of each line of .ci/mutation_explained.txt."
    out = []
    for i, line in enumerate(EXPLAINED.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(" | ")]
        if len(parts) != 3 or not all(parts):
            sys.exit(f"{EXPLAINED.name} line {i}: write `FUNCTION | REGEX ON THE CHANGED LINE | WHY`")
        out.append((parts[0], re.compile(parts[1]), parts[2]))
    return out


def explain(name: str, line: str, rules: list):
    fn = name.split("__mutmut_")[0]
    for glob, rx, why in rules:
        if fnmatch.fnmatchcase(fn, glob) and rx.search(line):
            return why
    return None


def report(seconds: float = None):
    sys.path.insert(0, str(root))
    from vtreetrm.utils import atomic_write, git_info, now_iso, write_json

    res = {k: v for k, v in results().items() if in_scope(k)}
    if not res:
        sys.exit("no mutant in scope among mutmut's results: run `make mutate` first")
    if unrun := sorted(
        k for k, v in res.items() if v in ("not checked", "suspicious", "segfault", "check was interrupted by user")
    ):
        sys.exit(f"{len(unrun)} mutants in scope did not run to a verdict (e.g. {unrun[0]}: {res[unrun[0]]}); "
                 "see mutmut's output above")  # fmt: skip
    rules, survivors = explanations(), []
    for name in sorted(k for k, v in res.items() if v in ("survived", "no tests")):
        line = changed_line(name)
        survivors.append({"mutant": name, "status": res[name], "line": line, "why": explain(name, line, rules)})
    counts = {}
    for v in res.values():
        counts[v] = counts.get(v, 0) + 1
    s = {"vtreetrm_output": "mutation-report", **git_info(root), "date": now_iso(), "seconds": seconds,
         "scope": SCOPE, "tests": _tests(), "counts": counts, "mutants": len(res), "survivors": survivors}  # fmt: skip
    write_json(root / "reports" / "mutation.json", s)
    unexplained = [x for x in survivors if not x["why"]]
    md = [f"Mutation testing (mutmut) at `{str(s['git_sha'])[:10]}`{' (uncommitted changes)' if s['git_dirty'] else ''}"
          f", {s['date'][:10]}: {len(res)} mutants of the functions in scope, "
          + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + f"; {len(unexplained)} survivors unexplained.",
          "", "| surviving mutant | the line it writes | why it may survive |", "|---|---|---|"]  # fmt: skip
    md += [f"| `{x['mutant']}` | `{x['line'].replace('|', '/')[:140]}` | {x['why'] or '**UNEXPLAINED**'} |"
           for x in survivors]  # fmt: skip
    atomic_write(root / "reports" / "mutation.md", "\n".join(md) + "\n")
    print(md[0], "\nwrote reports/mutation.json, reports/mutation.md")
    if unexplained:
        sys.exit(f"{len(unexplained)} surviving mutants neither killed nor explained (reports/mutation.md)")


def _tests() -> list:
    import tomllib

    return tomllib.loads((root / "pyproject.toml").read_text())["tool"]["mutmut"]["pytest_add_cli_args_test_selection"]


def main():
    if "--report" in sys.argv[1:]:
        return report()
    shutil.rmtree(root / "mutants", ignore_errors=True)  # a fresh copy of the library: mutmut's cache is keyed loosely
    t0 = time.perf_counter()
    subprocess.run([BIN / "mutmut", "run", *patterns()], cwd=root)  # its exit code says little: the results say all
    report(round(time.perf_counter() - t0))


if __name__ == "__main__":
    main()
