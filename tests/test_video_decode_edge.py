"""Decoder edge cases in small files written here with PyAV: a segment whose sampled frame the decoder reports
damaged, a container whose video codec this FFmpeg build cannot decode, and (at import) a 0-byte file and an
audio-only file. Each is one line naming the video, exit 2; `--skip-bad` leaves it out, counts it and caches nothing."""

import json
from pathlib import Path

import av
import numpy as np
import pytest
from test_video_real_footage import _no_video_stream, refused, run

from vtreetrm.utils import UserError
from vtreetrm.video.features import decode_clip, segment_times

FPS = 25


def write(path: Path, n: int = 150, codec: str = "libx264", container_format: str = None) -> Path:
    "n frames of 64x48 at 25 fps, each showing its index; a keyframe every 50 frames, P-frames between."
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format=container_format) as c:
        s = c.add_stream(codec, rate=FPS)
        s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
        s.thread_count = 1
        s.options = {"g": "50", "bf": "0", "sc_threshold": "1000000000"} if codec == "libx264" else {}
        for i in range(n):
            f = np.zeros((48, 64, 3), np.uint8)
            f[:, :, 0] = (i * 37) % 256
            f[24:, : i % 64 + 1, 2] = 255
            for p in s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def reference(path: Path):
    "[(seconds, is_corrupt, rgb)] of every frame, decoding from the start (no seek)."
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        s.thread_count = 1
        return [(f.time, f.is_corrupt, f.to_ndarray(format="rgb24")) for f in c.decode(s)]


def on_screen(frames, times):
    return np.stack([[a for t, _, a in frames if t <= x + 1e-9][-1] for x in times])


def manifest(ds: Path, rows: list) -> Path:
    "A dataset folder whose manifest has one row (id, video, start, end) per entry of `rows`."
    ds.mkdir(parents=True, exist_ok=True)
    (ds / "label_map.json").write_text(json.dumps({"Walking": "walking"}))
    lines = [
        json.dumps({"id": i, "video": str(v), "start": a, "end": b, "labels": ["Walking"], "split": "train"})
        for i, v, a, b in rows
    ]
    (ds / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return ds


# ---------------------------------------------------------------- a damaged frame in a sampled segment

SEGMENT, T = (2.0, 3.0), 4  # sampled at 2.125, 2.375, 2.625, 2.875 s: frames 53, 59, 65, 71 of the GOP 50..99


def damaged_copy(good: Path, bad: Path, frame: int) -> Path:
    "`good` with the coded data of `frame` (a P-frame) overwritten with noise, its slice header kept."
    with av.open(str(good)) as c:
        pos = [(p.pos, p.size) for p in c.demux(video=0) if p.size]
    b = bytearray(good.read_bytes())
    at, size = pos[frame]
    b[at + 12 : at + size] = np.random.default_rng(0).integers(0, 256, size - 12, dtype=np.uint8).tobytes()
    bad.write_bytes(bytes(b))
    return bad


def test_damaged_frame_in_a_segment(tmp_path, capsys):
    "A sampled frame the decoder reports damaged: the segment is refused naming the video and the time, never cached."
    frame = int(segment_times(*SEGMENT, T)[1] * FPS)  # 59
    bad = damaged_copy(write(tmp_path / "good.mp4"), tmp_path / "bad.mp4", frame)
    ref = reference(bad)
    assert [i for i, (_, corrupt, _) in enumerate(ref) if corrupt] == [frame]  # also when decoded from the start
    with pytest.raises(UserError, match=r"frame on screen at 2\.360 s of the segment \[2, 3\) s is damaged") as e:
        decode_clip(bad, T, *SEGMENT)
    assert "bad.mp4" in str(e.value)
    for a, b in ((0.5, 1.5), (4.1, 5.0)):  # before the damage, and after the next keyframe: as decoded from the start
        assert np.array_equal(decode_clip(bad, T, a, b)[0], on_screen(ref, segment_times(a, b, T)))

    ds = manifest(tmp_path / "ds", [("hurt", bad, *SEGMENT), ("fine", bad, 0.5, 1.5)])
    cache = tmp_path / "cache"
    feats = ("video", "features", ds, "--cache", cache, "--frames", T)
    refused(capsys, run(*feats), "bad.mp4", "2.360 s", "hurt", "--skip-bad")
    assert not list(cache.rglob("*.npy"))
    rep = tmp_path / "rep.json"
    assert run(*feats, "--skip-bad", "--report", rep) == 0
    assert "1 encoded, 0 cached, 0 sampled with repetition, 1 skipped" in capsys.readouterr().out
    r = json.loads(rep.read_text())["datasets"][str(ds)]
    assert [s["id"] for s in r["skipped"]] == ["hurt"] and "2.360 s" in r["skipped"][0]["reason"]
    assert len(list(cache.rglob("*.npy"))) == 1  # the damaged segment is never cached
    assert run(*feats, "--skip-bad") == 0  # and is refused again next time
    assert "0 encoded, 1 cached, 0 sampled with repetition, 1 skipped" in capsys.readouterr().out


# ---------------------------------------------------------------- a codec this FFmpeg build cannot decode


def unknown_codec(path: Path) -> Path:
    "An AVI whose video FourCC (mpeg4's FMP4) is rewritten to one no decoder knows."
    good = write(path.with_name("tmp-" + path.name), n=50, codec="mpeg4")
    data = good.read_bytes()
    assert data.count(b"FMP4") == 2  # the stream header and the bitmap header
    path.write_bytes(data.replace(b"FMP4", b"QQQQ"))
    good.unlink()
    with av.open(str(path)) as c:
        assert c.streams.video and c.streams.video[0].codec_context is None  # opened, but no decoder
    return path


@pytest.mark.parametrize("segment", [(None, None), (0.2, 1.0)])
def test_unknown_codec_in_video_features(tmp_path, capsys, segment):
    "`video features`: a clip (whole or a segment) in a codec without a decoder is one line, exit 2; --skip-bad counts it."
    good, bad = write(tmp_path / "v" / "good.mp4", n=50), unknown_codec(tmp_path / "v" / "odd.avi")
    ds = manifest(tmp_path / "ds", [("odd", bad, *segment), ("good", good, *segment)])
    refused(capsys, run("video", "features", ds, "--cache", tmp_path / "c"), "odd.avi", "no decoder", "odd")
    assert run("video", "features", ds, "--cache", tmp_path / "c", "--skip-bad") == 0
    assert "1 encoded, 0 cached, 0 sampled with repetition, 1 skipped" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["unknown codec", "0 bytes", "audio only"])
