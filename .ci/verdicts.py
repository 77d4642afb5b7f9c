#!/usr/bin/env python3
"""The README's comparison verdicts, derived again on this machine: `vtreetrm demo` runs at the seeds and jobs of the
committed summary (reports/demo_summary.json, what the README's table shows) in a temporary folder, and each verdict
of its summary is set beside the README's, with both machines' figures. Exit 1 when a verdict differs that the README
does not mark borderline (a difference within 2/3 to 3/2 of the 2-sd bar, which another machine may not repeat), or
when the two summaries hold different comparisons.

python .ci/verdicts.py                      # run the demo, then compare (`make verdicts`; `.ci/run` runs it)
python .ci/verdicts.py --summary FILE.json  # compare a demo summary already made"""

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


def compare(readme: dict, here: dict) -> list:
    "One line per comparison (the README's verdict and figures, this machine's), and the failures."
    a, b = verdicts(readme), verdicts(here)
    if a.keys() != b.keys():
        return [], [f"the comparisons differ: only in the README's {sorted(a.keys() - b.keys())}, "
                    f"only here {sorted(b.keys() - a.keys())}"]  # fmt: skip
    lines, bad = [], []
    for name, (ra, rb) in a.items():
        ha, hb = b[name]
        rv, hv, m = seed_verdict(ra, rb), seed_verdict(ha, hb), verdict_margin(ra, rb)
        border = m is not None and BORDERLINE[0] <= m <= BORDERLINE[1]
        same = "same" if rv == hv else "differs (borderline in the README)" if border else "DIFFERS"
        lines.append(
            f"{name}\n    README: {rv} ({_msd(ra)} vs {_msd(rb)}); here: {hv} ({_msd(ha)} vs {_msd(hb)}): {same}"
        )
        if rv != hv and not border:
            bad.append(name)
    return lines, bad


def machine(s: dict) -> str:
    cpu = s["provenance"].get("cpu") or {}
    return f"{s['machine']['cpus']} cores, {cpu.get('model') or 'CPU model not recorded'}, commit {str(s['provenance'].get('git_sha'))[:10]}"


def run_demo(folder: Path, readme: dict) -> Path:
    """`vtreetrm demo` at the seeds and jobs of the README's summary, its runs in `folder`/runs and its report in
    `folder`/report; its log in `folder`/demo.log (the tail printed on a failure). Returns the summary's path."""
    cmd = [str(Path(sys.executable).parent / "vtreetrm"), "demo", "--out", f"{folder}/report/group_meeting.html",
           "--runs-dir", f"{folder}/runs", "--seeds", str(readme["seeds"]), "--jobs", str(readme["jobs"])]  # fmt: skip
    print("running:", " ".join(cmd[1:]), flush=True)
    # torch's threads as `make demo` has them (a thread per core), whatever the calling test tier set
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1"}
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(k, None)
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
    a = ap.parse_args()
    readme = readme_summary()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="verdicts-") as d:
        here = json.loads((a.summary or run_demo(Path(d), readme)).read_text(encoding="utf-8"))
    bad = report(readme, here, time.perf_counter() - t0)
    if bad:
        sys.exit(f"verdicts that differ from the README's, not marked borderline there: {bad}")


if __name__ == "__main__":
    main()
