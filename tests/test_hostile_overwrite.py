"""No command deletes what it did not write: an `--out` that names a trained run, a rendered dataset, another kind of
output, one of the command's own inputs or a user's file is refused in one line (exit 2) before any work, and the
victim's bytes are left as they were; two commands on one output: the second is refused at once."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, once, one_line
from test_hostile_artifacts_video import _train

from vtreetrm.cli import main
from vtreetrm.utils import PUBLISHED_MARKER, read_marker

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def trained(tmp_path_factory, worker_id):
    "One tiny Phase-1 + Phase-2 training per session (the folder the artifact tests share; copy what you change)."
    return once(tmp_path_factory, worker_id, "hostile-artifacts-video", _train)


def run(capsys, *args) -> tuple[int, str]:
    rc = main([str(a) for a in args])
    return rc, capsys.readouterr().err


def _bytes(root: Path) -> dict:
    "Every file under `root` with its bytes: what a refused command must leave exactly as it was."
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def victim(trained, tmp_path):
    "A copy of the trained Phase-2 run (best/, last/, base_llm/, logs), the folder a typo in --out must never cost."
    shutil.copytree(trained / "p2", tmp_path / "run")
    return tmp_path / "run"


def _predict(trained, ckpt, out, *extra):
    ds, cache = trained / "syn" / "lote", trained / "cache"
    return ["video", "predict", ckpt, "--dataset", ds, "--out", out, "--cache", cache, *extra]


def test_predict_into_the_run_it_reads_is_refused(trained, victim, capsys):
    before = _bytes(victim)
    for extra in ((), ("--overwrite",)):  # not even --overwrite lets a command replace what it reads
        rc, err = run(capsys, *_predict(trained, victim / "best", victim, *extra))
        one_line(err, rc, victim, "input of this command")
    assert _bytes(victim) == before


def test_predict_into_another_run_is_refused(trained, victim, tmp_path, capsys):
    before = _bytes(victim)
    rc, err = run(capsys, *_predict(trained, trained / "p2" / "best", victim))
    one_line(err, rc, victim, "'phase2-run' (written by `vtreetrm video phase2`)", "remove that folder yourself")
    assert _bytes(victim) == before


@pytest.mark.parametrize(
    "argv",
    [
        lambda t, v: ["video", "make-synthetic", "--out", v, "--scale", "tiny"],
        lambda t, v: ["video", "make-synthetic", "--out", v, "--scale", "tiny", "--overwrite"],  # another kind still
        lambda t, v: ["analyze", "queries", v / "best" / "model.safetensors", "--out", v, "--no-plots"],
        lambda t, v: ["harness", "make-synthetic", "--out", v],
        lambda t, v: ["release", "make-synthetic", "--out", v, "--records", 20, "--no-progress"],
    ],
    ids=["video make-synthetic", "video make-synthetic --overwrite", "analyze queries", "harness", "release"],
)
def test_other_commands_into_a_run_are_refused(trained, victim, capsys, argv):
    before = _bytes(victim)
    args = argv(trained, victim)
    rc, err = run(capsys, *args)
    line = one_line(err, rc, victim)
    assert "input of this command" in line or "refusing to replace 'phase2-run'" in line, line
    assert _bytes(victim) == before


def test_import_over_a_rendered_dataset_needs_overwrite(trained, tmp_path, capsys):
    ds = tmp_path / "ds"
    shutil.copytree(trained / "syn", ds)
    before = _bytes(ds)
    ann, videos = tmp_path / "ann.json", tmp_path / "videos"
    videos.mkdir()
    video = Path(shutil.copy2(next((ds / "lote").rglob("*.mp4")), videos))
    ann.write_text(json.dumps({"database": {video.stem: {"duration": 1.0, "subset": "training",
                                                         "annotations": [{"segment": [0, 1], "label": "Feeding"}]}}}))  # fmt: skip
    rc, err = run(capsys, "video", "import", ann, "--videos", video.parent, "--out", ds)
    one_line(err, rc, ds, "refusing")
    assert _bytes(ds) == before
    rc, err = run(capsys, "video", "import", ann, "--videos", ds / "lote", "--out", ds, "--overwrite")
    one_line(err, rc, "input of this command")  # the videos it reads lie inside that folder
    assert _bytes(ds) == before
    rc, err = run(capsys, "video", "import", ann, "--videos", videos, "--out", ds, "--overwrite")
    assert rc == 0, err  # its own kind, asked for: replaced
    assert (ds / "manifest.jsonl").is_file() and not (ds / "lote").exists()


def test_a_command_never_replaces_a_folder_holding_its_input(trained, tmp_path, capsys):
    work = tmp_path / "work"
    shutil.copytree(trained / "p2" / "best", work / "best")
    (work / PUBLISHED_MARKER).write_text(json.dumps({"kind": "query-analysis"}))  # even of its own kind
    before = _bytes(work)
    rc, err = run(capsys, "analyze", "queries", work / "best" / "model.safetensors", "--out", work, "--no-plots")
    one_line(err, rc, work, "input of this command")
    assert _bytes(work) == before


def test_ladder_never_writes_over_a_users_file(trained, tmp_path, capsys):
    mine = tmp_path / "userfile.txt"
    mine.write_text("my notes\n")
    rc, err = run(capsys, "video", "ladder", trained / "syn" / "lote", "--cache", trained / "cache", "--out", mine)
    one_line(err, rc, mine, "did not write")
    assert mine.read_text() == "my notes\n"


def test_two_commands_on_one_output_the_second_is_refused(tmp_path, capsys):
    out = tmp_path / "x"
    code = (
        "import sys, time; from vtreetrm.utils import atomic_dir\n"
        "with atomic_dir(sys.argv[1], kind='video-dataset') as t: print('held', flush=True); time.sleep(60)"
    )
    p = subprocess.Popen([sys.executable, "-c", code, out], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        rc, err = run(capsys, "harness", "make-synthetic", "--out", out)
        one_line(err, rc, out, "another command")
    finally:
        p.kill()
        p.wait()
    assert not out.exists()  # neither published: the holder was killed, the other refused


def test_same_kind_is_replaced_and_the_marker_says_who_wrote_it(tmp_path, capsys):
    out = tmp_path / "h"
    for seed in (0, 1):
        rc, err = run(capsys, "harness", "make-synthetic", "--out", out, "--seed", seed)
        assert rc == 0, err
    m = read_marker(out)
    assert (m["kind"], m["protected"]) == ("harness-synthetic", False) and "store" in m["entries"], m


def _gpu_check(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, ROOT / "benchmarks/gpu_check.py", *map(str, args)],
                          capture_output=True, text=True, timeout=300, env=env)  # fmt: skip


@pytest.mark.parametrize("scale", ["nan", "-1", "0", "inf"])
def test_gpu_check_refuses_a_budget_scale_that_is_no_budget(tmp_path, scale):
    p = _gpu_check("--out", tmp_path, "--budget-scale", scale)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "--budget-scale" in p.stderr, p.stderr
    assert not (tmp_path / "summary.json").exists()


def test_gpu_check_never_writes_over_a_users_summary(tmp_path):
    (tmp_path / "summary.json").write_text('{"mine": 1}\n')
    p = _gpu_check("--out", tmp_path, "--items", "harness_cuda")
    assert p.returncode == 2 and "Traceback" not in p.stderr and "did not write" in p.stderr, p.stderr
    assert (tmp_path / "summary.json").read_text() == '{"mine": 1}\n'