def test_bad_video_file_in_video_import(tmp_path, capsys, bad):
    "`video import`: a video it cannot decode is one line naming it, exit 2; --skip-bad leaves it out and says how many."
    v = tmp_path / "videos"
    write(v / "good.mp4", n=50)
    if bad == "unknown codec":
        f, needle = unknown_codec(v / "odd.avi"), "no decoder"
    elif bad == "0 bytes":
        f, needle = v / "odd.mp4", "cannot open"
        f.write_bytes(b"")
    else:
        f, needle = _no_video_stream(v / "odd.m4a"), "no video stream"
        f = f.rename(v / "odd.mp4")
    ann = tmp_path / "a.csv"
    ann.write_text("video,start,end,label,split\nodd,0,1,Walking,train\ngood,0,1,Walking,train\n")
    args = ("video", "import", ann, "--format", "csv", "--videos", v, "--out", tmp_path / "ds")
    refused(capsys, run(*args), "'odd'", f.name, needle)
    assert not (tmp_path / "ds").exists()
    assert run(*args, "--skip-bad") == 0
    out = capsys.readouterr().out
    assert "1 segments (0 multi-label) from 1 videos" in out and "1 skipped" in out
    rep = json.loads((tmp_path / "ds" / "import_report.json").read_text())
    assert (
        rep["rows"] == 1 and [s["video"] for s in rep["skipped"]] == ["odd"] and needle in rep["skipped"][0]["reason"]
    )


# ---------------------------------------------------------------- phase2 decoding in worker processes


def test_phase2_with_workers_caches_the_same_features(tmp_path):
    "`video phase2 --workers 2` on an empty cache trains, and caches the features a run without workers cached."
    from vtreetrm.video.synthetic import SyntheticConfig, make_synthetic

    cfg = SyntheticConfig(head_count=6, min_count=4, mammalnet_count=2, multi_label=1, n_short=0)
    make_synthetic(tmp_path / "syn", cfg, datasets=("lote",), progress=False)
    ds = tmp_path / "syn" / "lote"
    assert run("video", "phase1", ds, "--out", tmp_path / "p1", "--epochs", 1, "--cache", tmp_path / "c0") == 0
    tiny = ["--epochs", 1, "--max-steps", 1, "--num-queries", 4, "--max-new-tokens", 4, "--llm-pretrain-steps", 0]
    p2 = ["video", "phase2", ds, "--out", tmp_path / "p2", "--phase1", tmp_path / "p1" / "best", "--threads", 1]
    assert run(*p2, "--cache", tmp_path / "c2", "--workers", 2, *tiny) == 0
    assert (tmp_path / "p2" / "best").is_dir()
    base = {str(p.relative_to(tmp_path / "c0")): np.load(p) for p in (tmp_path / "c0").rglob("*.npy")}
    got = {str(p.relative_to(tmp_path / "c2")): np.load(p) for p in (tmp_path / "c2").rglob("*.npy")}
    assert base and got.keys() == base.keys()
    for k, a in base.items():
        np.testing.assert_allclose(got[k], a, rtol=1e-5, atol=1e-6)
