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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summary", type=Path, help="a demo summary already made (default: run the demo now)")
    a = ap.parse_args()
    readme = json.loads((root / "reports/demo_summary.json").read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="verdicts-") as d:
        if a.summary is None:
            cmd = [str(Path(sys.executable).parent / "vtreetrm"), "demo", "--out", f"{d}/report/group_meeting.html",
                   "--runs-dir", f"{d}/runs", "--seeds", str(readme["seeds"]), "--jobs", str(readme["jobs"])]  # fmt: skip
            print("running:", " ".join(cmd[1:]), flush=True)
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
            if subprocess.run(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL).returncode:
                sys.exit("the demo failed")
            a.summary = Path(d) / "report" / "demo_summary.json"
        here = json.loads(a.summary.read_text(encoding="utf-8"))
    lines, bad = compare(readme, here)
    print(f"the README's verdicts ({machine(readme)}) against this machine's ({machine(here)}, "
          f"{here['seeds']} seeds, demo {here['seconds']} s, {time.perf_counter() - t0:.0f} s in all):")  # fmt: skip
    print(*lines, sep="\n")
    if bad or not lines:
        sys.exit(f"verdicts that differ from the README's, not marked borderline there: {bad}")
    print(f"verdicts: {len(lines)} of {len(lines)} as the README has them (or borderline there)")


if __name__ == "__main__":
    main()
