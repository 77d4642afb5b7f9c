"""`vtreetrm run` / `vtreetrm sweep`: the run-directory contract, parallel sweeps, failures and refusals."""

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook


def make_notebook(path, body):
    nb = new_notebook(
        cells=[
            new_markdown_cell("# Tiny experiment"),
            new_code_cell("lr = 0.1  # learning rate\nsteps = 3\nname = 'x'\nrun_dir = '.'"),
            new_code_cell(body),
        ]
    )
    nb.cells[1].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


BODY = """import json, pathlib
if steps < 0: raise ValueError('steps must be >= 0')
loss = 1 / (1 + lr * steps)
print('final loss', loss)
pathlib.Path(run_dir, 'metrics.json').write_text(json.dumps({'loss': loss, 'steps': steps}))"""


@pytest.fixture
def nb(tmp_path):
    return make_notebook(tmp_path / "exp.ipynb", BODY)


def test_run_directory_contract(tmp_path, cli, nb):
    runs = tmp_path / "runs"
    r = cli("run", nb, "--name", "lr-test", "-p", "lr=0.5", "steps=4", "--runs-dir", runs, check=0)
    d = runs / "lr-test"
    assert sorted(p.name for p in d.iterdir()) == [
        ".vtreetrm-published",
        "lr-test.html",
        "lr-test.ipynb",
        "metrics.json",
        "params.json",
        "run.json",
    ]
    assert json.loads((d / "params.json").read_text()) == {"lr": 0.5, "steps": 4, "name": "x", "run_dir": "."}
    assert json.loads((d / "metrics.json").read_text()) == pytest.approx({"loss": 1 / 3, "steps": 4})
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "done" and run["seconds"] > 0 and run["versions"]["papermill"]
    assert "git_sha" in run and str(nb) in run["inputs"] and run["host"]
    html = (d / "lr-test.html").read_text()
    assert "final loss" in html and "pathlib.Path(run_dir" not in html  # outputs shown, code hidden
    assert "skipped" not in r.stdout
    assert (
        "skipped" in cli("run", nb, "--name", "lr-test", "-p", "lr=0.5", "steps=4", "--runs-dir", runs, check=0).stdout
    )


@pytest.mark.parametrize(
    "args,msg",
    [
        (["-p", "momentum=0.9"], "unknown parameter(s) 'momentum'"),
        (["-p", "lr"], "-p takes NAME VALUE (one parameter per -p) or KEY=VALUE"),
    ],
)
def test_run_refuses_before_running(tmp_path, cli, nb, args, msg):
    r = cli("run", nb, "--name", "x", "--runs-dir", tmp_path / "runs", *args, check=2)
    assert msg in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()


def test_missing_notebook(tmp_path, cli):
    assert "notebook not found" in cli("run", tmp_path / "nope.ipynb", "--runs-dir", tmp_path / "runs", check=2).stderr


def test_failed_run_is_recorded(tmp_path, cli, nb):
    cli("run", nb, "--name", "neg", "-p", "steps=-1", "--runs-dir", tmp_path / "runs", check=1)
    run = json.loads((tmp_path / "runs" / "neg" / "run.json").read_text())
    assert run["status"] == "failed" and "steps must be >= 0" in run["error"]
    assert (tmp_path / "runs" / "neg" / "neg.ipynb").exists()


def test_sweep_parallel_with_a_failure(tmp_path, cli, nb):
    (tmp_path / "sweep.yaml").write_text(
        f"notebook: {nb}\nname: 'lr{{lr}}-s{{steps}}'\nparams: {{steps: 2}}\n"
        "grid: {lr: [0.1, 0.2], steps: [1, 2]}\nruns: [{lr: 0.3, steps: -1}]\n"
    )
    r = cli("sweep", tmp_path / "sweep.yaml", "--jobs", "2", "--runs-dir", tmp_path / "runs", check=1)
    assert "4 done, 1 failed" in r.stdout and "this pass: 4 done, 1 failed" in r.stdout
    done = sorted(p.name for p in (tmp_path / "runs").iterdir() if p.is_dir() and not p.name.startswith("."))
    assert done == ["lr0.1-s1", "lr0.1-s2", "lr0.2-s1", "lr0.2-s2", "lr0.3-s-1"]
    assert json.loads((tmp_path / "runs" / "lr0.2-s2" / "metrics.json").read_text())["loss"] == pytest.approx(1 / 1.4)
    manifest = json.loads((tmp_path / "runs" / "sweep.json").read_text())
    assert manifest["sweep"] == "sweep" and len(manifest["points"]) == 5
    run = json.loads((tmp_path / "runs" / "lr0.3-s-1" / "run.json").read_text())
    assert (run["status"], run["executor"]) == ("failed", "local")
    r = cli("sweep", tmp_path / "sweep.yaml", "--runs-dir", tmp_path / "runs", check=1)
    assert "this pass: 4 skipped, 1 failed" in r.stdout
    r = cli("sweep", "status", tmp_path / "runs", check=0)
    rows = [line.split() for line in r.stdout.splitlines()[1:-1]]
    assert {(row[0], row[1]) for row in rows} >= {("lr0.1-s1", "done"), ("lr0.3-s-1", "failed")}


