"""The harness commands under hostile input: build-trees never replaces a user's file and stops on videos whose
containers lie about (or omit) their duration, infer fails loudly on a dead backend, show never changes the store it
reads, and nonsensical numbers are refused in one line."""

import json
import struct
import threading

import av
import numpy as np
import pytest
from conftest import one_line

from vtreetrm.cli import main

SMALL = ["--clips", "2", "--segments-per-clip", "1", "--frames-per-segment", "1", "--fps", "2", "--quiet"]


def write_video(path, n=16, fps=8, size=32, fmt=None, codec="mpeg4"):
    "A video of `n` frames (a grey ramp) in container `fmt` (None: from the suffix)."
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format=fmt) as c:
        s = c.add_stream(codec, rate=fps)
        s.width = s.height = size
        s.pix_fmt = "yuv420p"
        s.thread_count = 1
        for i in range(n):
            a = np.full((size, size, 3), i * 255 // n, np.uint8)
            for p in s.encode(av.VideoFrame.from_ndarray(a, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def build(*argv):
    return main(["harness", "build-trees", *map(str, argv)])


@pytest.fixture(scope="module")
def vids(tmp_path_factory):
    d = tmp_path_factory.mktemp("vids")
    write_video(d / "v1.mp4")
    return d


def test_build_trees_never_replaces_a_users_file(vids, tmp_path, capsys, monkeypatch):
    "A user's v1.json in --out is refused with or without --overwrite; the report goes inside --out, not beside it."
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "trees"
    out.mkdir()
    (out / "v1.json").write_text('{"mine": true}')
    (tmp_path / "trees_build_report.json").write_text("the user's own report")
    for extra in ([], ["--overwrite"]):
        rc = build("--videos", vids, "--out", "trees", "--captioner", "simulated", *SMALL, *extra)
        one_line(capsys.readouterr().err, rc, "v1.json", "did not write")
        assert (out / "v1.json").read_text() == '{"mine": true}'
    (out / "v1.json").rename(tmp_path / "mine.json")
    assert build("--videos", vids, "--out", "trees", "--captioner", "simulated", *SMALL) == 0
    capsys.readouterr()
    assert (tmp_path / "trees_build_report.json").read_text() == "the user's own report"
    rep = json.loads((out / "trees_build_report.json").read_text())
    assert rep["counts"]["built"] == 1 and not list(out.glob(".*tmp*"))
    first = (out / "v1.json").read_text()
    assert build("--videos", vids, "--out", "trees", "--captioner", "simulated", *SMALL, "--overwrite") == 0
    assert json.loads(capsys.readouterr().out)["counts"]["built"] == 1  # its own tree is replaced with --overwrite
    assert (out / "v1.json").read_text() == first
    (out / "trees_build_report.json").write_text('{"a user": "wrote this"}')
    rc = build("--videos", vids, "--out", "trees", "--captioner", "simulated", *SMALL)
    one_line(capsys.readouterr().err, rc, "trees_build_report.json", "did not write")


def _lying_mkv(path, seconds_claimed=1e9):
    "An mkv of 2 s whose header claims `seconds_claimed` (its Segment Duration, a float64 in ms, patched)."
    write_video(path.with_suffix(".tmp.mkv"), fmt="matroska")
    b = bytearray(path.with_suffix(".tmp.mkv").read_bytes())
    i = b.index(b"\x44\x89\x88")  # EBML id of Duration, 8-byte size
    b[i + 3 : i + 11] = struct.pack(">d", seconds_claimed * 1000)
    path.write_bytes(bytes(b))
    path.with_suffix(".tmp.mkv").unlink()
    with av.open(str(path)) as c:
        assert c.duration / 1e6 == pytest.approx(seconds_claimed)
    return path


def _in_thread(fn, timeout=60):
    "fn()'s result, or a failure when it has not returned within `timeout` s (it keeps running as a daemon)."
    res = {}
    th = threading.Thread(target=lambda: res.setdefault("v", fn()), daemon=True)
    th.start()
    th.join(timeout)
    assert not th.is_alive(), f"still running after {timeout} s"
    return res["v"]


def test_container_lying_about_its_duration(tmp_path, capsys):
    "An mkv claiming 1e9 s but holding 2 s: sampled over its 2 s, one warning naming it, no endless seeking."
    from vtreetrm.harness.trees import sample_frames

    v = _lying_mkv(tmp_path / "vids" / "liar.mkv")
    got = _in_thread(lambda: [t for t, _ in sample_frames(v, fps=4, max_frames=64, short_side=32)])
    assert len(got) == 8 and got[-1] == pytest.approx(1.875)
    err = capsys.readouterr().err
    assert err.count("warning: ") == 1 and "liar.mkv" in err and "2 s" in err
    far = _in_thread(lambda: [t for t, _ in sample_frames(v, times=[0.5, 1000.0, 5e8], short_side=32)])
    assert far == [0.5] and "1 of 3 frames" in capsys.readouterr().err  # seeks past the end: one pass, then stop
    rc = _in_thread(
        lambda: build("--videos", v.parent, "--out", tmp_path / "trees", "--captioner", "simulated", *SMALL)
    )
    assert rc == 0, capsys.readouterr().err
    tree = json.loads((tmp_path / "trees/liar.json").read_text())
    assert tree["duration"] == pytest.approx(2.0) and tree["clips"][-1]["end"] == pytest.approx(2.0)


def test_raw_h264_stream_without_duration(tmp_path, capsys):
    "A raw h264 .m4v (no timestamps, no duration): times from the frame rate, at most max_frames frames kept."
    from vtreetrm.harness.trees import sample_frames

    v = write_video(tmp_path / "vids" / "raw.m4v", n=40, fmt="h264", codec="libx264")
    with av.open(str(v)) as c:
        assert c.duration is None and c.streams.video[0].duration is None
    got = [t for t, _ in sample_frames(v, fps=8, max_frames=4, short_side=32)]
    assert got == [0.625, 1.875, 3.125, 4.375]  # spread over the 5 s, not the first 4 frames
    assert len(list(sample_frames(v, fps=1, max_frames=100, short_side=32))) == 5
    assert build("--videos", v.parent, "--out", tmp_path / "trees", "--captioner", "simulated", *SMALL) == 0
    tree = json.loads((tmp_path / "trees/raw.json").read_text())
    assert tree["duration"] == pytest.approx(5.0) and tree["source"]["frames_sampled"] == 10
    rc = build("--videos", v.parent, "--out", tmp_path / "t2", "--captioner", "simulated", *SMALL, "--max-frames", "3")
    assert rc == 0 and json.loads((tmp_path / "t2/raw.json").read_text())["source"]["frames_sampled"] == 3


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    from vtreetrm.harness.synthetic import make_synthetic

    d = tmp_path_factory.mktemp("hh") / "syn"
    make_synthetic(d, n_train_videos=4, n_test_videos=4, per_task=4, test_ar=4, test_other=1)
    return d


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _infer_openai(syn, ws, url, *sets):
    from conftest import harness_infer

    flags = ["--run-id", "r", "--backend", "openai", "--base-url", url, "--model", "stub", "--n-samples", "6"]
    return harness_infer(syn / "store", ws, *flags, sets=("embed.backend=hashing", "request_timeout=5", *sets))


def test_infer_against_a_dead_backend_fails(syn, tmp_path, capsys, monkeypatch):
    "Connection refused: one line naming the URL, exit 2, no answer recorded as if the model had answered."
    from vtreetrm.harness.stub import StubServer

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    url = f"http://127.0.0.1:{_free_port()}/v1"
    rc = _infer_openai(syn, tmp_path / "ws", url, "max_retries=0")
    cap = capsys.readouterr()
    one_line(cap.err, rc, url, "cannot reach")
    assert "accuracy" not in cap.out
    with StubServer(fail_500_every=1) as s:  # reachable, but every request fails
        rc = _infer_openai(syn, tmp_path / "ws2", s.url, "max_retries=0")
    one_line(capsys.readouterr().err, rc, s.url, "all 6 infer answers failed")
    with StubServer(fail_500_every=9) as s:  # some requests fail: counted and reported, the run finishes
        rc = _infer_openai(syn, tmp_path / "ws3", s.url, "max_retries=0")
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert rc == 0 and 0 < out["backend_failures"] < 6 and out["unanswered"] >= out["backend_failures"]
    assert f"warning: {out['backend_failures']} of 6 infer answers failed at {s.url}" in cap.err


def _store_without_answers(ws):
    "A harness.db with one run and one answer, whose answers table a user then dropped."
    import sqlite3

    from vtreetrm.harness.store import HarnessStore

    st = HarnessStore(ws / "harness.db")
    st.start_run("r1", "infer", {}, "v1", "v1")
    st.put_answer(run_id="r1", question_id="q", skills_sha="s", prompts_sha="p", answer="A", gold="A", correct=1)
    st.close()
    con = sqlite3.connect(ws / "harness.db")
    con.execute("DROP TABLE answers")
    con.commit()
    con.close()
    return ws / "harness.db"


def _tables(db):
    import sqlite3

    con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()


def test_reading_a_store_never_changes_its_schema(tmp_path, capsys):
    "show and extract-run-db on a store missing a table: refused in one line, the table not recreated."
    db = _store_without_answers(tmp_path / "ws")
    rc = main(["harness", "show", str(tmp_path / "ws")])
    one_line(capsys.readouterr().err, rc, "harness.db", "answers")
    assert "answers" not in _tables(db)
    rc = main(["harness", "extract-run-db", str(db), str(tmp_path / "x.db"), "r1"])
    one_line(capsys.readouterr().err, rc, "harness.db", "answers")
    assert "answers" not in _tables(db) and not (tmp_path / "x.db").exists()
    store = tmp_path / "store"
    for k in ("skills", "prompts"):
        (store / k / "v1").mkdir(parents=True)
        (store / k / "v1" / "a.md").write_text("x")
    rc = main(["harness", "init-seed", "s", "--store-dir", str(store), "--from-db", str(db), "--run-id", "r1"])
    one_line(capsys.readouterr().err, rc, "harness.db", "answers")
    assert "answers" not in _tables(db) and not (store / "seeds" / "s").exists()


@pytest.mark.parametrize(
    "flag, value",
    [("--fps", "-1"), ("--fps", "0"), ("--max-frames", "0"), ("--max-frames", "-3"), ("--jobs", "0"),
     ("--request-timeout", "0"), ("--request-timeout", "-5"), ("--max-retries", "-1")],
)  # fmt: skip
def test_build_trees_refuses_nonsense_numbers(vids, tmp_path, capsys, flag, value):
    "Each numeric flag out of range: one line naming it, before anything is decoded or written."
    args = ["--videos", vids, "--out", tmp_path / "trees", "--captioner", "openai", "--model", "m"]
    rc = build(*args, "--base-url", "http://127.0.0.1:9/v1", "--quiet", flag, value)
    one_line(capsys.readouterr().err, rc, flag.lstrip("-").replace("-", "_"), value)
    assert not (tmp_path / "trees").exists() and not (tmp_path / ".cache").exists()
