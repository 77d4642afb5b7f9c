"""Paths out of their roots: names that become path components, ids that name files, links that leave a folder."""

import json
import os
from pathlib import Path

import pytest

from vtreetrm.cli import main

ESCAPES = ["../../../escaped", "/tmp/abs-escape", "..", ".hidden", "a/b", "x\x00y"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("paths")
    assert main(["harness", "make-synthetic", "--out", str(d / "syn")]) == 0
    return d / "syn" / "store"


@pytest.mark.parametrize("name", ESCAPES)
@pytest.mark.parametrize("flag", ["name", "--parent"])
def test_seed_names_stay_in_the_store(store, tmp_path, capsys, name, flag):
    before = sorted(p for p in tmp_path.parent.rglob("*") if "escaped" in p.name or "abs-escape" in p.name)
    args = ["harness", "init-seed", "--store-dir", str(store)] + (
        [name] if flag == "name" else ["ok-seed", "--parent", name]
    )
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 2 and "must be a single file or folder name" in err, err
    assert not (store / "seeds" / "ok-seed").exists() and not Path("/tmp/abs-escape").exists()
    assert sorted(p for p in tmp_path.parent.rglob("*") if "escaped" in p.name or "abs-escape" in p.name) == before


@pytest.mark.parametrize("vid", ["../../../etc/passwd", "/etc/passwd", "..", "a/../../b"])
def test_video_ids_cannot_name_files_outside_the_trees(tmp_path, vid):
    from vtreetrm.harness.questions import load_benchmark
    from vtreetrm.utils import UserError

    q = {
        "question_id": "q1",
        "video_id": vid,
        "task_type": "Action Recognition",
        "question": "what?",
        "options": ["A. a", "B. b", "C. c", "D. d"],
        "answer": "A",
    }
    (tmp_path / "qs.json").write_text(json.dumps([q]))
    with pytest.raises(UserError) as e:
        load_benchmark(tmp_path / "qs.json")
    assert "video_id" in str(e.value) and "qs.json" in str(e.value)


def test_think_file_link_out_of_the_root(tmp_path):
    from vtreetrm.release.trajectory import resolve_think_file
    from vtreetrm.utils import UserError

    (tmp_path / "root" / "dir").mkdir(parents=True)
    (tmp_path / "outside.jsonl").write_text('{"sample_id": "secret"}\n')
    os.symlink(tmp_path / "outside.jsonl", tmp_path / "root" / "dir" / "a.jsonl")
    with pytest.raises(UserError, match="outside the allowed folder"):
        resolve_think_file("file:dir", tmp_path / "root")


@pytest.mark.parametrize("flag", ["--run-id", "--skills-version", "--prompts-version"])
@pytest.mark.parametrize("name", ["../../victim", "/tmp/abs-escape", ".."])
def test_run_and_version_names_stay_in_the_workspace_and_store(store, tmp_path, capsys, flag, name):
    """`--fresh` removes versions/<run_id>: a run id (or a version) that leaves its folder is refused before anything is touched."""
    ws = tmp_path / "a" / "b" / "ws"
    victim = ws.parent / "victim"
    victim.mkdir(parents=True)
    (victim / "keep.txt").write_text("keep me")  # = ws/versions/../../victim
    rc = main(
        [
            "harness",
            "infer",
            "--store-dir",
            str(store),
            "--workspace-dir",
            str(ws),
            flag,
            name,
            "--fresh",
            "--n-samples",
            "2",
            "--backend",
            "simulated",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "must be a single file or folder name" in err and flag[2:].replace("-", "_") in err, err
    assert (victim / "keep.txt").read_text() == "keep me" and not ws.exists()


@pytest.fixture(scope="module")
def release_assets(tmp_path_factory):
    d = tmp_path_factory.mktemp("rel")
    assert main(["release", "make-synthetic", "--out", str(d / "syn"), "--records", "40", "--no-progress"]) == 0
    return d / "syn"


@pytest.mark.parametrize("name", ["../../escaped", "/tmp/abs-escape", ".."])
@pytest.mark.parametrize("where", ["canonical --dataset", "split --dataset", "datasets config key"])
def test_dataset_names_stay_in_their_folders(release_assets, tmp_path, capsys, name, where):
    """A dataset name becomes processed/<dataset>/ and canonical/<dataset>/: one that leaves them is refused."""
    s, run = release_assets, tmp_path / "run"
    cfg = s / "CFG/datasets.json"
    if where == "datasets config key":
        obj = json.loads(cfg.read_text())
        obj["datasets"][name] = obj["datasets"]["shougang"]
        cfg = tmp_path / "datasets.json"
        cfg.write_text(json.dumps(obj))
    common = ["--canonical-dir", str(run / "canonical"), "--no-progress"]
    if where == "split --dataset":
        argv = ["release", "split", *common, "--dataset", name]
    else:
        argv = [
            "release",
            "canonical",
            "--processed-dir",
            str(run / "processed"),
            *common,
            "--config-file",
            str(cfg),
            "--registry-dir",
            str(s / "ASSETS/registries"),
            "--corpus-dir",
            str(s / "ASSETS/corpora"),
            "--dataset",
            name if where == "canonical --dataset" else "shougang",
        ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "must be a single file or folder name" in err and "'dataset'" in err, err
    assert not Path("/tmp/abs-escape").exists() and not (tmp_path.parent / "escaped").exists() and not run.exists()