@pytest.mark.parametrize(
    "text,msg",
    [
        ("notebook: X\ngrid: {lr: [0.1, 0.2]\n", "invalid YAML"),
        ("notebook: X\ngrid: {momentum: [0.9]}\n", "unknown parameter(s) 'momentum'"),
        ("notebook: X\ngird: {lr: [0.1]}\n", "field 'gird': unknown key"),
        ("notebook: X\ngrid: {lr: 0.1}\n", "grid values must be non-empty lists"),
        ("notebook: missing.ipynb\n", "notebook not found"),
    ],
)
def test_bad_sweeps_refused_before_anything_runs(tmp_path, cli, nb, text, msg):
    (tmp_path / "s.yaml").write_text(text.replace("X", str(nb)))
    r = cli("sweep", tmp_path / "s.yaml", "--runs-dir", tmp_path / "runs", check=2)
    assert msg in r.stderr and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "extra,yaml,msg",
    [
        (["--executor", "k8s"], "", "invalid choice: 'k8s'"),
        ([], "executor: {executor: slurm, partition: gpu}\n", "field 'executor.partition': unknown key"),
        (["--executor", "slurm", "--time", "0"], "", "must be a whole number of at least 1"),
    ],
)
def test_bad_executors_refused_before_anything_is_written(tmp_path, cli, nb, extra, yaml, msg):
    (tmp_path / "s.yaml").write_text(f"notebook: {nb}\ngrid: {{lr: [0.1]}}\n{yaml}")
    r = cli("sweep", tmp_path / "s.yaml", "--runs-dir", tmp_path / "runs", *extra, check=2)
    assert msg in r.stderr and "Traceback" not in r.stderr and not (tmp_path / "runs").exists()


def test_a_sweep_folder_is_one_sweeps(tmp_path, cli, nb):
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(f"notebook: {nb}\ngrid: {{lr: [0.1]}}\n")
    cli("sweep", tmp_path / "a.yaml", "--runs-dir", tmp_path / "runs", check=0)
    before = sorted(p.name for p in (tmp_path / "runs").iterdir())
    r = cli("sweep", tmp_path / "b.yaml", "--runs-dir", tmp_path / "runs", check=2)
    assert "belongs to the sweep 'a'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == before  # nothing written
    r = cli("sweep", "status", tmp_path / "nowhere", check=2)
    assert "not a sweep folder" in r.stderr


def test_missing_scheduler_tools_are_named(tmp_path, nb, monkeypatch, capsys):
    "No sbatch on PATH, or no ray installed: one line naming what is missing, before anything is written."
    import os
    import subprocess
    import sys
    from pathlib import Path

    from conftest import vtreetrm_argv

    from vtreetrm.cli import main

    (tmp_path / "s.yaml").write_text(f"notebook: {nb}\ngrid: {{lr: [0.1]}}\n")
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # no /usr/bin: no sbatch
    argv = vtreetrm_argv("sweep", tmp_path / "s.yaml", "--runs-dir", tmp_path / "a", "--executor", "slurm")
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert (
        r.returncode == 2
        and r.stderr.strip() == "error: --executor slurm needs SLURM's sbatch on PATH (not found on this machine)"
    )
    monkeypatch.setitem(sys.modules, "ray", None)  # as if ray were not installed
    rc = main(["sweep", str(tmp_path / "s.yaml"), "--runs-dir", str(tmp_path / "b"), "--executor", "ray"])
    assert rc == 2 and "--executor ray needs ray" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
