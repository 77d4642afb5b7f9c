"""Real footage: the commands that encode what the feature cache lacks (phase1, phase2, ladder) decode in --workers
processes like `video features`, with the same cached features; build-trees names trees by the benchmark's own
video ids and infer refuses questions whose video has no tree."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import refused_cli

from vtreetrm.cli import main
from vtreetrm.harness.synthetic import make_synthetic as make_harness_store
from vtreetrm.video.synthetic import SPECIES, SyntheticConfig, make_synthetic, render_frames, write_mp4


def run(*args):
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def lote(tmp_path_factory):
    "A tiny synthetic LoTE-shaped dataset folder."
    d = tmp_path_factory.mktemp("rf")
    cfg = SyntheticConfig(head_count=6, min_count=4, mammalnet_count=2, multi_label=1, n_short=0)
    make_synthetic(d / "syn", cfg, datasets=("lote",), progress=False)
    return d / "syn" / "lote"


def _cached(cache: Path) -> dict:
    "Every cached feature array under `cache`, by its path relative to the cache."
    return {str(p.relative_to(cache)): np.load(p) for p in sorted(cache.rglob("*.npy"))}


def test_phase1_and_ladder_workers_cache_the_same_features(lote, tmp_path):
    "phase1 (and ladder) with --workers 2 encode the missing clips into the same cache files as without."
    assert run("video", "phase1", lote, "--out", tmp_path / "p1a", "--cache", tmp_path / "c0", "--epochs", 1) == 0
    flags = ["--cache", tmp_path / "c2", "--workers", 2]
    assert run("video", "phase1", lote, "--out", tmp_path / "p1b", "--epochs", 1, *flags) == 0
    assert run("video", "ladder", lote, "--cache", tmp_path / "c3", "--workers", 2) == 0
    base = _cached(tmp_path / "c0")
    assert base
    for other in ("c2", "c3"):
        got = _cached(tmp_path / other)
        assert got.keys() == base.keys()
        for k, a in base.items():
            np.testing.assert_allclose(got[k], a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("command", ["phase1", "phase2", "ladder"])
def test_workers_flag_in_help(cli, command):
    "--workers is offered, with its help, by every command that encodes features."
    r = cli("video", command, "--help", check=0)
    assert re.search(r"--workers\b.*decod", r.stdout), r.stdout


SMALL = [
    "--captioner",
    "simulated",
    "--clips",
    2,
    "--segments-per-clip",
    1,
    "--frames-per-segment",
    1,
    "--fps",
    2,
    "--quiet",
]


def _question(qid: str, **kw) -> dict:
    return {"question_id": qid, "task_type": "Action Recognition", "question": "What?", "options": ["A. a", "B. b"],
            "answer": "A", **kw}  # fmt: skip


@pytest.fixture(scope="module")
def youtube_videos(tmp_path_factory):
    "Two tiny PyAV videos named by their YouTube ids, as a Video-MME download names them."
    d = tmp_path_factory.mktemp("yt")
    rng = np.random.default_rng(0)
    for stem, env in (("fFjv93ACGo8", "forest"), ("kP-3_xYz9Qw", "snow")):
        write_mp4(
            d / f"{stem}.mp4", render_frames([(*SPECIES["takin"], "right")], env, n_frames=16, size=64, rng=rng), fps=8
        )
    return d


def _bench(path: Path, extra: list = ()) -> Path:
    "A Video-MME-layout benchmark: video 001 by videoID, 002 by its url, and `extra` video records."
    videos = [
        {"video_id": "001", "videoID": "fFjv93ACGo8", "questions": [_question("001-1")]},
        {"video_id": "002", "url": "https://www.youtube.com/watch?v=kP-3_xYz9Qw", "questions": [_question("002-1")]},
        *extra,
    ]
    path.write_text(json.dumps(videos))
    return path


def test_build_trees_names_trees_as_the_questions_do(cli, youtube_videos, tmp_path):
    "With --questions, each tree is named by the benchmark's video_id, not by its file's YouTube id."
    bench = _bench(tmp_path / "bench.json")
    r = cli(
        "harness", "build-trees", "--videos", youtube_videos, "--out", tmp_path / "trees", "--questions", bench, *SMALL
    )
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "trees").glob("0*.json")) == ["001.json", "002.json"]
    assert json.loads((tmp_path / "trees" / "001.json").read_text())["video_id"] == "001"
    assert not list((tmp_path / "trees").glob("fFjv93ACGo8*"))


def test_build_trees_refuses_questions_without_a_video(cli, youtube_videos, tmp_path):
    "Questions naming videos with neither a file nor a tree are refused before any work: the first and the count."
    extra = [{"video_id": f"00{i}", "videoID": f"missing{i}", "questions": [_question(f"00{i}-1")]} for i in (3, 4)]
    bench = _bench(tmp_path / "bench.json", extra)
    r = cli(
        "harness", "build-trees", "--videos", youtube_videos, "--out", tmp_path / "trees", "--questions", bench, *SMALL
    )
    refused_cli(r, "bench.json", "2 of the 4 videos", "first '003'")
    assert not (tmp_path / "trees").exists()


def test_infer_refuses_questions_without_a_tree(cli, tmp_path):
    "infer names the first video without a caption tree and how many lack one, in one line, before answering."
    make_harness_store(tmp_path / "syn", n_train_videos=12, n_test_videos=10, per_task=12, test_ar=20, test_other=3)
    qs = tmp_path / "qs"
    qs.mkdir()
    (qs / "q.json").write_text(
        json.dumps([_question(f"q{i}", video_id=v) for i, v in enumerate(["001", "002", "001"])])
    )
    store, ws = tmp_path / "syn" / "store", tmp_path / "ws"
    r = cli("harness", "infer", "--store-dir", store, "--workspace-dir", ws, "--questions", qs, "--backend", "simulated",
            "--set", "embed.backend=hashing", "--quiet")  # fmt: skip
    refused_cli(r, "2 of the 2 videos", "first '001'", "build-trees --questions")
