"""Real footage as it comes, reproduced in small files written here with PyAV: keyframe flags that are not clean
entry points, B-frames in AVI (decode-order timestamps), rotation and flips in the display matrix, variable frame
rate, yuv444p and mixed frame sizes in one encoder batch. Each segment `decode_clip` samples must equal the frame on
screen at that time in a decode from the start of the same file (with the display matrix applied), or be refused."""

import json
import re
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from vtreetrm.cli import main
from vtreetrm.video.features import FeatureCache, Sampling, decode_clip, load_vision_encoder, segment_times
from vtreetrm.video.labels import Clip

torch.set_num_threads(1)

W, H, FPS = 48, 32, 25


def run(*args):
    return main([str(a) for a in args])


def refused(capsys, rc, *needles):
    "Exit 2 and one `error:` line holding every needle; returns the line."
    err = capsys.readouterr().err
    lines = re.findall(r"(?:error|warning): [^\r\n]*", err)
    assert rc == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert str(n) in lines[0], (n, err)
    return lines[0]


def picture(i: int, w: int = W, h: int = H) -> np.ndarray:
    "Frame i: its index in the colour, a bar whose length moves, a white corner top-left (orientation visible)."
    f = np.zeros((h, w, 3), np.uint8)
    f[:, :, 0] = (i * 37) % 256
    f[:, :, 1] = (i * 11) % 256
    f[h // 2 :, : (i * 3) % w + 1, 2] = 255
    f[:6, :6] = 255
    return f


def write(
    path: Path,
    n: int = 150,  # frames
    codec: str = "mpeg4",
    options: dict = None,  # encoder options
    w: int = W,
    h: int = H,
    pix_fmt: str = "yuv420p",
    packets=None,  # change each packet before it is muxed
    times_ms: list = None,  # presentation times (variable frame rate)
    rotation: tuple = None,  # (degrees counter-clockwise, hflip, vflip) written as the display matrix
) -> Path:
    "A small video of `picture` frames."
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as c:
        s = c.add_stream(codec, rate=FPS)
        s.width, s.height, s.pix_fmt = w, h, pix_fmt
        s.thread_count = 1
        s.options = options or {}
        if times_ms is not None:
            s.codec_context.time_base = Fraction(1, 1000)
        if rotation is not None:
            s.set_display_rotation(rotation[0], hflip=rotation[1], vflip=rotation[2])

        def mux(ps):
            for p in ps:
                if packets is not None:
                    packets(p)
                c.mux(p)

        for i in range(n):
            f = av.VideoFrame.from_ndarray(picture(i, w, h), format="rgb24")
            if times_ms is not None:
                f.pts, f.time_base = times_ms[i], Fraction(1, 1000)
            mux(s.encode(f))
        mux(s.encode())
    return path


def displayed(a: np.ndarray, rotation) -> np.ndarray:
    "A stored frame as PyAV documents its display matrix: turned counter-clockwise, then mirrored."
    if rotation is None:
        return a
    out = np.rot90(a, rotation[0] // 90)
    if rotation[1]:
        out = out[:, ::-1]
    if rotation[2]:
        out = out[::-1]
    return out


def reference(path: Path, T: int, start: float, end: float, rotation=None) -> np.ndarray:
    "Decode every frame from the start, in presentation order, and pick the frame on screen at each sampled time."
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        s.thread_count = 1
        tb = float(s.time_base)
        fr = [(f.pts, f.time, f.to_ndarray(format="rgb24")) for f in c.decode(s)]
    times = sorted(p for p, _, _ in fr)  # decoder output is in presentation order; the times may not be
    fr = [(p * tb, a) for p, (_, _, a) in zip(times, fr)]
    return np.stack(
        [displayed([a for t, a in fr if t <= x + 1e-9][-1], rotation) for x in segment_times(start, end, T)]
    )


SEGMENTS = [(0.3, 1.1), (1.37, 2.2), (2.5, 3.3), (4.1, 5.9)]


def same_as_reference(path: Path, rotation=None, segments=SEGMENTS, T: int = 6):
    for a, b in segments:
        got, _ = decode_clip(path, T, a, b)
        want = reference(path, T, a, b, rotation)
        assert got.shape == want.shape, (a, b, got.shape, want.shape)
        assert np.array_equal(got, want), (path.name, a, b)


# ---------------------------------------------------------------- the decoder


def _all_keyframes(p):
    p.is_keyframe = True  # a container that flags every packet a keyframe: most are not clean entry points


@pytest.mark.parametrize("codec", ["mpeg4", "libx264"])
def test_keyframe_flags_that_are_not_entry_points(tmp_path, codec):
    "A seek lands on a packet flagged key that is a P-frame: the frames decoded from it are garbage or come late."
    opts = {"g": "50", "bf": "0", "sc_threshold": "1000000000"}  # P-frames, not scene-cut I-frames
    f = write(tmp_path / f"{codec}.mp4", codec=codec, options=opts, packets=_all_keyframes)
    same_as_reference(f)


def test_open_gop_with_b_frames(tmp_path):
    "x264 open GOP (non-IDR I-frames, leading B-frames that reference the previous GOP)."
    opts = {"x264-params": "open-gop=1:keyint=30:min-keyint=30:bframes=3:scenecut=0:threads=1"}
    same_as_reference(write(tmp_path / "og.mp4", codec="libx264", options=opts))


def test_intra_refresh(tmp_path):
    "x264 periodic intra refresh: no IDR after the first frame, recovery points instead."
    opts = {"x264-params": "intra-refresh=1:keyint=30:bframes=0:threads=1"}
    same_as_reference(write(tmp_path / "ir.mp4", codec="libx264", options=opts))


def _decode_order_times(p):
    p.pts = p.dts  # an AVI holds no presentation times: each packet gets its position in decode order


@pytest.mark.parametrize("codec", ["mpeg4", "libx264"])
def test_b_frames_in_avi(tmp_path, codec):
    "B-frames in AVI: frame times arrive out of order; sampling is by presentation time."
    f = write(tmp_path / f"{codec}.avi", codec=codec, options={"bf": "2", "g": "25"}, packets=_decode_order_times)
    same_as_reference(f)


@pytest.mark.parametrize(
    "rotation", [(90, 0, 0), (180, 0, 0), (270, 0, 0), (0, 1, 0), (0, 0, 1), (90, 1, 0), (270, 0, 1)]
)
def test_display_matrix_is_applied(tmp_path, rotation):
    "A phone clip is encoded as it is shown, not lying on its side or mirrored."
    f = write(tmp_path / "r.mp4", n=60, rotation=rotation)
    same_as_reference(f, rotation, segments=[(0.1, 0.9), (1.3, 2.3)])
    x, _ = decode_clip(f, 3)
    assert x.shape[1:3] == ((W, H) if rotation[0] % 180 else (H, W))
    corner = displayed(np.pad(np.ones((6, 6), bool), ((0, H - 6), (0, W - 6))), rotation)
    assert x[0][corner].min() > 200  # the white corner is where the display puts it


def test_variable_frame_rate(tmp_path):
    "Frames 40 ms apart, then 250 ms apart: sampled at the right moments, not by index."
    t = [k * 40 for k in range(50)] + [2000 + k * 250 for k in range(20)]
    f = write(tmp_path / "vfr.mkv", n=70, times_ms=t)
    same_as_reference(f, segments=[(0.5, 1.5), (1.5, 4.0), (3.0, 6.0)])


def test_yuv444p(tmp_path):
    same_as_reference(write(tmp_path / "444.mp4", codec="libx264", pix_fmt="yuv444p", options={"g": "30"}))


# ---------------------------------------------------------------- any mix of sizes in one dataset


def _mixed(tmp_path) -> list:
    "Clips of three stored sizes, one of them turned a quarter by its display matrix, one yuv444p."
    v = tmp_path / "videos"
    files = [
        write(v / "a.mp4", n=40),
        write(v / "b.mp4", n=40, w=64, h=48, codec="libx264", pix_fmt="yuv444p"),
        write(v / "c.mp4", n=40, w=40, h=24, rotation=(90, 0, 0)),
    ]
    return [Clip(f.stem, str(f), ["Walking"], None, None, "train", "mix", 0.0, 1.5) for f in files]


def test_mixed_sizes_encode_in_one_batch(tmp_path):
    "A batch holding clips of different sizes encodes; each clip's features do not depend on its batch."
    clips, enc = _mixed(tmp_path), load_vision_encoder("tiny")
    together, rep = FeatureCache(tmp_path / "c1", enc, Sampling(frames=4), batch_size=3).features_for(
        clips, progress=False
    )
    assert rep["encoded"] == 3
    alone, _ = FeatureCache(tmp_path / "c2", enc, Sampling(frames=4), batch_size=1).features_for(clips, progress=False)
    for c in clips:
        np.testing.assert_allclose(together[c.id], alone[c.id], atol=1e-5)


def test_mixed_sizes_through_the_commands(tmp_path, capsys):
    "`video features` on a dataset of mixed sizes (no --batch-size 1 needed)."
    clips = _mixed(tmp_path)
    ann = tmp_path / "a.csv"
    rows = [f"{Path(c.video).stem},0,1.5,Walking,train" for c in clips] + ["a,0.2,1.4,Resting,train"]
    ann.write_text("video,start,end,label,split\n" + "\n".join(rows) + "\n")
    ds = tmp_path / "ds"
    assert run("video", "import", ann, "--format", "csv", "--videos", tmp_path / "videos", "--out", ds) == 0
    assert run("video", "features", ds, "--cache", tmp_path / "cache", "--batch-size", 4) == 0
    assert "4 encoded" in capsys.readouterr().out


# ---------------------------------------------------------------- bad input: one line, exit 2; --skip-bad counts


def _manifest(ds: Path, videos: list) -> Path:
    ds.mkdir(parents=True, exist_ok=True)
    (ds / "label_map.json").write_text(json.dumps({"Walking": "walking"}))
    rows = [
        {"id": f"c{i}", "video": str(v), "start": 0.0, "end": 1.0, "labels": ["Walking"], "split": "train"}
        for i, v in enumerate(videos)
    ]
    (ds / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ds


def _no_video_stream(path: Path) -> Path:
    with av.open(str(path), "w") as c:
        s = c.add_stream("aac", rate=8000)
        for i in range(20):
            f = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
            f.sample_rate, f.pts = 8000, i * 1024
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


@pytest.mark.parametrize("bad", ["empty", "truncated", "no video stream"])
def test_bad_video_files(tmp_path, capsys, bad):
    good = write(tmp_path / "good.mp4", n=50)
    f = tmp_path / "bad.mp4"
    if bad == "empty":
        f.write_bytes(b"")
    elif bad == "truncated":
        f.write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    else:
        _no_video_stream(f)
    ds = _manifest(tmp_path / "ds", [good, f])
    refused(capsys, run("video", "features", ds, "--cache", tmp_path / "cache"), "bad.mp4")
    assert run("video", "features", ds, "--cache", tmp_path / "cache", "--skip-bad") == 0
    assert "1 encoded, 0 cached, 0 sampled with repetition, 1 skipped" in capsys.readouterr().out


# ---------------------------------------------------------------- a tampered feature cache


@pytest.mark.parametrize("tamper", ["clip hashes a list", "clip hashes text", "npy text"])
def test_tampered_feature_cache(tmp_path, capsys, tamper):
    ds = _manifest(tmp_path / "ds", [write(tmp_path / "a.mp4", n=50)])
    cache = tmp_path / "cache"
    assert run("video", "features", ds, "--cache", cache) == 0
    if tamper == "clip hashes a list":
        (cache / "clip_hashes.json").write_text("[]")
    elif tamper == "clip hashes text":
        (cache / "clip_hashes.json").write_text("not json")
    else:
        for p in cache.rglob("*.npy"):
            p.write_text("not an array")
    rc = run("video", "features", ds, "--cache", cache)
    if tamper == "npy text":
        assert rc == 0  # encoded again
    else:
        refused(capsys, rc, "clip_hashes.json")


@pytest.mark.parametrize("size", [-5, 0])
def test_image_size_out_of_range(tmp_path, capsys, size):
    ds = _manifest(tmp_path / "ds", [write(tmp_path / "a.mp4", n=50)])
    refused(capsys, run("video", "features", ds, "--cache", tmp_path / "cache", "--image-size", size), "image")
