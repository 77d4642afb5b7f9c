"""Feature extraction from one long video: peak memory by segment count, and throughput against bare PyAV.

    python benchmarks/video_decode.py [--minutes 10] [--workers 0] [--repeats 3] [--quick]

Writes a synthetic 1280x720 H.264 video of `--minutes` minutes with PyAV (frames that show their index), then, each
in a fresh subprocess:

1. **memory**: 10, 100 and 1,000 random segments of 2-4 s (T=8) through `FeatureCache.features_for(keep=False)` (how
   `video features` fills a cache: the features are written, not returned) with the tiny encoder (batch 32): that
   process's peak RSS growth over one that only imported everything and opened the file. It should be set by the
   batch, not by the number of segments;
2. **speed**: the 1,000-segment run's segments/s against a bare PyAV loop over the same sampled timestamps, both in
   a fresh process set up the same way (everything imported, the tiny encoder loaded, the file opened once), and the
   encoder's share of the features wall time. What each side does per segment:

   - *features* (`FeatureCache.features_for`, `--workers N`): hash the file (once, memoised), open it, seek to the
     keyframe before the segment (further back when the frames there are not clean), decode forward in presentation
     order, convert only the frame on screen at each of the T times to RGB at the encoder's input size (64x64, one
     libswscale call, display matrix applied), encode the clips in batches of 32 and write each clip's features and
     decoding info to the cache;
   - *bare PyAV*: one container open for all segments; seek to the keyframe before the segment, decode forward,
     convert the frame on screen at each time to RGB at the same 64x64 (`to_ndarray(width=64, height=64)`, what a
     user feeding a 64-pixel encoder writes); no checks, no encoder, nothing written.

   On a machine shared with other work the speed is timed in `--repeats` alternating (bare, features) pairs (the
   first features run is the 1,000-segment memory run) and the median pair's ratio is reported, with every pair.
   "encoder busy" is the time the encoder (and the conversion to its input) took. (Decoding in a thread while the
   encoder runs was tried: on 2 cores it competed with torch's and FFmpeg's own threads, 0.87x and more memory.)
   `--quick` uses a 1-minute video and 10/30/100 segments (a check that it runs).
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
import av
from vtreetrm.video.features import FeatureCache, Sampling, load_vision_encoder, segment_times
from vtreetrm.video.labels import Clip
path, segs, mode, workers, root = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
enc = load_vision_encoder("tiny")
S = Sampling(frames=8).resolved(enc).image_size  # the encoder's input size: both sides convert frames to it
with av.open(path) as c: pass
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
out = {}
if mode == "features":
    clips = [Clip(f"s{i}", path, ["x"], None, None, "train", "bench", a, b) for i, (a, b) in enumerate(segs)]
    cache = FeatureCache(root, enc, Sampling(frames=8), batch_size=32, workers=workers)
    _, rep = cache.features_for(clips, progress=False, keep=False)  # as `video features` fills a cache
    assert rep["encoded"] == len(clips), rep
    out["encode_s"] = cache.timing["encode"]
elif mode == "bare":
    with av.open(path) as c:
        s = c.streams.video[0]
        s.thread_type = "AUTO"
        for a, b in segs:
            times = segment_times(a, b, 8)
            c.seek(int(a / s.time_base), stream=s, backward=True, any_frame=False)
            j, prev = 0, None
            for f in c.decode(s):
                while j < 8 and times[j] < f.time:
                    (f if prev is None else prev).to_ndarray(width=S, height=S, format="rgb24")
                    j += 1
                if j == 8:
                    break
                prev = f
out["seconds"] = time.perf_counter() - t0
out["rss_growth_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
print(json.dumps(out))
"""


def child(path, segs, mode, workers=0, root=""):
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), json.dumps(segs), mode, str(workers), str(root)],
        capture_output=True,
        text=True,
    )
    if r.returncode:
        sys.exit(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a 1-minute video and 10/30/100 segments")
    ap.add_argument(
        "--repeats", type=int, default=3, help="alternating bare/features pairs timed (the median is reported)"
    )
    a = ap.parse_args()
    minutes, counts = (1.0, (10, 30, 100)) if a.quick else (a.minutes, (10, 100, 1000))
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        path = d / "long.mp4"
        t0 = time.perf_counter()
        n = write_video(path, minutes)
        print(
            f"video: {minutes:g} min 1280x720 H.264, {n} frames, {path.stat().st_size / 2**20:.1f} MiB, "
            f"written in {time.perf_counter() - t0:.0f} s"
        )
        idle = child(path, [], "none")
        runs = {}
        for k in counts:
            runs[k] = child(path, segments(k, minutes * 60, seed=k), "features", a.workers, d / f"c{k}")
            print(
                f"features: {k:>5} segments of 2-4 s, T=8, batch 32, --workers {a.workers}: peak RSS growth "
                f"{runs[k]['rss_growth_mb'] - idle['rss_growth_mb']:.0f} MiB, {k / runs[k]['seconds']:.1f} segments/s"
            )
        k, segs = counts[-1], segments(counts[-1], minutes * 60, seed=counts[-1])
        pairs = [(child(path, segs, "bare"), runs[k])]
        for i in range(1, a.repeats):  # alternating, so load from other processes hits both sides alike
            pairs.append((child(path, segs, "bare"), child(path, segs, "features", a.workers, d / f"r{i}")))
        for i, (b, f) in enumerate(pairs):
            print(
                f"pair {i + 1}: bare PyAV {k / b['seconds']:.1f} segments/s, features {k / f['seconds']:.1f} segments/s "
                f"= {b['seconds'] / f['seconds']:.2f}x (encoder busy {100 * f['encode_s'] / f['seconds']:.0f}% of its wall time)"
            )
        b, f = sorted(pairs, key=lambda p: p[0]["seconds"] / p[1]["seconds"])[len(pairs) // 2]
        print(
            f"median of {len(pairs)} pairs, {k} segments, same timestamps: bare PyAV {k / b['seconds']:.1f} segments/s, "
            f"features {k / f['seconds']:.1f} segments/s, features / bare PyAV = {b['seconds'] / f['seconds']:.2f}x; "
            f"encoder busy {100 * f['encode_s'] / f['seconds']:.0f}% of the features wall time ({f['seconds']:.0f} s)"
        )


if __name__ == "__main__":
    main()
