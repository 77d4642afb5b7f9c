"""Phase-2 on two CPU processes (torchrun, gloo): the same optimizer steps on both ranks with an odd number of
batches, gathered validation, one writer; the test metrics equal a one-process `video predict` of the same best/;
--resume with two processes; training curves in steps.jsonl and in tensorboard."""

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil  # accelerate's dependency
import pytest

from vtreetrm.video.synthetic import SyntheticConfig, make_synthetic

EXE = Path(sys.executable).parent / "vtreetrm"


def torchrun(n, *args, timeout=280):
    "Run `vtreetrm ARGS` on `n` processes; a launch that outlives `timeout` fails the test with every process's stack."
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONFAULTHANDLER": "1",  # SIGABRT prints each thread's Python stack
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(n),
        str(EXE),
        *map(str, args),
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(psutil.NoSuchProcess):  # the launch may end between the timeout and these lines
            launcher = psutil.Process(p.pid)
            launcher.suspend()  # else it stops the other workers when the first one aborts
            for q in launcher.children(recursive=True) + [launcher]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    q.send_signal(signal.SIGABRT)  # one at a time, so that their stacks do not interleave
                    time.sleep(1)
            launcher.resume()
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        stacks = "\n".join(l for l in err.splitlines() if not l.startswith("Extension modules:"))
        pytest.fail(
            f"torchrun did not end within {timeout} s; stdout:\n{out[-2000:]}\nstderr (stacks):\n{stacks[-30000:]}"
        )
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def jl(p):
    return [json.loads(l) for l in Path(p).read_text().splitlines() if l.strip()]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("ddp")
    make_synthetic(
        d / "syn",
        SyntheticConfig(head_count=6, min_count=4, mammalnet_count=2, multi_label=1, n_short=0),
        datasets=("lote",),
        progress=False,
    )
    train = sum(r["split"] == "train" for r in jl(d / "syn" / "lote" / "manifest.jsonl"))
    bs = next(
        b for b in range(3, 40) if math.ceil(train / b) % 2 == 1 and math.ceil(train / b) >= 3
    )  # an odd batch count
    return d, bs


