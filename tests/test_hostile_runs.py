"""Run and sweep folders under attack: a link or a user's folder where the tool keeps its working folder is refused
before anything is written, and what it points to (or holds) is left as it was."""

import json

from conftest import refused_cli
from test_runs_cli import BODY, make_notebook


def test_symlinked_running_folder_is_refused(tmp_path, cli):
    "A link at runs/NAME.running holding matching parameters: nothing is written through it, runs/NAME is not made."
    nb = make_notebook(tmp_path / "exp.ipynb", BODY)
    runs, target = tmp_path / "runs", tmp_path / "target"
    runs.mkdir()
    target.mkdir()
    (target / "params.json").write_text(json.dumps({"lr": 0.1, "steps": 3, "name": "x", "run_dir": "."}))
    (runs / "a.running").symlink_to(target)
    r = cli("run", nb, "--name", "a", "--runs-dir", runs)
    refused_cli(r, "a.running", "link")
    assert sorted(p.name for p in target.iterdir()) == ["params.json"]  # no marker planted, no notebook written
    assert not (runs / "a").exists() and not (runs / "a").is_symlink()


def test_users_running_folder_is_not_deleted(tmp_path, cli):
    "runs/user.running made by a user (no marker): refused, its notes kept."
    nb = make_notebook(tmp_path / "exp.ipynb", BODY)
    user = tmp_path / "runs" / "user.running"
    user.mkdir(parents=True)
    (user / "notes.txt").write_text("keep me")
    r = cli("run", nb, "--name", "user", "--runs-dir", tmp_path / "runs")
    refused_cli(r, "user.running", "did not write")
    assert (user / "notes.txt").read_text() == "keep me"
