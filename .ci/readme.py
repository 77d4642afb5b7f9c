#!/usr/bin/env python3
"""README.md is generated from nbs/index.ipynb (the docs' home page) with nbconvert's Markdown exporter; each line
`<!-- NAME -->` becomes the table of reports/NAME.json, rendered from that JSON by the code of the command that wrote
it (`PRODUCER`): `<!-- demo-summary -->` from `make demo`, the others from the scripts of the same names in benchmarks/.
Below each table a line says where its figures were measured (commit, date, cores, CPU model, torch threads) and, when
a file its figures depend on (`SOURCES`) changed since that commit, that the table is stale and which files changed.

The check (`--check`) fails when
- README.md differs from what nbs/index.ipynb and the JSON files give;
- a committed reports/NAME.md differs from its JSON's rendering (a figure typed into the intermediate report);
- the README's prose holds a time, percentage, ratio or size that no JSON backs: each such figure outside the generated
  tables must be in .ci/readme_allowed.txt (goals, constants, sizes of formats), and every entry there must be used.
It prints the stale tables; they do not fail it (a stale table says so in the README itself).

python .ci/readme.py           # write README.md
python .ci/readme.py --check   # exit 1 on any of the above
python .ci/readme.py --reports # write each reports/NAME.md again from its JSON"""

import hashlib
import importlib
import importlib.util
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]

MARK = re.compile(r"^<!-- ([a-z0-9_-]+) -->$", re.M)
PRODUCER = {"demo_summary": "make demo", "learnability": "python benchmarks/learnability.py",
            "phase2_scale": "python benchmarks/phase2_scale.py --procs 2",
            "real_models": "python benchmarks/real_models.py", "real_harness": "python benchmarks/real_harness.py",
            "real_release": "python benchmarks/real_release.py",
            "demo_arith": "python .ci/verdicts.py --kernels avx2 --write demo_arith"}  # fmt: skip
# the files each table's figures depend on (folders: every file in them); a change to one since the table's commit
# marks the table stale
SOURCES = {
    "demo_summary": ["vtreetrm/demo.py", "vtreetrm/video", "vtreetrm/eval", "vtreetrm/analysis",
                     "nbs/experiments/phase2_sft.ipynb", "nbs/experiments/eval_and_analyze.ipynb"],
    "learnability": ["benchmarks/learnability.py", "vtreetrm/video", "vtreetrm/eval"],
    "phase2_scale": ["benchmarks/phase2_scale.py", "vtreetrm/video/model.py", "vtreetrm/video/phase2.py",
                     "vtreetrm/video/tiny_llm.py", "vtreetrm/video/config.py"],
    "real_models": ["benchmarks/real_models.py", "vtreetrm/video", "vtreetrm/models", "vtreetrm/eval"],
    "real_harness": ["benchmarks/real_harness.py", "vtreetrm/harness", "vtreetrm/models", "vtreetrm/release/chat.py"],
    "real_release": ["benchmarks/real_release.py", "vtreetrm/release", "vtreetrm/models"],
    "demo_arith": ["vtreetrm/demo.py", "vtreetrm/video", "vtreetrm/eval", "vtreetrm/analysis",
                   "nbs/experiments/phase2_sft.ipynb", "nbs/experiments/eval_and_analyze.ipynb"],
}  # fmt: skip
ALLOWED = ".ci/readme_allowed.txt"
# a figure of the prose: a number with the unit of a time, a share, a ratio or a size
FIGURE = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:%|×|x(?![\w-])|ms\b|s\b|sec\b|seconds?\b|min\b|minutes?\b|h\b|hours?\b"
    r"|points?\b|[KMGT]i?B\b|steps/s\b|it/s\b)"
)


def fail(msg: str):
    sys.exit(f"README check: {msg}")


def load(name: str, reports: Path = None) -> dict:
    "reports/NAME.json, a full run's, kept by git; exits naming the file otherwise."
    reports = reports or root / "reports"
    how = PRODUCER.get(name, f"the script that writes reports/{name}.json")
    js = reports / f"{name}.json"
    if not js.is_file():
        sys.exit(f"{js} is missing: run `{how}` in full, then `make readme`")
    s = json.loads(js.read_text(encoding="utf-8"))
    if s.get("quick"):
        sys.exit(f"{js} is a --quick run's: run `{how}` in full, then `make readme`")
    for f in (js, reports / f"{name}.md") if (root / ".git").exists() else ():  # a clean clone has only what git keeps
        if subprocess.run(["git", "-C", str(root), "check-ignore", "-q", str(f)]).returncode == 0:
            sys.exit(f"{f} is ignored by .gitignore: a clone would not have it; un-ignore it, then commit it")
    return s


