#!/usr/bin/env python3
"""The README's comparison verdicts, derived again on this machine: `vtreetrm demo` runs at the seeds and jobs of the
committed summary (reports/demo_summary.json, what the README's table shows) in a temporary folder, and each verdict
of its summary is set beside the README's, with both machines' figures. Exit 1 when a verdict differs that the README
does not mark borderline (a difference within 2/3 to 3/2 of the 2-sd bar, which another machine may not repeat), or
when the two summaries hold different comparisons.

python .ci/verdicts.py                      # run the demo, then compare (`make verdicts`; `.ci/run` runs it)
python .ci/verdicts.py --summary FILE.json  # compare a demo summary already made
python .ci/verdicts.py --kernels avx2 --write demo_arith  # the demo on torch's AVX2 kernels, kept for the README"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

root = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(root))

from vtreetrm.demo import BORDERLINE, _msd, comparisons, seed_verdict, verdict_margin  # noqa: E402


def verdicts(s: dict) -> dict:
    "{comparison's name: (A's figures, B's figures)} of a demo summary: each pair's Top1, and the rank-reg pair's query figures."
    out = {}
    for c in comparisons(s):
        name = f"{c['what']}: {c['a']} vs {c['b']}"
        out[name] = (c["a_top1"], c["b_top1"])
        for k, x in c.get("diversity", {}).items():
            out[f"{name}, query {k}"] = (x["a"], x["b"])
    return out


def pairs(readme: dict, here: dict) -> list:
    "Each comparison of both summaries: its name, each side's verdict and figures, whether it is borderline in the README."
    a, b = verdicts(readme), verdicts(here)
    if a.keys() != b.keys():
        return None
    out = []
    for name, (ra, rb) in a.items():
        ha, hb = b[name]
        m = verdict_margin(ra, rb)
        out.append({"name": name, "readme": (seed_verdict(ra, rb), ra, rb), "here": (seed_verdict(ha, hb), ha, hb),
                    "borderline": m is not None and BORDERLINE[0] <= m <= BORDERLINE[1]})  # fmt: skip
    return out


def _same(p: dict) -> str:
    if p["readme"][0] == p["here"][0]:
        return "same"
    return "differs (borderline in the README)" if p["borderline"] else "DIFFERS"


def compare(readme: dict, here: dict) -> list:
    "One line per comparison (the README's verdict and figures, this machine's), and the failures."
    ps = pairs(readme, here)
    if ps is None:
        a, b = verdicts(readme), verdicts(here)
        return [], [f"the comparisons differ: only in the README's {sorted(a.keys() - b.keys())}, "
                    f"only here {sorted(b.keys() - a.keys())}"]  # fmt: skip
    lines = [f"{p['name']}\n    README: {p['readme'][0]} ({_msd(p['readme'][1])} vs {_msd(p['readme'][2])}); "
             f"here: {p['here'][0]} ({_msd(p['here'][1])} vs {_msd(p['here'][2])}): {_same(p)}" for p in ps]  # fmt: skip
    return lines, [p["name"] for p in ps if _same(p) == "DIFFERS"]


def kernels(s: dict) -> str:
    "The kernel set torch dispatched to in the run of summary `s` (a run that did not record it had torch's default)."
    return (s["provenance"].get("cpu") or {}).get("torch_kernels") or "torch's default"


def side_by_side(readme: dict, other: dict) -> str:
    """The Markdown table of each comparison's verdict and figures in the README's summary and in `other` (a run with
    another arithmetic), and a line counting those that agree."""
    ps = pairs(readme, other)
    if ps is None:
        sys.exit("the two demo summaries hold different comparisons: run the other again at this commit")
    head = f"| comparison | the README's run ({kernels(readme)} kernels) | {kernels(other)} kernels | |"
    lines = [head, "|---|---|---|---|"]
    for p in ps:
        (rv, ra, rb), (ov, oa, ob) = p["readme"], p["here"]
        lines.append(f"| {p['name']} | {rv}: {_msd(ra)} vs {_msd(rb)} | {ov}: {_msd(oa)} vs {_msd(ob)} | {_same(p)} |")
    same = sum(_same(p) == "same" for p in ps)
    lines += ["", f"Verdicts the same on both arithmetics: {same} of {len(ps)}; differing where the README marks them "
              f"borderline: {sum(_same(p) != 'same' and p['borderline'] for p in ps)}; differing elsewhere: "
              f"{sum(_same(p) == 'DIFFERS' for p in ps)}."]  # fmt: skip
    return "\n".join(lines) + "\n"


def machine(s: dict) -> str:
    cpu = s["provenance"].get("cpu") or {}
    return f"{s['machine']['cpus']} cores, {cpu.get('model') or 'CPU model not recorded'}, commit {str(s['provenance'].get('git_sha'))[:10]}"


def run_demo(folder: Path, readme: dict, kernels: str = None) -> Path:
    """`vtreetrm demo` at the seeds and jobs of the README's summary, its runs in `folder`/runs and its report in
    `folder`/report; its log in `folder`/demo.log (the tail printed on a failure). `kernels`: torch's CPU kernel set
    for it (ATEN_CPU_CAPABILITY: default, avx2, avx512), another arithmetic on the same machine. Returns the summary's
    path."""
    cmd = [str(Path(sys.executable).parent / "vtreetrm"), "demo", "--out", f"{folder}/report/group_meeting.html",
           "--runs-dir", f"{folder}/runs", "--seeds", str(readme["seeds"]), "--jobs", str(readme["jobs"])]  # fmt: skip
    print("running:", " ".join(cmd[1:]), flush=True)
    # torch's threads as `make demo` has them (a thread per core), whatever the calling test tier set
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1"}
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY"):
        env.pop(k, None)
    if kernels:
        env["ATEN_CPU_CAPABILITY"] = kernels
    log = Path(folder) / "demo.log"
    with log.open("w", encoding="utf-8") as f:
        rc = subprocess.run(cmd, cwd=root, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc:
        sys.exit(f"the demo failed (exit {rc}); the end of its log:\n" + log.read_text(encoding="utf-8")[-3000:])
    return Path(folder) / "report" / "demo_summary.json"


def readme_summary() -> dict:
    "The committed demo summary, what the README's table shows."
    return json.loads((root / "reports/demo_summary.json").read_text(encoding="utf-8"))


def report(readme: dict, here: dict, seconds: float) -> list:
    "Print each comparison beside the README's; returns the names of those that differ, not borderline there."
    lines, bad = compare(readme, here)
    print(f"the README's verdicts ({machine(readme)}) against this machine's ({machine(here)}, "
          f"{here['seeds']} seeds, demo {here['seconds']} s, {seconds:.0f} s in all):")  # fmt: skip
    print(*lines, sep="\n")
    if not lines:
        return ["no comparison at all"] + bad
    if not bad:
        print(f"verdicts: {len(lines)} of {len(lines)} as the README has them (or borderline there)")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summary", type=Path, help="a demo summary already made (default: run the demo now)")
    ap.add_argument("--kernels", choices=["default", "avx2", "avx512"], help="torch's CPU kernel set for the demo")
    ap.add_argument("--write", metavar="NAME", help="keep the run's summary as reports/NAME.json, the table of both "
                    "runs' verdicts as reports/NAME.md (what the README shows)")  # fmt: skip
    a = ap.parse_args()
    readme = readme_summary()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="verdicts-") as d:
        here = json.loads((a.summary or run_demo(Path(d), readme, a.kernels)).read_text(encoding="utf-8"))
    bad = report(readme, here, time.perf_counter() - t0)
    if a.write:
        from vtreetrm.utils import atomic_write, write_json

        write_json(root / "reports" / f"{a.write}.json", here)
        atomic_write(root / "reports" / f"{a.write}.md", side_by_side(readme, here))
        print(f"wrote reports/{a.write}.json and .md")
    if bad:
        sys.exit(f"verdicts that differ from the README's, not marked borderline there: {bad}")


if __name__ == "__main__":
    main()