@pytest.mark.slow  # two torchrun launches and a predict (about 40 s); the default tier keeps the two-process cases below
def test_two_processes_then_resume(data, tmp_path):
    d, bs = data
    run = tmp_path / "run"
    common = [
        "video",
        "phase2",
        d / "syn" / "lote",
        "--out",
        run,
        "--cache",
        d / "cache",
        "--batch-size",
        bs,
        "--num-queries",
        4,
        "--max-new-tokens",
        16,
        "--threads",
        1,
        "--report-to",
        "tensorboard",
    ]
    r = torchrun(2, *common, "--epochs", 2)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("test Top1") == 1  # the main process reports, once
    assert sorted(p.relative_to(run) for p in run.rglob("metrics.json")) == [Path("metrics.json")]
    hist = jl(run / "history.jsonl")
    assert [h["epoch"] for h in hist] == [1, 2] and all("val_macro_f1" in h for h in hist)
    steps = jl(run / "steps.jsonl")
    assert [s["step"] for s in steps] == list(range(1, hist[-1]["step"] + 1))
    assert all(math.isfinite(s["loss"]) and s["grad_norm"] >= 0 and s["samples_per_s"] > 0 for s in steps)
    per_rank = math.ceil(
        math.ceil(sum(r["split"] == "train" for r in jl(d / "syn" / "lote" / "manifest.jsonl")) / 2) / bs
    )
    assert hist[0]["step"] == per_rank  # both ranks took the same number of steps
    assert json.loads((run / "run.json").read_text())["processes"] == 2
    # the same best/ predicted in one process gives the same answers and metrics
    one = subprocess.run(
        [
            str(EXE),
            "video",
            "predict",
            run / "best",
            "--dataset",
            d / "syn" / "lote",
            "--out",
            tmp_path / "one",
            "--cache",
            d / "cache",
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert one.returncode == 0, one.stderr[-2000:]
    a, b = jl(run / "predictions.jsonl"), jl(tmp_path / "one" / "predictions.jsonl")
    assert [x["id"] for x in a] == [x["id"] for x in b] and [x["output"] for x in a] == [x["output"] for x in b]
    ma, mb = json.loads((run / "metrics.json").read_text()), json.loads((tmp_path / "one" / "metrics.json").read_text())
    for k in ("top1_accuracy_single_label", "macro_f1"):
        assert abs(ma[k] - mb[k]) <= 1e-6
    # the tensorboard event file holds the curves
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ev = EventAccumulator(str(next(run.rglob("events.out.tfevents.*")).parent))
    ev.Reload()
    assert {"train/loss", "train/lr", "train/grad_norm", "val/top1", "val/macro_f1"} <= set(ev.Tags()["scalars"])
    assert [e.step for e in ev.Scalars("train/loss")] == [s["step"] for s in steps]
    # --resume with two processes continues from last/
    r = torchrun(2, *common, "--epochs", 3, "--resume")
    assert r.returncode == 0, r.stderr[-3000:]
    hist = jl(run / "history.jsonl")
    assert [h["epoch"] for h in hist] == [1, 2, 3] and hist[-1]["step"] == 3 * per_rank
    assert [s["step"] for s in jl(run / "steps.jsonl")] == list(range(1, 3 * per_rank + 1))


def test_more_processes_than_batches(data, tmp_path):
    d, _ = data
    train = sum(r["split"] == "train" for r in jl(d / "syn" / "lote" / "manifest.jsonl"))
    r = torchrun(
        2,
        "video",
        "phase2",
        d / "syn" / "lote",
        "--out",
        tmp_path / "run",
        "--cache",
        d / "cache",
        "--batch-size",
        train,
        "--threads",
        1,
        "--epochs",
        1,
    )
    assert r.returncode != 0
    errors = [l for l in r.stderr.splitlines() if l.startswith("error: ")]
    assert len(errors) == 2 and all("fewer than the 2 processes" in e for e in errors)  # one line from each rank
    assert not (tmp_path / "run").exists()


def test_tracker_not_installed(data, tmp_path, capsys):
    import importlib.util

    from vtreetrm.cli import main

    missing = next((t for t in ("wandb", "mlflow") if importlib.util.find_spec(t) is None), None)
    if missing is None:
        pytest.skip("wandb and mlflow are both installed")
    d, _ = data
    rc = main(
        [
            "video",
            "phase2",
            str(d / "syn" / "lote"),
            "--out",
            str(tmp_path / "run"),
            "--cache",
            str(d / "cache"),
            "--report-to",
            missing,
        ]
    )
    assert rc == 2 and f"the package '{missing}' is not installed" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # a Phase-2 run with wandb's offline writer (about 20 s)
def test_wandb_offline(data, tmp_path):
    pytest.importorskip("wandb")
    d, bs = data
    run = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    args = [
        "video",
        "phase2",
        d / "syn" / "lote",
        "--out",
        run,
        "--cache",
        d / "cache",
        "--batch-size",
        bs,
        "--epochs",
        1,
        "--max-steps",
        2,
        "--num-queries",
        4,
        "--max-new-tokens",
        4,
        "--threads",
        1,
        "--report-to",
        "wandb",
    ]
    r = subprocess.run([str(EXE), *map(str, args)], capture_output=True, text=True, timeout=280, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    logs = list(run.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(logs) == 1
    raw = logs[0].read_bytes()  # the offline log carries the same curves as steps.jsonl
    assert all(k in raw for k in (b"train/loss", b"train/lr", b"train/grad_norm", b"val/top1", b"val/macro_f1"))
    assert [s["step"] for s in jl(run / "steps.jsonl")] == [1, 2]