def rendered(name: str, s: dict) -> str:
    "The Markdown of summary `s` as the code of its producer renders it from the JSON alone."
    if name == "demo_summary":
        from vtreetrm.demo import summary_markdown

        return summary_markdown(s)
    if name == "demo_arith":  # the README's demo beside one on another arithmetic: .ci/verdicts.py's table
        spec = importlib.util.spec_from_file_location("verdicts_ci", root / ".ci" / "verdicts.py")
        v = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(v)
        return v.side_by_side(load("demo_summary"), s)
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        report, mod = importlib.import_module("report"), importlib.import_module(name)
    finally:
        sys.path.pop(0)
    params = inspect.signature(mod.markdown).parameters
    extra = [s["provenance"].get("params") or {}] if len(params) > 1 else []  # a table that shows the run's settings
    return report.summary_markdown(s, mod.markdown(s["figures"], *extra))


def summary(name: str, reports: Path = None, s: dict = None) -> str:
    "reports/NAME.md as NAME.json (or `s`, read from it) renders it; exits when the committed .md differs (a typed figure)."
    reports = reports or root / "reports"
    s = s or load(name, reports)
    md_path, text = reports / f"{name}.md", rendered(name, s)
    if not md_path.is_file():
        sys.exit(f"{md_path} is missing: write it from its JSON (`python .ci/readme.py --reports`)")
    if md_path.read_text(encoding="utf-8") != text:
        sys.exit(f"{md_path} differs from what {name}.json renders: a figure in it was typed, not measured; "
                 f"write it again from the JSON (`python .ci/readme.py --reports`) or run `{PRODUCER.get(name, '')}` in full")  # fmt: skip
    return text.rstrip("\n")


def _blob(data: bytes) -> str:
    "git's id of a file's content (what `git ls-tree` lists), computed without git."
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _files_now(paths: list) -> dict:
    out = {}
    for p in paths:
        q = root / p
        for f in [q] if q.is_file() else sorted(q.rglob("*")) if q.is_dir() else []:
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                out[f.relative_to(root).as_posix()] = _blob(f.read_bytes())
    return out


def stale(name: str, s: dict):
    "The source files changed since the table's commit (an empty list: none), or None when that commit is not here."
    sha = s["provenance"].get("git_sha")
    if not sha or not (root / ".git").exists():
        return None
    r = subprocess.run(["git", "-C", str(root), "ls-tree", "-r", sha, "--", *SOURCES[name]],
                       capture_output=True, text=True)  # fmt: skip
    if r.returncode:
        return None
    then = {line.split("\t", 1)[1]: line.split()[2] for line in r.stdout.splitlines()}
    now = _files_now(SOURCES[name])
    return sorted(f for f in then.keys() | now.keys() if then.get(f) != now.get(f))


