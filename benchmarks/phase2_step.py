"""Phase-2 training throughput with cached frozen features against the same step with the encoder in the loop.

    python benchmarks/phase2_step.py [--encoder tiny|vit-s] [--steps 20] [--batch-size 8] [--threads 1]

Both variants are timed in this process on the same synthetic clips and the same default tiny model: "cached"
reads the features from the on-disk cache (np.load per clip), "encoder" decodes the clips with PyAV and encodes
them with the frozen Dinov2Model in every step. `--encoder tiny` is the default 32-pixel random encoder;
`--encoder vit-s` a random Dinov2 shaped like DINOv2 ViT-S/14 at 224 pixels (what real runs pay per clip).
Prints samples/s of each variant, their ratio, and the peak memory of each, measured in a fresh subprocess per
variant (CPU: that process's peak RSS, which includes filling the cache once; CUDA: max allocated during the
timed steps).
"""

import argparse
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from transformers import Dinov2Config, Dinov2Model

from vtreetrm.video.config import Phase2Config
from vtreetrm.video.features import FeatureCache, Sampling, decode_clip, encode_frames, load_vision_encoder
from vtreetrm.video.labels import load_dataset
from vtreetrm.video.model import build_phase2, candidates_for, encode_prompt, encode_target, make_samples
from vtreetrm.video.phase1 import dataset_features
from vtreetrm.video.synthetic import SCALES, SyntheticConfig, make_synthetic


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoder", choices=["tiny", "vit-s"], default="tiny")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per variant (default 20 tiny, 3 vit-s)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--num-queries", type=int, default=32)
    ap.add_argument(
        "--only", choices=["cached", "encoder"], help="run one variant and print its peak memory (used internally)"
    )
    args = ap.parse_args()
    args.steps = args.steps or (20 if args.encoder == "tiny" else 3)
    torch.set_num_threads(args.threads)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        make_synthetic(d / "syn", SyntheticConfig(**SCALES["tiny"]), datasets=("lote",), progress=False)
        ds = load_dataset(d / "syn" / "lote")
        if args.encoder == "tiny":
            enc = load_vision_encoder("tiny")
        else:
            torch.manual_seed(0)
            enc = (
                Dinov2Model(
                    Dinov2Config(
                        hidden_size=384, num_hidden_layers=12, num_attention_heads=6, patch_size=14, image_size=224
                    )
                )
                .requires_grad_(False)
                .eval()
            )
            enc.vision_source = "random-vit-s"
        cache = FeatureCache(d / "cache", enc.to(dev), Sampling())
        ds.clips = [c for c in ds.clips if c.split == "train"][: 4 * args.batch_size] + [
            c for c in ds.clips if c.split != "train"
        ]
        ds.clips = ds.clips[: 4 * args.batch_size + 2]
        clips, feats, _ = dataset_features(ds, cache, progress=False)  # fills the cache once
        cfg = Phase2Config(num_queries=args.num_queries, batch_size=args.batch_size)
        model, tok = build_phase2(cfg, ds, tuple(feats.shape[1:]))
        model.to(dev).train()
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
        train = make_samples(clips, ds, "official", "train")
        by_id = {c.id: c for c in clips}
        cand = ds.labels.labels("official")
        rng = random.Random(0)

        def step(batch, get_feats):
            fb = get_feats(batch).to(dev)
            enc = [encode_prompt(tok, candidates_for(cand, s.id, 0)) for s in batch]
            tgt = [encode_target(tok, s, cfg.answer_order) for s in batch]
            loss = model(fb, [e[0] for e in enc], [e[1] for e in enc], tgt)
            opt.zero_grad()
            loss.backward()
            opt.step()

        def cached(batch):
            return torch.from_numpy(
                np.stack([np.load(cache.path_for(cache.clip_sha(by_id[s.id].video))) for s in batch])
            )

        def encoder(batch):
            frames = np.stack([decode_clip(by_id[s.id].video, cache.sampling.frames)[0] for s in batch])
            return encode_frames(cache.model, frames, cache.sampling)

        results = {}
        variants = [(n, f) for n, f in (("cached", cached), ("encoder", encoder)) if args.only in (None, n)]
        for name, fn in variants:
            batches = [rng.sample(train, args.batch_size) for _ in range(args.steps + 2)]
            for b in batches[:2]:
                step(b, fn)  # warm-up
            if dev.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            for b in batches[2:]:
                step(b, fn)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            mem = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else peak_rss_mb()
            results[name] = (args.steps * args.batch_size / dt, mem)
    if args.only:
        print(f"peak_memory_mib {results[args.only][1]:.1f}")
        return
    for name, (sps, _) in results.items():
        cmd = [
            sys.executable,
            __file__,
            "--only",
            name,
            "--encoder",
            args.encoder,
            "--steps",
            str(args.steps),
            "--batch-size",
            str(args.batch_size),
            "--threads",
            str(args.threads),
            "--num-queries",
            str(args.num_queries),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True).stdout
        mem = next((float(l.split()[1]) for l in out.splitlines() if l.startswith("peak_memory_mib")), float("nan"))
        print(
            f"{name:<8} {sps:8.1f} samples/s   peak memory {'(CUDA max allocated)' if dev.type == 'cuda' else '(process peak RSS)'} {mem:8.1f} MiB"
        )
    print(
        f"ratio cached / encoder-in-the-loop: {results['cached'][0] / results['encoder'][0]:.2f}x  "
        f"(encoder {args.encoder}, device {dev.type}, batch {args.batch_size}, M={args.num_queries}, {args.steps} steps)"
    )


if __name__ == "__main__":
    sys.exit(main())
