"""Segment decoding of a long video against decoding the whole file, and feature throughput with decoding workers.

    python benchmarks/video_decode.py [--minutes 10] [--segments 100] [--feature-segments 1000] [--workers 2]

Writes a synthetic 1280x720 H.264 video of `--minutes` minutes with PyAV (frames that show their index), then:

1. **memory**: `--segments` random segments of 2-4 s, T=8, decoded by `decode_clip` in a fresh subprocess; prints
   that process's peak RSS growth over a subprocess that only opens the file;
2. **speed**: seconds per segment of `decode_clip` against the path it replaces, which decoded every frame of the
   file before sampling (timed here on two segments without keeping the frames, so its time is a lower bound and
   its memory, 2.7 MB per 720p frame, is not spent); prints the ratio;
3. **features**: `--feature-segments` segments through `FeatureCache` with the tiny encoder, `--workers 0` and
   `--workers N`: segments/s of each, their ratio, and the fraction of the wall time the encoder waited for frames.
"""

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import av
import numpy as np


def write_video(path: Path, minutes: float, fps: int = 25, w: int = 1280, h: int = 720):
    "Frames with their index in the pixels, H.264 (ultrafast) in an mp4."
    n = int(minutes * 60 * fps)
    base = np.zeros((h, w, 3), np.uint8)
    base[:, :, 2] = np.linspace(0, 255, w, dtype=np.uint8)[None]
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.options = {"preset": "ultrafast", "crf": "30", "g": str(fps * 2)}
        for i in range(n):
            f = base.copy()
            f[:, :, 0] = i % 256
            f[: h // 4, : (i * 7) % w] = 255
            for p in s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return n


def segments(n: int, seconds: float, seed: int = 0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        L = rng.uniform(2, 4)
        a = rng.uniform(0, seconds - L)
        out.append((round(a, 3), round(a + L, 3)))
    return out


CHILD = r"""
import json, resource, sys, time
from vtreetrm.video.features import decode_clip
import av
path, segs, mode = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
with av.open(path) as c: pass
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
if mode == 'segments':
    for a, b in segs: decode_clip(path, 8, a, b)
print(json.dumps({'rss_growth_mb': (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024, 'seconds': time.perf_counter() - t0}))
"""


def child(path, segs, mode):
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), json.dumps(segs), mode], capture_output=True, text=True, check=True
    )
    return json.loads(r.stdout.strip().splitlines()[-1])


def decode_everything(path):
    "What decoding a segment cost before: every frame of the file (here not kept, so a lower bound)."
    t0 = time.perf_counter()
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        s.thread_type = "AUTO"
        for f in c.decode(s):
            f.to_ndarray(format="rgb24")
    return time.perf_counter() - t0


def features(path, segs, workers, root):
    from vtreetrm.video.features import FeatureCache, Sampling, load_vision_encoder
    from vtreetrm.video.labels import Clip

    clips = [Clip(f"s{i}", str(path), ["x"], None, None, "train", "bench", a, b) for i, (a, b) in enumerate(segs)]
    cache = FeatureCache(root, load_vision_encoder("tiny"), Sampling(frames=8), batch_size=32, workers=workers)
    t0 = time.perf_counter()
    _, rep = cache.features_for(clips, progress=False)
    wall = time.perf_counter() - t0
    assert rep["encoded"] == len(clips), rep
    return {
        "segments_per_s": len(clips) / wall,
        "encoder_idle_fraction": cache.timing["decode_wait"] / wall,
        "seconds": wall,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--segments", type=int, default=100)
    ap.add_argument("--feature-segments", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        path = d / "long.mp4"
        t0 = time.perf_counter()
        n = write_video(path, a.minutes)
        print(
            f"video: {a.minutes:g} min 1280x720 H.264, {n} frames, {path.stat().st_size / 2**20:.1f} MiB, written in {time.perf_counter() - t0:.0f} s"
        )
        segs = segments(a.segments, a.minutes * 60)
        new, idle = child(path, segs, "segments"), child(path, [], "open")
        per_new = new["seconds"] / len(segs)
        old = [decode_everything(path) for _ in range(2)]
        per_old = min(old)
        print(
            f"decode: {len(segs)} segments of 2-4 s, T=8: {per_new * 1000:.0f} ms/segment, peak RSS growth {new['rss_growth_mb'] - idle['rss_growth_mb']:.0f} MiB"
        )
        print(
            f"decode: whole-file path {per_old:.1f} s/segment (lower bound) -> segment decoding {per_old / per_new:.0f}x faster"
        )
        fsegs = segments(a.feature_segments, a.minutes * 60, seed=1)
        features(path, fsegs[:2], 0, d / "warm")  # imports and the encoder's first call are not timed
        f0 = features(path, fsegs, 0, d / "c0")
        fN = features(path, fsegs, a.workers, d / f"c{a.workers}")
        for w, f in ((0, f0), (a.workers, fN)):
            print(
                f"features: {len(fsegs)} segments, tiny encoder, --workers {w}: {f['segments_per_s']:.1f} segments/s, "
                f"encoder idle {100 * f['encoder_idle_fraction']:.0f}% of {f['seconds']:.0f} s"
            )
        print(f"features: --workers {a.workers} / --workers 0 = {fN['segments_per_s'] / f0['segments_per_s']:.2f}x")


if __name__ == "__main__":
    main()