def measured_line(name: str, s: dict, changed) -> str:
    "Where the table's figures come from: commit, date, machine; and whether its sources changed since (`stale`'s answer)."
    pv, m = s["provenance"], s.get("machine") or {}
    cpu = pv.get("cpu") or {}
    date = s.get("date") or str(pv.get("created", ""))[:10]
    kern = f", {cpu['torch_kernels']} kernels" if cpu.get("torch_kernels") else ""
    machine = (
        f"{m.get('cpus') or cpu.get('cores')} CPU cores ({cpu.get('model') or 'CPU model not recorded'}{kern}), "
        + (f"{m.get('torch_threads')} torch threads{', a GPU' if m.get('cuda') else ''}")
    )
    line = f"*Measured at `{str(pv.get('git_sha') or 'no commit')[:10]}` on {date}, {machine}; made by `{PRODUCER[name]}`.*"
    if changed is None:
        return line + " *Whether it is current cannot be told here: that commit is not in this clone.*"
    if changed:
        shown = ", ".join(f"`{f}`" for f in changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
        return line + f" **Stale**: changed since then: {shown}; run `{PRODUCER[name]}` again."
    return line


def allowed() -> list:
    "The allow-list: one phrase a line (a figure no JSON holds: a goal, a constant), then `  # why`."
    out = []
    for i, line in enumerate((root / ALLOWED).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        phrase, sep, why = line.partition("  # ")
        if not sep or not why.strip() or not phrase.strip():
            fail(f"{ALLOWED} line {i}: write `PHRASE  # why it is no measurement`")
        out.append(phrase.strip())
    return out


def prose_figures(body: str) -> list:
    "(line number, figure, line) of each figure in the prose of the index (code blocks and inline code left out)."
    out, code = [], False
    for i, line in enumerate(body.splitlines(), 1):
        if line.startswith("```"):
            code = not code
        if code or MARK.match(line):
            continue
        bare = re.sub(r"`[^`]*`", lambda m: " " * len(m[0]), line)
        out += [(i, m[0], bare, m.start()) for m in FIGURE.finditer(bare)]
    return out


def check_prose(body: str):
    "Fail on a figure of the prose outside the allow-list, and on an allow-list entry the prose no longer holds."
    phrases, used, bad = allowed(), set(), []
    for i, fig, line, at in prose_figures(body):
        covering = [p for p in phrases for m in re.finditer(re.escape(p), line) if m.start() <= at < m.end()]
        used.update(covering)
        if not covering:
            bad.append(f"nbs/index.ipynb (line {i} of its Markdown): {fig!r} in: {line.strip()[:160]}")
    if bad:
        fail("figures in the prose that no JSON backs (measure them into a table, or add a goal or constant to "
             ".ci/readme_allowed.txt with why):\n  " + "\n  ".join(bad))  # fmt: skip
    if unused := [p for p in phrases if p not in used]:
        fail(f"{ALLOWED} lists phrases the README no longer holds: {unused}")


def render(check_prose_figures: bool = True) -> tuple:
    "README.md's text, {name: summary} of its tables, and {name: `stale`'s answer}."
    from nbconvert import MarkdownExporter

    body, _ = MarkdownExporter().from_filename(str(root / "nbs" / "index.ipynb"))
    names = MARK.findall(body)
    if "demo-summary" not in names or len(names) != len(set(names)):
        sys.exit("nbs/index.ipynb must hold the line <!-- demo-summary --> once, and each <!-- NAME --> line once")
    if check_prose_figures:
        check_prose(body)
    sums = {n.replace("-", "_"): load(n.replace("-", "_")) for n in names}
    changed = {n: stale(n, s) for n, s in sums.items()}

    def table(m):
        name = m[1].replace("-", "_")
        return summary(name, s=sums[name]) + "\n\n" + measured_line(name, sums[name], changed[name])

    return MARK.sub(table, body), sums, changed


def write_reports():
    "Each reports/NAME.md the index shows, written again from its JSON (a change of a table's layout, no figure)."
    from nbconvert import MarkdownExporter

    from vtreetrm.utils import atomic_write

    body, _ = MarkdownExporter().from_filename(str(root / "nbs" / "index.ipynb"))
    for n in MARK.findall(body):
        name = n.replace("-", "_")
        print("wrote", atomic_write(root / "reports" / f"{name}.md", rendered(name, load(name))))


def main():
    if "--reports" in sys.argv[1:]:
        return write_reports()
    text, sums, stale_of = render()
    for name, s in sums.items():
        if changed := stale_of[name]:
            print(f"stale: reports/{name}.json (measured at {s['provenance']['git_sha'][:10]}): {len(changed)} of its "
                  f"source files changed since; run `{PRODUCER[name]}`")  # fmt: skip
    if "--check" in sys.argv[1:]:
        if (root / "README.md").read_text(encoding="utf-8") != text:
            sys.exit(
                "README.md differs from nbs/index.ipynb and reports/*.json: the README is generated; edit "
                "nbs/index.ipynb, then run `make readme`"
            )
        print(f"README.md is what nbs/index.ipynb and the {len(sums)} reports/*.json give")
        return
    tmp = root / ".README.md.tmp"
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(root / "README.md")
    print("README.md written from nbs/index.ipynb and reports/*.json")


if __name__ == "__main__":
    main()
