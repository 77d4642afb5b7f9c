"""Throughput and peak memory of the classification release chain on synthetic assets.

Runs every step (preprocess through rl-cascade validation) as its own `vtreetrm release` process, so each step's
peak RSS is its own, and prints records/s per step, the whole chain's wall time, and the ratio of `sft-export` to a
bare `pyarrow.parquet.write_table` of the same rows measured in this process (median of 5). The last lines are the
figures the README's performance table points at: the chain's wall time and peak RSS (a full run), then the
sft-export ratios.

    python benchmarks/release_chain.py --records 100000
    python benchmarks/release_chain.py --records 20000 --steps preprocess canonical split sft-export
    python benchmarks/release_chain.py --records 1000000 --steps preprocess canonical split audit sft-export

Profile of `release sft-export` at 20,000 records (cProfile, 2 cores shared with other jobs; times under the
profiler, so only their proportions carry over), what it showed and what changed:
- first, 7.6 s: validating what was just written 4.2 s (every row re-read as a Python dict by `to_pylist` 0.44 s,
  its prompt parsed back by `parse_user` and its label, metadata and answer by `json.loads` (180,000 calls), then
  rendered again and compared); rendering the rows 1.3 s (`json.dumps` building an encoder per call, candidate lines
  joined through a generator, three message dicts per row); `pa.Table.from_pylist` of the row dicts 0.45 s; reading
  the canonical records 0.56 s; imports 0.67 s (the release command group imported every step's module, the launch
  and trajectory ones with pandas and openpyxl).
- then, 4.2 s: imports 0.29 s (the step's own module only: `release.cli.LazyCommands`); rows rendered as tuples from
  templates built once, labels and answers cached per (category, level) (`SftRows`), batches built column by column
  (`sft_table`); validation 1.9 s, a row checked from its batch's columns by comparing it with what the assets render
  (`SftRowCheck`), the row-by-row check only for a row that differs; canonical lines parsed with orjson.
- then, profiled side by side with that version on the same machine (3.79 s there): 2.30 s. Its costs were the
  candidate draws (`candidates_for`, a Python Fisher-Yates per row: 0.41 s), pandas imported by the first
  `pa.array` (0.26 s), the parser's help text read from the source by fastcore `docments` on every run (0.17 s), the
  user prompt built and compared row by row in Python (validation's per-row check 0.94 s) and the canonical read
  (`export_records` 0.48 s, of it `Record.from_dict` 0.24 s). Now: the draws for a whole batch at once
  (`prompts.candidate_matrix`, numpy, the same numbers: 0.17 s for export and validation together); the prompts joined
  by pyarrow.compute from the metadata blocks and the candidate lines (`SftTexts`), rows built per batch of records
  (`SftRows.table` 0.42 s); validation 0.96 s (was 1.44 s), the user prompts of a batch compared with what the assets
  render in one `pc.equal`, canonical ids looked for in the metadata block only (the assets' fixed text is checked
  once); Arrow arrays made with Arrow's builder (`release.parquet.texts`, `ints`), so pandas is never imported; the
  parser built from the signature unless `--help` is asked (0.01 s).
- then, 1.1 s under the profiler (2.30 s before, the same machine, other jobs beside it): the canonical records read
  by Arrow's JSON reader a chunk at a time (`sft.export_tables`; `export_records` reads on row by row from the first
  chunk whose columns do not pass its checks, so its messages are unchanged): 0.07 s, was 0.48 s; rows built
  column by column from those columns (`SftRows.columns_table`: metadata blocks and the metadata column joined by
  pyarrow.compute, labels and answers rendered once per (category, level), the candidate draws' blake2b digests
  read by numpy in one buffer): 0.23 s with the tables' interleaving 0.12 s; each table checked on its way to its
  file (`SftTableCheck`, 0.11 s: the same equalities as `SftRowCheck` from the columns, the draws and candidate
  lines of a batch made once for export and check) instead of the files read back and checked (0.96 s): the
  files are read again (`validate_sft_dataset`, messages unchanged) only when a table does not pass, and their
  footers are checked to hold the rows that passed; tqdm (with asyncio, 0.02 s) imported only to show a bar;
  pandas (0.2 s) no longer imported by pyarrow (`Array.to_numpy`, Python scalars and `pc.index_in` imported it:
  `parquet.to_ints`, Arrow scalars and dictionary encoding instead); `parquet.texts` builds an array from its
  buffers instead of pyarrow's internal `StringBuilder` (the same time for the small arrays it now makes). A
  writing thread beside the builder was tried: no faster on 2 cores shared with other jobs, so left out.
- then: the package byte-compiled (`make env`, `make export` and `make bench` run `python -m compileall -q vtreetrm`;
  the environment sets PYTHONDONTWRITEBYTECODE, so a run reads a .pyc only where one was made): process start and the
  imports of `vtreetrm.cli` and `vtreetrm.release.sft` 0.19 s (0.27 s without the .pyc, best of 6, the same machine);
  the parser reads the command's notebook for its epilog only for --help (0.007 s); provenance 0.021 s, was 0.029 s
  (best of 8): the git sha and uncommitted changes from one `git status --porcelain=v2 --branch`, and package versions
  read from each distribution's `Version:` header by hand, a step later taken back (it saved ~4 ms of the 0.7 s
  command, not worth a hand-written metadata parser; `importlib.metadata.version` again). Runs measured from this
  step on had the .pyc made (whole command 0.67-0.77 s, 12.2-13.8x, three runs; the step before in the same job
  without it: 0.75-0.90 s, 13.4-15.6x); a checkout without `make env` compiles the vtreetrm modules on every command.
- then: each record's six messages joined by one `binary_join_element_wise` and cut at the messages' ends
  (`SftTexts.messages`: offsets from the pieces' byte lengths over the joined text's buffer), where the user prompts
  were joined, then interleaved with the system prompts and answers by a `take` over a chunked array (`take` was
  the costliest compute call under the profiler); `SftTableCheck` compares the whole content column with what the
  assets render (`Array.equals`, about 0.4 ms for a batch's 11.7 MB) instead of six `take`s of the messages and
  their comparisons one by one, and reads the metadata values from the metadata column by Arrow's JSON reader
  instead of a regular expression over each stage1 prompt (per 4,096-record batch, best of 5 in one process, three
  processes each side, alternating on the same machine, the candidate draws cached: building 8.4-13.3 ms -> 5.9-6.1
  ms, checking 13.1-13.3 ms -> 10.6 ms, the zstd write 12 ms); the split files written on a thread
  (`TableSplitWriter(background=2)`) while the next table is built and checked, as the idea above, now measured
  under `heavy`; the canonical records read about 2 MB at a time, the next chunk parsed on a thread
  (`_read_ahead`); the report's provenance made on a thread from the command's start
  (`assets.begin_provenance`); the candidate digests made by a list comprehension (about 3 ms of 20,000 rows).
  Measured under `heavy` (one job, other workers' light jobs beside it): the command alone
  (`release sft-export`, 20,000 records, a fresh output folder each run), ten runs each way alternating: with the
  three threads 0.395-0.809 s, median 0.420 s (export part median 0.157 s), without them 0.393-0.699 s, median
  0.522 s (0.184 s): the same best run, the threads saving time when the machine is busier; best of five
  alternating runs: 0.420 s at the step's start (319f3e9), 0.396 s at its end. This benchmark in five
  `heavy` jobs within 20 minutes (bare write 0.053-0.071 s), the step's end, whole command: 8.1x, 8.8x, 15.5x;
  18.9x, 24.3x, 16.6x; 18.8x, 13.3x, 12.8x; 21.2x, 16.1x, 14.9x; 17.1x, 21.8x, 19.0x, 19.6x (export part 3.2x,
  3.4x, 8.5x; 9.9x, 13.9x, 7.1x; 9.5x, 5.4x, 5.2x; 11.4x, 8.9x, 6.6x; 7.8x, 11.4x, 9.6x, 11.2x); the step's start
  alternating with it in four of those jobs: 13.8x, 10.2x, 18.2x; 16.9x, 18.3x, 12.2x; 12.6x, 15.7x, 10.3x; 23.5x,
  16.3x, 13.8x, 19.3x (export part 6.5x, 4.7x, 10.2x; 8.7x, 10.8x, 5.8x; 6.4x, 7.4x, 4.3x; 13.8x, 6.9x, 6.8x,
  11.7x); the step's end without its three threads, in the last job: 19.9x, 19.2x, 17.0x, 18.7x. The machine's
  kernel time moved through those jobs (the same command took 0.1-1.0 s of system time from one run to the next),
  and so did single runs, by up to 0.7 s: at that spread the benchmark does not tell the versions apart. A sixth
  job, the machine's load 0.5: the step's end 18.1x, 15.8x, 15.7x, its start 12.0x, 22.2x, 17.8x. Inside this
  benchmark the command takes 0.74-1.2 s where, in the same jobs, it alone takes 0.40-0.6 s; run right after a
  `split` step 0.50-1.05 s, with `sync` between them 0.47-0.95 s, alone 0.43-0.84 s (three runs each, both
  versions, one job): where that time goes is not found.
- what is left (20,000 records, five fresh processes in one `heavy` job, the same machine, after the step above;
  each part timed in its own thread, so they overlap): process start and `site` about 0.025 s; imports 0.14-0.16 s
  (`-X importtime`: vtreetrm.release.sft with numpy and pyarrow 0.11-0.12 s, vtreetrm.cli 0.04 s, site 0.014 s);
  the command itself (`main`) 0.20-0.22 s, of it: the canonical read 0.07-0.09 s (on the read-ahead thread; the
  first chunk is waited for), building the rows 0.08-0.09 s and checking them about 0.06 s (the main thread's path),
  the zstd writes 0.06-0.075 s (the writer thread; only the last table's write is waited for), provenance 0.03-0.04
  s (its thread: git 0.005-0.014 s, package versions 0.014-0.017 s, input sha256 0.008-0.015 s), the files' footers
  and the report about 0.005 s; the interpreter's exit with numpy and pyarrow loaded 0.025-0.035 s (`python -c
  "import vtreetrm.cli, vtreetrm.release.sft"` 259-274 ms against 229-240 ms ending in `os._exit`, six pairs outside `heavy`). The
  whole command's floor on a quiet machine is thus about 0.4 s (7-7.5x the bare write), of which 0.2 s is starting,
  importing and exiting; other jobs on the 2 cores move single runs by 0.1-0.4 s either way.
- then: the command is run 5 times (each a new process, the release replaced) and the ratios are of the medians, as
  the bare write's is a median of 5. Where the run-to-run spread comes from (the same command, one `heavy` job,
  `/usr/bin/time`): Arrow's default memory pool here is mimalloc, whose arenas are committed eagerly in transparent
  huge pages (about 75 THP faults a run, `/proc/vmstat` `thp_fault_alloc`); their kernel time went from 0.08 to 0.80
  s between identical runs, and slow runs spent it in `take` and the other compute kernels (0.2-0.25 s against
  0.013-0.018 s under cProfile). With `ARROW_DEFAULT_MEMORY_POOL=jemalloc` or `system` (no THP faults, three times
  the small faults) 8 runs each took 0.48-0.53 s; with mimalloc's `MIMALLOC_ARENA_EAGER_COMMIT=0` 0.45-0.51 s; the
  default 0.40-1.11 s. The command does not choose its pool: a steadier 0.48 s is still above the 8x goal (~0.45 s).
  Three runs of the benchmark (medians of 5, package byte-compiled, one `heavy` job each): export part 2.8x, 3.8x,
  3.9x; whole command 8.0x, 11.2x, 11.5x (single runs 0.42-0.89 s).
- then: the pool chosen for steadiness and the rest cut where `perf` and fault counts pointed.
  - The kernel's huge pages: the command sets `MIMALLOC_ALLOW_THP=0` unless the environment sets it (`cli.main`,
    before pyarrow loads). Transparent huge pages are `madvise` here, with direct compaction on the regions mimalloc
    advises, which is where the 0.1-0.9 s of system time came from. Eight runs each, one job: default 0.38-1.10 s
    (bimodal), without huge pages 0.43-0.51 s; `ARENA_EAGER_COMMIT=0` the same, jemalloc 0.48-0.52 s, the system
    allocator 0.46-0.52 s.
  - What is left of the faults: a run touches ~150 MB of fresh pages (40,000 minor faults, ~0.1 s of system time)
    while Arrow's pool peaks at ~45 MB. Per phase (`RUSAGE_THREAD`): building 71 MB, checking 20 MB, writing 11 MB.
    The candidate lines of a batch were taken (6.5 MB) and then list-joined into a second copy; now one `take` from
    the lines with and without their break lays them out joined (`sft._joined_lines`): building 53 MB.
  - The reader made each chunk newline-delimited with `bytes.replace` under the GIL (3.8 ms a 2 MB chunk); numpy
    now finds the lines (0.8 ms). The candidate draws hash each seed's prefix once and continue from a copy
    (17.7 -> 12.1 ms for 20,000 rows, the same digests).
  - The collector: 7 ms of collections during the imports and more at exit, walking the loaded modules. The console
    script freezes them (`gc.freeze`) before the command runs; in a caller's process `main` leaves the collector
    alone. This benchmark now runs each step as the console script does (`cli.main(..., own_process=True)`).
    Alternating runs, one job: 0.437 s -> 0.405 s (medians of 12).
  - `importlib.metadata` (12 ms) is imported where package versions are read, on the provenance thread.
  - Tried and left out: checking each table on the writer thread (no faster: both cores are busy, 1.45 CPUs used
    over the run); the candidate digests made on the read-ahead thread (0.443 s against 0.434 s); one BLAS thread
    (`import numpy` spins a second core for 60 ms, but beside the serial imports, so the wall time is the same).
  - Measured at the end (three runs, one `heavy` job each): whole command 7.6x, 7.9x, 8.0x (medians 0.41-0.45 s,
    bare write 0.054-0.057 s); export part 2.9x, 3.1x, 3.1x. The 100,000-record chain: 52.9 s, peak RSS 0.36 GiB.
- then, unchanged code at ce907f7, six runs in one session (under `heavy`, the last three in one job): whole command
  5.3x, 7.6x, 8.4x, 8.1x, 7.6x, 8.5x (medians 0.44-0.51 s; bare write 0.054-0.087 s); export part 2.0-3.2x. The
  100,000-record chain: 61.1 s, peak RSS 0.36 GiB. Where the whole command's time goes now (six processes outside
  `heavy`, wall times from each one's start): interpreter start ~0.025 s, imports 0.15-0.21 s (pyarrow imports numpy
  itself, and `Array.take` imports pyarrow.compute, so neither can be left out), `main` 0.25-0.34 s, exit 0.03-0.04 s.
  The exit is the interpreter freeing the loaded modules (numpy, pyarrow and pyarrow.compute's generated functions:
  `import pyarrow, pyarrow.compute` ends 30 ms later than with `os._exit(0)`, medians of 12). Ending the console script
  with `os._exit` after flushing its streams: 0.491 s -> 0.456 s (medians of 16 alternating pairs, one `heavy` job),
  not taken: it skips the atexit handlers, thread joins and finalizers that the commands' libraries rely on (temporary
  folders, files not closed by their owner), which no release step should have to prove absent for 35 ms.
"""

