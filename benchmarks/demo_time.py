"""Wall time of `make demo` (`vtreetrm demo`) on this machine, against its floor at the same math.

Runs `vtreetrm demo --seeds S` for each `--seeds` value (default: 1, then the default 3) in a new runs folder each,
checks that its figures are those of the committed `reports/demo_summary.json` (every figure for the default 3 seeds;
for fewer seeds, the rows and query diversity of the runs both have), and prints its wall time and its floor:

    floor = the serial part (rendering, encoding and Phase-1, from the demo's start to its first Phase-2 run)
            + the Phase-2 runs' own seconds (each run's `run.json` start to its `metrics.json`) / the processes

The Phase-2 runs are the demo's work that cannot shrink without changing its figures: each trains and generates with
one torch thread in a process of its own, and any change of their math (a compiled model, fewer logits, other
batch shapes in generation, another reduction order) moves the weights by float rounding, and with them the query
diversity figures and, now and then, a prediction. So on 2 cores the Phase-2 part cannot take less than their CPU
seconds over 2.

    .venv/bin/python benchmarks/demo_time.py [--seeds 1 3] [--from DIR ...]

`--from` reads finished demos instead (each a folder holding `runs/` and the `demo_summary.json` that `vtreetrm demo
--runs-dir DIR/runs --out DIR/report.html` wrote), for runs made by hand with that command. The tiny LLMs' text
pretraining is cached per seed in the user's cache (`tiny_llm_cache`); the lines say whether this run found it made.

First runs (2 cores, the code at 319f3e9, tiny-LLM cache made; read with `--from` from demos run by hand with the
command above): `--seeds 1` 294 s, floor 244 s (serial 82 s + 5 Phase-2 runs' 325 CPU-s / 2); `--seeds 3` 489 s,
floor 439 s (serial 89 s + 11 Phase-2 runs' 699 CPU-s / 2); figures as committed in both. The floor leaves out the
ladders' probes, the release-chain and harness notebooks (~35 s of one core), the analysis notebook and the report,
so it is a lower bound: with 3 seeds it is above the 360 s goal by itself. Starting the release-chain and harness
notebooks beside the rendering, encoding and Phase-1 (instead of beside the last Phase-2 runs) was tried: the
encoding's two torch threads then shared the cores with the notebooks' kernels and took 55 s instead of 18 s, and
`--seeds 1` took 363 s instead of 294 s, so that was left out.
With an empty tiny-LLM cache (`VTREETRM_CACHE` a new folder; a first `make demo` on a machine), 3 seeds, the same
machine one after the other, figures as committed in both: 585 s when the first runs of a seed made its tiny LLM
(pretraining, ~28 s of one thread each) while the seed's other run waited on the cache's lock; 541 s with each seed's
base LLM made first, one task per seed in the two processes (`video.demo._base_llm_of`).
Generation asking the LLM for the prompt's last logits only (`VideoQFormerLM.last_logits`), at 6b32ea3, 3 seeds,
tiny-LLM cache made: 499 s, floor 441 s (serial 85 s + 11 Phase-2 runs' 710 CPU-s / 2), figures as committed (every
validation and test answer the same); `vtreetrm demo` at 8a50084 before it, the same machine: 502 s. Its gain is
memory on a real LLM (no (batch, prompt, vocabulary) logits); here the prompts' logits were ~3% of a run.
At ce907f7 (3 seeds, tiny-LLM cache made; run by hand with the command above and read with `--from`): 496 s (502 s from
process start to exit), floor 441 s = serial 74 s + 11 Phase-2 runs' 735 CPU-s / 2, figures as committed. Its timeline,
from the files of its run folders: synthetic data and encoding 0-32 s, Phase-1 32-69 s, nothing written 69-74 s (the
two processes starting); from 74 s both processes were busy until their last task: one ran 6 Phase-2 runs (to 479 s),
the other 5 runs (to 412 s), the ladder's probes (the gap before the next files), then the release-chain and harness
notebooks (to 486 s); the analysis notebook and the report 487-496 s. So the demo is within 1.12x of a floor that
leaves out the probes, notebooks and report, and the Phase-2 runs by themselves (735 CPU-s of one thread each,
49.7-80.4 s per run: their training steps and generation) need 367 s of 2 cores, above the 360 s goal before anything
else of the demo. Reaching it would take each run's math about a third less CPU time, which moves the weights and with
them the figures. A profile of one run at ce907f7 (py-spy, 50 samples/s, the headline run alone, one torch thread, 69
s): training steps 75% (forward 33%, backward 37%, optimizer and clipping 5%), generation for the validation answers of
each epoch and the test answers 11%, imports 7% (once per process in the demo), everything else about 7% (features
read, checkpoints saved on a thread, prompts tokenized): no part of a run is left that is not its math.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from vtreetrm.demo import figure_changes
from vtreetrm.video.tiny_llm import tiny_llm_cache

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 360


def phase2_seconds(runs: Path) -> tuple[float, list]:
    "(The start of the first Phase-2 run as a Unix time, each Phase-2 run's own seconds), from the run folders."
    starts, spans = [], []
    for run in sorted((runs / "video_demo" / "runs").iterdir()):
        meta, metrics = run / "run.json", run / "metrics.json"
        if run.name == "phase1_joint" or not meta.is_file() or not metrics.is_file():
            continue  # Phase-1, and the cross-dataset predictions (no run.json: part of their model's run)
        t0 = datetime.fromisoformat(json.loads(meta.read_text())["started"]).timestamp()
        starts.append(t0)
        spans.append(metrics.stat().st_mtime - t0)
    return min(starts), spans


def demo_started(runs: Path) -> float:
    "When the demo started: the first file it wrote (the synthetic data's folder)."
    return min(p.stat().st_mtime for p in (runs / "video_demo" / "data").rglob("*") if p.is_file())


def same_figures(new: dict, committed: dict) -> list:
    "Figures of `new` that differ from the committed summary: every one for a full demo, else the runs both have."
    if new["seeds"] == committed["seeds"]:
        return figure_changes(committed, new)
    rows = {r["run"]: r for r in committed["rows"]}
    div = committed["query_diversity"]["runs"]
    out = [x for r in new["rows"] for x in figure_changes(rows.get(r["run"], "<absent>"), r, f"rows.{r['run']}.")]
    for run, q in new["query_diversity"]["runs"].items():
        out += figure_changes(div.get(run, "<absent>"), q, f"query_diversity.runs.{run}.")
    return out


def report(folder: Path, committed: dict, *, wall: float = None) -> dict:
    "The figures of one finished demo in `folder`."
    s = json.loads((folder / "demo_summary.json").read_text())
    first, spans = phase2_seconds(folder / "runs")
    serial = first - demo_started(folder / "runs")
    floor = serial + sum(spans) / s["jobs"]
    changes = same_figures(s, committed)
    return {"seeds": s["seeds"], "seconds": s["seconds"] if wall is None else wall, "serial": serial,
            "phase2_cpu": sum(spans), "runs": len(spans), "jobs": s["jobs"], "floor": floor, "changes": changes}  # fmt: skip


def run_demo(seeds: int, work: Path) -> tuple[Path, float]:
    "`vtreetrm demo --seeds seeds` in a new runs folder under `work`: (the folder, its wall time)."
    d = work / f"seeds{seeds}"
    argv = [str(Path(sys.executable).parent / "vtreetrm"), "demo", "--seeds", str(seeds),
            "--runs-dir", str(d / "runs"), "--out", str(d / "report.html")]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return d, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--from", dest="done", type=Path, nargs="+", help="finished demo folders to read instead")
    a = ap.parse_args()
    committed = json.loads((ROOT / "reports" / "demo_summary.json").read_text())
    if a.done:
        reps = [report(d, committed) for d in a.done]
    else:
        warm = any(tiny_llm_cache().glob("*/pretrain.json"))  # none where the folder is not made yet
        print(f"tiny-LLM cache {'made before' if warm else 'empty: this run makes it'} ({tiny_llm_cache()})")
        work = Path(tempfile.mkdtemp(prefix="demo-time-"))
        try:
            reps = [report(d, committed, wall=wall) for d, wall in (run_demo(s, work) for s in a.seeds)]
        finally:
            shutil.rmtree(work, ignore_errors=True)
    for r in reps:
        print(f"make demo --seeds {r['seeds']}: {r['seconds']:.0f} s (goal <= {GOAL_S} s); floor at the same math "
              f"{r['floor']:.0f} s = serial {r['serial']:.0f} s + {r['runs']} Phase-2 runs' {r['phase2_cpu']:.0f} "
              f"CPU-s / {r['jobs']} processes; figures: "
              + ("as committed" if not r["changes"] else f"{len(r['changes'])} differ: {r['changes'][:3]}"))  # fmt: skip
    for r in reps:  # the ratios last
        print(
            f"make demo --seeds {r['seeds']}: {r['seconds'] / GOAL_S:.2f}x the goal, {r['seconds'] / r['floor']:.2f}x its floor"
        )


if __name__ == "__main__":
    main()
