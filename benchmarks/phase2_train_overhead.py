"""Phase-2 training step as the trainer runs it against a bare PyTorch loop on the same model and batches.

    python benchmarks/phase2_train_overhead.py [--steps 12] [--repeats 5] [--batch-size 8] [--threads 1]

Both variants train in this process, on the synthetic tiny dataset, its cached tiny-encoder features and the
default tiny model (Q-former + the tiny LLM with peft LoRA):

- "trainer": `Phase2Trainer.train_epoch` capped at `--steps` optimizer steps (`max_steps`), the code path
  `vtreetrm video phase2` runs per step: the epoch order, `Batcher` (prompts, targets, features from the cached
  tensor, multi-hot labels; on its worker thread), accelerate's backward, gradient clipping, AdamW + the LR schedule, the step row in
  steps.jsonl, the progress bar (disabled output);
- "bare": the same `VideoQFormerLM` built the same way, the same batches with their inputs built before the
  clock starts, `loss.backward()` and a plain `torch.optim.AdamW` step, no run folder.

Each repeat times `--steps` steps of each variant after one warm-up step of each; the repeats alternate which
variant goes first, and the figures are the medians over the repeats. The last line is the ratio
trainer / bare of the median time per step (goal <= 1.15x).

Profile of the trainer's step (`--profile`: cProfile of 3 x 12 steps after a warm-up step, CPU, 2 cores, 1 torch
thread, batch 8), what it spent per step beyond the model's forward and backward, which the bare loop spends too:

    before                                             after
    Batcher: prompts, targets, multi-hot    4.3 ms     1.0-1.2 ms (2.0 ms in a clip's first epoch) and on a worker
      24 tokenizer calls + 8 chat renders                thread while the step before trains: prompts in one
      (2.8 ms timed alone)                               tokenizer call, each target tokenized once per clip
    clip_grad_norm_(model.parameters())     2.3 ms     1.0 ms: over the trainable parameters only
    AdamW step + LR schedule                4.2 ms     4.5 ms: unchanged (the bare loop's AdamW step costs as much)
    steps.jsonl: an open + write per step   0.2 ms     ten rows per write
    loss.item() x 2, float(grad norm),      5 syncs    none: the losses summed on the device (in float64, as the
      reduce(...).item() x 2 per step                    Python floats were), the figures of 10 steps read off
                                                         together (one sync, one reduce across processes)

(Batcher "timed alone": 16 batches of an epoch built outside the loop, per-sample tokenization as before
against `Batcher.build`.) On the CPU a `.item()` costs no wait, so there the gain is the Python work; on a GPU
each of the 5 per-step syncs also stalled the host until the device had finished the step.

Ratio on this CPU (2 cores shared with other jobs, one run each, default arguments): 1.051x with the per-step
code (commit 4f80a94), 1.067x after (569eb56). On the CPU the step is ~50 ms of arithmetic, so the few ms taken
off the trainer's step sit inside the run-to-run spread (repeats of one variant differ by up to 10 %); the
per-step syncs removed matter on a GPU, where no run has been made yet.
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from accelerate import Accelerator
from report import alternate, epoch_batches, plain_steps, trainer_steps

from vtreetrm.video.checkpoints import TrainingRun
from vtreetrm.video.config import FeatureSpec, Phase2Config
from vtreetrm.video.labels import load_dataset
from vtreetrm.video.model import Batcher, build_phase2
from vtreetrm.video.phase1 import open_cache
from vtreetrm.video.phase2 import Phase2Trainer, RunOptions, _read_inputs, rank_batches
from vtreetrm.video.synthetic import SCALES, SyntheticConfig, make_synthetic


def trainer_for(d: Path, cfg: Phase2Config, threads: int) -> Phase2Trainer:
    "A Phase2Trainer on the synthetic tiny dataset, built as `train_phase2` builds it (run folder in `d`)."
    make_synthetic(d / "syn", SyntheticConfig(**SCALES["tiny"]), datasets=("lote",), progress=False)
    opts = RunOptions(d / "syn" / "lote", FeatureSpec(cache=d / "cache"), progress=False, threads=threads)
    acc = Accelerator(cpu=not torch.cuda.is_available())
    ds = load_dataset(opts.dataset)
    inputs = _read_inputs(cfg, opts, ds, open_cache(opts.features), d / "run", acc)
    run = TrainingRun(d / "run", {"benchmark": True}, kind="phase2")
    return Phase2Trainer(cfg, run, inputs, opts, acc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12, help="timed optimizer steps per variant and repeat")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the trainer's steps and stop")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = Phase2Config(batch_size=args.batch_size, llm_pretrain_steps=0, epochs=10**6)
    with tempfile.TemporaryDirectory() as d:
        tr = trainer_for(Path(d), cfg, args.threads)
        dev = tr.acc.device
        # the bare loop: the same model, built the same way, starting from the trainer's weights
        model, _ = build_phase2(cfg, tr.inputs.ds, tuple(tr.inputs.feats.shape[1:]))
        model.load_state_dict(tr.core.state_dict())
        model.to(dev).train()
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
        batcher = Batcher(tr.inputs.tok, cfg, tr.inputs.cand, tr.inputs.feats)

        def bare_inputs(epoch: int, n: int) -> list:
            "The inputs of the first `n` batches of `epoch` as the trainer draws them, built up front."
            return [batcher(b, epoch, dev)[:4] for b in epoch_batches(tr.inputs, cfg, epoch, n)]

        run_bare, run_trainer = plain_steps(lambda x: model(*x), opt), trainer_steps(tr, cfg)

        def sync():
            if dev.type == "cuda":
                torch.cuda.synchronize()

        n_batches = len(rank_batches(tr.inputs.train, cfg.batch_size))
        if args.steps > n_batches:
            print(f"note: an epoch has {n_batches} batches; --steps capped to {n_batches}")
            args.steps = n_batches
        if args.profile:
            import cProfile
            import pstats

            run_trainer(1, 1)
            pr = cProfile.Profile()
            pr.enable()
            for r in range(args.repeats):
                run_trainer(args.steps, 2 + r)
            sync()
            pr.disable()
            pstats.Stats(pr).sort_stats("cumulative").print_stats(40)
            pstats.Stats(pr).sort_stats("tottime").print_stats(25)
            pstats.Stats(pr).sort_stats("cumulative").print_callees("train_epoch")
            return
        xs = [bare_inputs(1 + r, args.steps) for r in range(args.repeats)]  # built before any clock starts
        variants = {"trainer": lambda r, n: run_trainer(n, 1 + r), "bare": lambda r, n: run_bare(xs[r][:n])}
        times = alternate(args.repeats, args.steps, variants, sync)
        med = {k: statistics.median(v) for k, v in times.items()}
        for k, v in times.items():
            print(f"{k:<8} median {med[k] * 1e3:8.2f} ms/step   repeats {' '.join(f'{t * 1e3:.2f}' for t in v)}")
        print(
            f"ratio trainer / bare loop: {med['trainer'] / med['bare']:.3f}x  (goal <= 1.15x; device {dev.type}, "
            f"batch {cfg.batch_size}, {args.steps} steps x {args.repeats} repeats, threads {args.threads})"
        )


if __name__ == "__main__":
    sys.exit(main())
