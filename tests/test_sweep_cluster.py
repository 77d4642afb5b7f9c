"""`vtreetrm sweep` on a real scheduler: a one-node SLURM on loopback (slurm-wlm + munge, as `make test` installs
them) and a local Ray head; cancel, status, resume and the report on the sweep folder."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from vtreetrm.runs.cluster import SLURM_DAEMONS, local_slurm
from vtreetrm.runs.sweep import sweep_status
from vtreetrm.video.synthetic import SyntheticConfig, make_synthetic

SLURM_WHY = (
    None
    if all(shutil.which(b) for b in SLURM_DAEMONS) and os.geteuid() == 0
    else "no local SLURM: needs root and Debian's slurm-wlm + munge (make test installs them where it can)"
)
BODY = (
    "import json, pathlib, time\ntime.sleep(sleep_s)\n"
    "pathlib.Path(run_dir, 'metrics.json').write_text(json.dumps({'top1_accuracy_single_label': x / 10, "
    "'macro_f1': x / 20}))"
)


def _notebook(path: Path, params: str = "x = 1\nsleep_s = 0.0\nrun_dir = '.'", body: str = BODY) -> Path:
    "A parameterized notebook: a `parameters` cell and a body."
    nb = new_notebook(cells=[new_code_cell(params), new_code_cell(body)])
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "python3", "language": "python"}
    nbformat.write(nb, path)
    return path


def _sweep(tmp_path: Path, executor: str, sleep_s: float = 1.0) -> Path:
    y = tmp_path / "grid.yaml"
    y.write_text(
        f"notebook: {_notebook(tmp_path / 'tiny.ipynb')}\nparams: {{sleep_s: {sleep_s}}}\ngrid: {{x: [1, 2, 3, 4]}}\n"
        f"executor: {{executor: {executor}, cpus_per_task: 1, array_parallelism: 2, time: 10}}\n"
    )
    return y


def _wait(d: Path, timeout_s: float = 240) -> dict:
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        rows = {r["name"]: r for r in sweep_status(d)}
        if all(r["state"] in ("done", "failed") for r in rows.values()):
            return rows
        time.sleep(1)
    raise AssertionError(f"sweep not finished in {timeout_s} s: {rows}")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    if SLURM_WHY:
        pytest.skip(SLURM_WHY)
    with local_slurm(tmp_path_factory.mktemp("slurm"), cpus=2) as conf:
        yield conf


def test_slurm_sweep_cancel_status_resume_report(slurm, tmp_path, cli):
    d = tmp_path / "sweep"
    r = cli("sweep", _sweep(tmp_path, "slurm", sleep_s=3), "--runs-dir", d, check=0)
    assert "submitted 4 points to SLURM" in r.stdout
    jobs = json.loads((d / "sweep.json").read_text())["jobs"]
    assert sorted(jobs) == ["grid-x=1", "grid-x=2", "grid-x=3", "grid-x=4"]
    # two run at once: the last point is still pending when SLURM cancels it
    subprocess.run(["scancel", jobs["grid-x=4"]["job_id"]], check=True)
    rows = _wait(d)
    assert {n: r["state"] for n, r in rows.items()} == {
        "grid-x=1": "done", "grid-x=2": "done", "grid-x=3": "done", "grid-x=4": "failed"}  # fmt: skip
    # without an accounting database a cancelled pending task leaves the controller at once; with one, sacct says why
    assert rows["grid-x=4"]["note"].startswith("job ") and rows["grid-x=2"]["top1"] == pytest.approx(0.2)
    status = cli("sweep", "status", d, check=0).stdout
    assert any(line.split()[:2] == ["grid-x=4", "failed"] for line in status.splitlines())
    run = json.loads((d / "grid-x=1" / "run.json").read_text())
    assert (run["executor"], run["status"], run["job_id"]) == ("slurm", "done", jobs["grid-x=1"]["job_id"])
    assert run["node"] and (d / "grid-x=1" / "job.err").is_file()
    r = cli("sweep", "resume", d, "--wait", check=0)  # only the cancelled point is submitted again
    assert "this pass: 1 queued" in r.stdout and "4 done" in r.stdout
    assert json.loads((d / "sweep.json").read_text())["jobs"]["grid-x=1"] == jobs["grid-x=1"]
    cli("report", "build", d, "--out", tmp_path / "report.html", check=0)
    assert json.loads((tmp_path / "report.json").read_text())["num_runs"] == 4


def test_slurm_partition_that_does_not_exist_is_refused(slurm, tmp_path, cli):
    r = cli("sweep", _sweep(tmp_path, "slurm"), "--runs-dir", tmp_path / "s", "--slurm-partition", "gpu", check=2)
    assert "no SLURM partition 'gpu'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    ray = Path(sys.executable).parent / "ray"
    if not ray.exists():
        pytest.skip("ray is not installed (the verl extra brings it)")
    port = 20000 + os.getpid() % 20000
    tmp = Path(f"/tmp/vr{os.getpid()}")  # ray's socket paths must stay short
    r = subprocess.run([str(ray), "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                        "--disable-usage-stats", f"--temp-dir={tmp}"], capture_output=True, text=True, timeout=180)  # fmt: skip
    if r.returncode:
        pytest.skip(f"a local Ray head did not start: {r.stderr.strip()[-300:]}")
    yield f"127.0.0.1:{port}"
    subprocess.run([str(ray), "stop", "--force"], capture_output=True, timeout=120)
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.slow  # a Ray head's start and stop take half a minute; the local and SLURM executors run in the default tier
def test_ray_sweep_runs_every_point(ray_head, tmp_path, cli):
    d = tmp_path / "sweep"
    r = cli("sweep", _sweep(tmp_path, "ray"), "--runs-dir", d, "--ray-address", ray_head, check=0)
    assert "4 done" in r.stdout
    run = json.loads((d / "grid-x=3" / "run.json").read_text())
    assert (run["executor"], run["status"]) == ("ray", "done") and run["job_id"]
    assert json.loads((d / "grid-x=3" / "metrics.json").read_text())["top1_accuracy_single_label"] == 0.3


EPOCHS = 12  # a few seconds of training left when the signal comes


def test_preempted_point_is_requeued_and_resumes(slurm, tmp_path, cli):
    "SIGUSR2 (what SLURM sends before a preemption or the time limit): submitit requeues, Phase-2 goes on from last/."
    small = SyntheticConfig(head_count=6, min_count=4, mammalnet_count=2, multi_label=1, n_short=0)
    make_synthetic(tmp_path / "syn", small, datasets=("lote",), progress=False)
    params = {"data_dir": str(tmp_path / "syn"), "cache_dir": str(tmp_path / "cache"), "phase1": "none",
              "epochs": EPOCHS, "num_queries": 4, "label_mode": "simple", "llm_pretrain_steps": 0, "threads": 1,
              "max_new_tokens": 4, "frames": 4, "grid": 2}  # fmt: skip
    (tmp_path / "one.yaml").write_text(f"notebook: phase2_sft\nparams: {json.dumps(params)}\nexecutor: slurm\n")
    d = tmp_path / "sweep"
    cli("sweep", tmp_path / "one.yaml", "--runs-dir", d, "--time", 10, check=0)
    job = json.loads((d / "sweep.json").read_text())["jobs"]["one"]["job_id"]
    hist, t0 = d / "one.running" / "phase2" / "history.jsonl", time.time()
    while not (hist.is_file() and hist.read_text().count("\n") >= 1) and time.time() - t0 < 180:
        time.sleep(0.1)
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    before = hist.read_text().splitlines()
    rows = _wait(d)
    assert rows["one"]["state"] == "done", rows
    after = (d / "one" / "phase2" / "history.jsonl").read_text().splitlines()
    assert [json.loads(l)["epoch"] for l in after] == list(range(1, EPOCHS + 1))  # each epoch once
    assert (
        1 <= len(before) < EPOCHS and after[: len(before)] == before
    )  # the epochs before the signal were kept, not redone
    assert json.loads((d / "one" / "phase2" / "run.json").read_text())["resumed"] is True  # training went on from last/
    run = json.loads((d / "one" / "run.json").read_text())
    assert run["resumed"] is True and run["job_id"] == job
