#!/usr/bin/env python3
"""Scheduler overhead of a sweep: the same 4-point sweep of a tiny notebook (each point sleeps --sleep s) run by the
local executor (2 processes) and as a job array on a one-node SLURM on loopback (2 CPUs, 2 tasks at once,
`vtreetrm.runs.cluster.local_slurm`), both through the `vtreetrm sweep` command. Prints each wall time, the ratio
(target <= 1.5) and the per-point scheduler overhead. Needs root and Debian's slurm-wlm + munge.

Usage: python benchmarks/sweep_executors.py [--points 4] [--sleep 5]
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vtreetrm.runs.cluster import local_slurm  # noqa: E402

BODY = "import json, pathlib, time\ntime.sleep(sleep_s)\npathlib.Path(run_dir, 'metrics.json').write_text(json.dumps({'x': x}))"


def sweep_file(d: Path, points: int, sleep_s: float) -> Path:
    nb = new_notebook(cells=[new_code_cell("x = 1\nsleep_s = 0.0\nrun_dir = '.'"), new_code_cell(BODY)])
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "python3", "language": "python"}
    nbformat.write(nb, d / "tiny.ipynb")
    grid = ", ".join(str(i) for i in range(points))
    y = d / "bench.yaml"
    y.write_text(f"notebook: {d / 'tiny.ipynb'}\nparams: {{sleep_s: {sleep_s}}}\ngrid: {{x: [{grid}]}}\n")
    return y


def timed(argv: list) -> float:
    exe = Path(sys.executable).parent / "vtreetrm"
    t0 = time.perf_counter()
    r = subprocess.run([str(exe), *map(str, argv)], capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode:
        sys.exit(f"{' '.join(map(str, argv))} failed ({r.returncode}):\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
    return dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=4)
    ap.add_argument("--sleep", type=float, default=5.0, help="seconds each point's notebook sleeps")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        t = Path(t)
        y = sweep_file(t, a.points, a.sleep)
        local = timed(["sweep", y, "--runs-dir", t / "local", "--jobs", 2])
        with local_slurm(t / "slurm", cpus=2):
            slurm = timed(["sweep", y, "--runs-dir", t / "on-slurm", "--executor", "slurm", "--cpus-per-task", 1,
                           "--array-parallelism", 2, "--time", 10, "--wait"])  # fmt: skip
        shutil.rmtree(t / "slurm", ignore_errors=True)
    waves = -(-a.points // 2)
    print(f"{a.points} points of {a.sleep:.0f} s, 2 at a time")
    print(f"local executor (2 processes)        {local:7.1f} s")
    print(f"SLURM job array (submitit, --wait)  {slurm:7.1f} s")
    print(f"ratio SLURM / local                 {slurm / local:7.2f}  (target <= 1.5)")
    print(f"scheduler overhead per wave         {(slurm - local) / waves:7.1f} s")


if __name__ == "__main__":
    main()
