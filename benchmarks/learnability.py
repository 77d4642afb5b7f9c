"""How well the tiny model learns with the CLI defaults, and how much the figure moves between runs.

    python benchmarks/learnability.py [--seeds 0 1 2] [--work DIR] [--out reports] [--quick]

Runs the defaults chain through the CLI, each step a subprocess: `vtreetrm video make-synthetic`,
`video phase1 SYN/lote SYN/mammalnet`, `video phase2 SYN/lote --phase1 P1/best` once per seed (1 thread each), its
`--shuffle-labels` control, the MammalNet-shaped set, the first seed again on 2 threads (the CLI's default on 2
cores: another summation order), and `video ladder SYN/lote --phase1 P1/best` for the linear probes. The 1-thread
Phase-2 runs go 2 at a time; the 2-thread run goes alone. Writes reports/learnability.json (every run's scores, the
spread over seeds: mean, sd, min-max; the 1- against 2-thread difference and whether it is within 3 points; each
step's wall time; what produced them) and reports/learnability.md, the table the README shows.

`--quick` renders the tiny datasets and trains 1 epoch on 2 seeds (a check of the plumbing, under a minute; its
summary says so and the README refuses it)."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from report import begin, write_report

SCORES = ("top1_accuracy_single_label", "macro_f1", "majority_top1", "chance_top1")


def cli(*args) -> list:
    "The argv of `vtreetrm ARGS`: the console script's entry point through this interpreter."
    return [sys.executable, "-c", "from vtreetrm.cli import console_main; console_main()", *map(str, args)]


def run_step(name: str, argv: list, log: Path, t_start: float, env: dict = None) -> tuple[int, float]:
    "Run one CLI step (its output to `log`, `env` its environment), with a progress line: (exit code, seconds)."
    t0 = time.time()
    print(f"[{time.time() - t_start:6.0f} s] start {name}", flush=True)
    with open(log, "w") as f:
        rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    dt = time.time() - t0
    print(f"[{time.time() - t_start:6.0f} s] done  {name} ({f'exit {rc}, ' if rc else ''}{dt:.0f} s)", flush=True)
    return rc, dt


def step(name: str, argv: list, log: Path, t_start: float, env: dict = None) -> float:
    "`run_step`, exiting on a failure: its wall time in seconds."
    rc, dt = run_step(name, argv, log, t_start, env)
    if rc:
        sys.exit(f"{name} failed (exit {rc}): {' '.join(map(str, argv))}\n{log.read_text()[-3000:]}")
    return dt


def scores(run: Path) -> dict:
    m = json.loads((run / "metrics.json").read_text())
    return {k: m[k] for k in SCORES}


def spread(xs: list) -> dict:
    return {"mean": statistics.mean(xs), "sd": statistics.stdev(xs) if len(xs) > 1 else 0.0, "min": min(xs), "max": max(xs), "n": len(xs)}  # fmt: skip


def markdown(f: dict) -> str:
    "The runs' table and the spread, as the README shows them."
    out = [
        "| Phase-2 run | seed | threads | Top1 | Macro-F1 | majority class | chance |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in f["runs"]:
        out.append(f"| {r['name']} | {r['seed']} | {r['threads']} | {r['top1_accuracy_single_label']:.3f} | "
                   f"{r['macro_f1']:.3f} | {r['majority_top1']:.3f} | {r['chance_top1']:.3f} |")  # fmt: skip
    out += ["", "| linear probe on the LoTE-shaped test split | Top1 | Macro-F1 |", "|---|---|---|"]
    out += [f"| {g['stage']} | {g['top1']:.3f} | {g['macro_f1']:.3f} |" for g in f["probes"]]
    s, t = f["seed_spread"], f["threads"]
    out += ["", f"LoTE-shaped Top1 over {s['top1']['n']} seeds (1 thread each): mean {s['top1']['mean']:.3f}, "
            f"sd {s['top1']['sd']:.3f}, min-max {s['top1']['min']:.3f}-{s['top1']['max']:.3f} (Macro-F1 mean "
            f"{s['macro_f1']['mean']:.3f}, sd {s['macro_f1']['sd']:.3f}). Seed {t['seed']} on 1 against 2 threads: "
            f"Top1 {t['top1_1']:.3f} against {t['top1_2']:.3f}, {100 * abs(t['top1_diff']):.1f} points apart, "
            f"{'within' if t['within_3_points'] else 'more than'} 3 points. Wall time: rendering "
            f"{f['seconds']['make_synthetic']:.0f} s, Phase-1 {f['seconds']['phase1']:.0f} s, "
            f"{len(f['runs'])} Phase-2 runs {f['seconds']['phase2']:.0f} s."]  # fmt: skip
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="Phase-2 seeds of the spread (1 thread)")
    ap.add_argument("--work", help="folder for data, runs and logs (default: a temporary folder, removed)")
    ap.add_argument("--out", help="folder for learnability.json/.md (default: the repository's reports/)")
    ap.add_argument("--quick", action="store_true", help="tiny data, 1 epoch: checks the plumbing only")
    args = ap.parse_args()
    t_start, pv = time.time(), begin(vars(args))
    tmp = None if args.work else tempfile.TemporaryDirectory(prefix="learnability-")
    w = Path(args.work or tmp.name)
    w.mkdir(parents=True, exist_ok=True)
    syn, cache, p1 = w / "syn", w / "cache", w / "p1"
    quick_p1 = ["--epochs", 1] if args.quick else []
    quick_p2 = ["--epochs", 1, "--llm-pretrain-steps", 5] if args.quick else []
    sec = {}
    sec["make_synthetic"] = step(
        "make-synthetic", cli("video", "make-synthetic", "--out", syn, "--scale", "tiny" if args.quick else "default",
                              "--overwrite"), w / "make_synthetic.log", t_start)  # fmt: skip
    sec["phase1"] = step(
        "phase1", cli("video", "phase1", syn / "lote", syn / "mammalnet", "--out", p1, "--cache", cache, *quick_p1),
        w / "phase1.log", t_start,
    )  # fmt: skip

    def phase2(name, dataset, seed, threads, *extra):
        argv = cli("video", "phase2", syn / dataset, "--out", w / name, "--phase1", p1 / "best", "--cache", cache,
                   "--seed", seed, "--threads", threads, *quick_p2, *extra)  # fmt: skip
        return {"name": name, "dataset": dataset, "seed": seed, "threads": threads, "args": list(map(str, extra)),
                "seconds": round(step(name, argv, w / f"{name}.log", t_start))}  # fmt: skip

    s0 = args.seeds[0]
    one = [(f"lote_seed{s}", "lote", s, 1) for s in args.seeds]
    one += [(f"lote_seed{s0}_shuffled", "lote", s0, 1, "--shuffle-labels"), (f"mammalnet_seed{s0}", "mammalnet", s0, 1)]
    t0 = time.time()
    with ThreadPoolExecutor(2) as ex:  # two 1-thread runs at a time, one per core
        runs = list(ex.map(lambda j: phase2(*j), one))
    runs.append(phase2(f"lote_seed{s0}_threads2", "lote", s0, 2))  # alone: it takes both cores
    sec["phase2"] = time.time() - t0
    for r in runs:
        r.update(scores(w / r["name"]))
    sec["ladder"] = step(
        "ladder", cli("video", "ladder", syn / "lote", "--phase1", p1 / "best", "--cache", cache, "--out",
                      w / "ladder.json"), w / "ladder.log", t_start)  # fmt: skip
    probes = [{k: g.get(k) for k in ("stage", "top1", "macro_f1")}
              for g in json.loads((w / "ladder.json").read_text())["rungs"] if g.get("top1") is not None]  # fmt: skip
    by = {r["name"]: r for r in runs}
    seeds = [by[f"lote_seed{s}"] for s in args.seeds]
    t1, t2 = by[f"lote_seed{s0}"], by[f"lote_seed{s0}_threads2"]
    diff = t2["top1_accuracy_single_label"] - t1["top1_accuracy_single_label"]
    figures = {
        "runs": runs,
        "probes": probes,
        "seed_spread": {
            "top1": spread([r["top1_accuracy_single_label"] for r in seeds]),
            "macro_f1": spread([r["macro_f1"] for r in seeds]),
        },
        "threads": {
            "seed": s0,
            "top1_1": t1["top1_accuracy_single_label"],
            "top1_2": t2["top1_accuracy_single_label"],
            "top1_diff": diff,
            "within_3_points": abs(diff) <= 0.03,
        },
        "seconds": {k: round(v) for k, v in sec.items()},
    }
    pv["params"].update(phase1_extra=list(map(str, quick_p1)), phase2_extra=list(map(str, quick_p2)))
    paths = write_report("learnability", figures, markdown(figures), pv, time.time() - t_start, args.quick, args.out)
    print(markdown(figures))
    print("wrote", *paths)
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
