"""A run is watchable while it runs (NAME.running/run.json), and a killed Phase-2 notebook run resumes from its
`last/` checkpoint when run again with the same name: the epochs continue instead of starting over."""

import json
import os
import signal
import subprocess
import sys
import time

from vtreetrm.cli import main


def test_killed_phase2_notebook_run_resumes(tmp_path):
    """Killed as soon as epoch 1 is in history.jsonl (of 8, about 1 s each, so the kill lands mid-run even on a
    loaded machine), the run resumes under the same name: each epoch once, `resumed: true`. Tiny LoTE-shaped data
    (2 frames, one pooled patch token each), a random tiny LLM (no pretraining), M=4 and short answers keep it short."""
    assert (
        main(["video", "make-synthetic", "--out", str(tmp_path / "syn"), "--scale", "tiny", "--datasets", "lote"]) == 0
    )
    runs = tmp_path / "runs"
    cmd = [
        sys.executable,
        "-c",
        "from vtreetrm.cli import console_main; console_main()",
        "run",
        "phase2_sft",
        "--name",
        "nb",
        "--runs-dir",
        str(runs),
        "--no-html",
        "-p",
        f"data_dir={tmp_path / 'syn'}",
        f"cache_dir={tmp_path / 'cache'}",
        "phase1=none",
        "epochs=8",
        "num_queries=4",
        "label_mode=simple",
        "llm_pretrain_steps=0",
        "max_new_tokens=8",
        "threads=1",
        "frames=2",
        "grid=1",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True)
    hist, deadline = runs / "nb.running" / "phase2" / "history.jsonl", time.time() + 300
    while time.time() < deadline and p.poll() is None and not (hist.is_file() and hist.read_text().count("\n") >= 1):
        time.sleep(0.02)
    alive = p.poll() is None
    os.killpg(p.pid, signal.SIGKILL)  # at once: the run is in epoch 2 (or a little later), far from epoch 8
    p.wait()
    assert alive, p.stderr.read()[-2000:]  # still running when killed
    running = json.loads((runs / "nb.running" / "run.json").read_text())
    assert running["status"] == "running" and running["pid"] == p.pid  # watchable at a stable path
    done = [json.loads(l)["epoch"] for l in hist.read_text().splitlines()]
    assert 1 <= len(done) < 8 and not (runs / "nb").exists()  # killed mid-run; nothing published
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    run = json.loads((runs / "nb" / "run.json").read_text())
    assert run["status"] == "done" and run["resumed"] is True and not (runs / "nb.running").exists()
    epochs = [json.loads(l)["epoch"] for l in (runs / "nb" / "phase2" / "history.jsonl").read_text().splitlines()]
    assert epochs == list(range(1, 9))  # each epoch once: continued, not restarted


def test_run_is_watchable_and_one_process_per_name(tmp_path):
    "While a run executes, NAME.running/run.json says so; a second `vtreetrm run` of the same name is refused."
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(
        cells=[new_code_cell("secs = 1.0\nrun_dir = '.'"), new_code_cell("import time; time.sleep(secs)")]
    )
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "slow.ipynb")
    cmd = [
        sys.executable,
        "-c",
        "from vtreetrm.cli import console_main; console_main()",
        "run",
        str(tmp_path / "slow.ipynb"),
        "--name",
        "s",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--no-html",
        "-p",
        "secs",
        "20",
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        rj, deadline = tmp_path / "runs" / "s.running" / "run.json", time.time() + 120
        while time.time() < deadline and not rj.is_file():
            time.sleep(0.05)
        assert json.loads(rj.read_text())["status"] == "running"
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 2 and "run 's' is being executed by another process" in r.stderr
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    assert (
        main(
            [
                "run",
                str(tmp_path / "slow.ipynb"),
                "--name",
                "s",
                "--runs-dir",
                str(tmp_path / "runs"),
                "--no-html",
                "-p",
                "secs",
                "0",
            ]
        )
        == 0
    )
    assert (
        json.loads((tmp_path / "runs" / "s" / "params.json").read_text())["secs"] == 0
    )  # papermill's -p NAME VALUE, typed