import argparse
import json
import shutil
import statistics
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

RUNNER = (  # the command as the `vtreetrm` console script runs it (its own process), then its peak RSS to a file
    "import resource, sys, json\nfrom vtreetrm.cli import main\nrc = main(sys.argv[2:], own_process=True)\n"
    "open(sys.argv[1], 'w').write(json.dumps({'rc': rc, 'maxrss_kb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))\n"
    "sys.exit(rc)"
)


def steps(syn, run) -> dict:
    "The chain's command lines after make-synthetic (`vtreetrm.release.cli.chain_commands`, which the tests run too)."
    return {k: v for k, v in chain_commands(syn, run).items() if k != "make-synthetic"}


TRAJECTORY_STEPS = ("trajectory-export", "trajectory-validate")


def bare_write_seconds(t: pa.Table, path: Path, repeats: int = 5) -> float:
    "Median of `repeats` wall times of a bare `pq.write_table` of `t` (zstd, as the release writes)."
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        pq.write_table(t, path, compression="zstd")
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


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
        summary = []
        if total and not a.steps:
            summary.append(
                f"chain: {a.records} records in {total:.1f} s (goal < 90 s at 100,000); "
                f"peak RSS of any step {peak:.2f} GiB (goal < 1 GiB)"
            )
        if "sft-export" in times and rel.exists():
            # the command 4 times more (each a new process, the release replaced): medians of 5, as the bare write's
            argv = steps(syn, run)["sft-export"]
            runs = [(times["sft-export"], json.loads((rel / "export_report.json").read_text()))]
            for _ in range(4):
                runs.append((run_step(argv, work)[0], json.loads((rel / "export_report.json").read_text())))
            whole = statistics.median(dt for dt, _ in runs)
            export = statistics.median(r["export_seconds"] for _, r in runs)
            t = pa.concat_tables([pq.read_table(rel / f"{s}.parquet") for s in ("train", "val", "test")])
            bare = bare_write_seconds(t, work / "bare.parquet")
            wholes = ", ".join(f"{dt:.2f}" for dt, _ in runs)
            exports = ", ".join(f"{r['export_seconds']:.2f}" for _, r in runs)
            print(
                f"sft-export vs bare pyarrow write_table of the same {t.num_rows} rows: bare {bare:.3f} s (median of 5); "
                f"sft-export, 5 runs: whole command (process start to exit) {wholes} s, "
                f"of it the export part {exports} s; medians "
                f"{whole:.2f} s and {export:.2f} s"
            )
            summary.append(
                f"sft-export ratio to bare write_table (medians of 5): export part {export / bare:.1f}x (goal <= 4x); "
                f"whole command incl. validation {whole / bare:.1f}x (goal <= 8x)"
            )
        for line in summary:  # the ratios last
            print(line)
    finally:
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
