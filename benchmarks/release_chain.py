"""Throughput and peak memory of the classification release chain on synthetic assets.

Runs every step (preprocess through rl-cascade validation) as its own `vtreetrm release` process, so each step's
peak RSS is its own, and prints records/s per step, the whole chain's wall time, and the ratio of `sft-export` to a
bare `pyarrow.parquet.write_table` of the same rows measured in this process.

    python benchmarks/release_chain.py --records 100000
    python benchmarks/release_chain.py --records 1000000 --steps preprocess canonical split audit sft-export
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))
from vtreetrm.release.assets import write_grading_manifest  # noqa: E402
from vtreetrm.release.cli import chain_commands  # noqa: E402

RUNNER = (
    "import resource, sys, json\nfrom vtreetrm.cli import main\nrc = main(sys.argv[2:])\n"
    "open(sys.argv[1], 'w').write(json.dumps({'rc': rc, 'maxrss_kb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))\n"
    "sys.exit(rc)"
)


def steps(syn, run) -> dict:
    "The chain's command lines after make-synthetic (`vtreetrm.release.cli.chain_commands`, which the tests run too)."
    return {k: v for k, v in chain_commands(syn, run).items() if k != "make-synthetic"}


TRAJECTORY_STEPS = ("trajectory-export", "trajectory-validate")


def run_step(argv, tmp):
    out = Path(tmp) / "step.json"
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", RUNNER, str(out), "release", *map(str, argv), "--no-progress"],
        cwd=HERE,
        capture_output=True,
        text=True,
    )
    dt = time.perf_counter() - t0
    if p.returncode:
        sys.exit(f"step {argv[0]} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return dt, json.loads(out.read_text())["maxrss_kb"] / 2**20


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100000)
    ap.add_argument("--workdir", default=None, help="keep outputs here (default: a temporary folder, removed)")
    ap.add_argument("--steps", nargs="*", default=None, help="run only these steps (in chain order)")
    ap.add_argument("--trajectories", action="store_true", help="also export and validate native-tool trajectories")
    a = ap.parse_args()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="release-bench-"))
    syn, run = work / "syn", work / "run"
    try:
        if not (syn / "RAW/shougang.xlsx").exists():
            t0 = time.perf_counter()
            dt, gib = run_step(["make-synthetic", "--out", syn, "--records", a.records], work)
            print(
                f"make-synthetic   {a.records:>9} records  {dt:8.1f} s  {a.records / dt:10.0f} rec/s  peak {gib:5.2f} GiB  (not part of the chain)"
            )
        run.mkdir(parents=True, exist_ok=True)
        shutil.copy(syn / "STANDARDS/shougang.grading.json", run / "grading.json")
        write_grading_manifest(run / "grading-manifest.json", {"shougang": "grading.json"})
        total, peak, times = 0.0, 0.0, {}
        for name, argv in steps(syn, run).items():
            if a.steps and name not in a.steps:
                continue
            if name in TRAJECTORY_STEPS and not (a.trajectories or (a.steps and name in a.steps)):
                continue
            dt, gib = run_step(argv, work)
            times[name] = dt
            if name in TRAJECTORY_STEPS:
                rel = run / "releases/sft-trajectory/shougang"
                rep = json.loads(
                    (rel / ("export_report.json" if name == "trajectory-export" else "validation.json")).read_text()
                )
                v = rep["validation"] if name == "trajectory-export" else rep
                print(
                    f"{name:<20} {v['rows'] / dt:10.0f} rows/s  {dt:8.1f} s  peak {gib:5.2f} GiB  "
                    f"tool re-execution {v['tool_reexecution_seconds']:.1f} s = {100 * v['tool_reexecution_seconds'] / dt:.1f}% of the step",
                    flush=True,
                )
                continue
            total += dt
            peak = max(peak, gib)
            print(f"{name:<20} {a.records / dt:10.0f} rec/s  {dt:8.1f} s  peak {gib:5.2f} GiB", flush=True)
        if any(k in times for k in TRAJECTORY_STEPS):
            print(f"trajectories: export+validate {sum(times.get(k, 0) for k in TRAJECTORY_STEPS):.1f} s")
        if total:
            print(f"chain total {total:.1f} s for {a.records} records; peak memory of any step {peak:.2f} GiB")
        rel = run / "releases/sft-legacy/shougang"
        if "sft-export" in times and rel.exists():
            rep = json.loads((rel / "export_report.json").read_text())
            tables = [pq.read_table(rel / f"{s}.parquet") for s in ("train", "val", "test")]
            t = pa.concat_tables(tables)
            t0 = time.perf_counter()
            pq.write_table(t, work / "bare.parquet", compression="zstd")
            bare = time.perf_counter() - t0
            print(
                f"sft-export vs bare pyarrow write_table of the same {t.num_rows} rows: bare {bare:.2f} s; "
                f"export part {rep['export_seconds']:.2f} s (ratio {rep['export_seconds'] / bare:.1f}x); "
                f"whole command incl. validation {times['sft-export']:.2f} s (ratio {times['sft-export'] / bare:.1f}x)"
            )
    finally:
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
