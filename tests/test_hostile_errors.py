"""User mistakes end in one short line: for every kind of input (YAML, JSON, numbers, databases, output paths, a full
disk) the command exits 2 with a single `error:` line under 1 KiB, no traceback, and nothing hangs."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

EXE = Path(sys.executable).parent / "vtreetrm"
PRLIMIT = shutil.which("prlimit")
BOMB = "harness:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  {chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
)


def cli(*args, cwd=None, prefix=(), timeout=120):
    r = subprocess.run(
        [*prefix, str(EXE), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    return r.returncode, r.stderr


def one_short_line(rc, err, *needles):
    lines = [l for l in err.splitlines() if l.strip() and "Warning" not in l and not l.startswith("  warnings.warn")]
    assert rc == 2 and "Traceback" not in err, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0].encode()) < 1024, err[-2000:]
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    d = tmp_path_factory.mktemp("errs")
    rc, err = cli("harness", "make-synthetic", "--out", d / "syn")
    assert rc == 0, err
    return d / "syn"


CONFIGS = {  # name -> (config text or bytes, what the error says)
    "alias bomb": (BOMB, "YAML expands to more than 100,000 values"),
    "not utf-8": (b"harness:\n  model: \xff\xfe\n", "not UTF-8"),
    "duplicate key": ("harness:\n  epochs: 1\n  epochs: 2\n", "duplicate key 'epochs'"),
    "infinite number": (
        "harness:\n  sim_latency_s: .inf\n",
        "field 'harness.sim_latency_s': inf is not a finite number",
    ),
    "binary value": ("harness:\n  model: !!binary aGVsbG8=\n", "a bytes value is not allowed"),
    "unclosed list": ("harness:\n  task_types: [a, b\n", "invalid YAML"),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_harness_configs(syn, tmp_path, name):
    text, says = CONFIGS[name]
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(text if isinstance(text, bytes) else text.encode())
    rc, err = cli(
        "harness",
        "infer",
        "--config",
        cfg,
        "--store-dir",
        syn / "store",
        "--workspace-dir",
        tmp_path / "ws",
        timeout=60,
    )
    one_short_line(rc, err, says, str(cfg))
    assert not (tmp_path / "ws").exists()


@pytest.mark.parametrize(
    "setting,says",
    [
        ("model=[unclosed", "invalid YAML"),
        ("sim_latency_s=.inf", "not a finite number"),
        ("concurrency=.nan", "not a finite number"),
    ],
)
def test_harness_set_values(syn, tmp_path, setting, says):
    rc, err = cli(
        "harness",
        "infer",
        "--store-dir",
        syn / "store",
        "--workspace-dir",
        tmp_path / "ws",
        "--set",
        setting,
        timeout=60,
    )
    one_short_line(rc, err, says)


@pytest.mark.parametrize("content", [b"not sqlite at all" * 64, b"SQLite format 3\x00" + b"\x00" * 200])
def test_a_foreign_harness_db(syn, tmp_path, content):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "harness.db").write_bytes(content)
    rc, err = cli(
        "harness", "infer", "--store-dir", syn / "store", "--workspace-dir", tmp_path / "ws", "--n-samples", 2
    )
    one_short_line(rc, err, "harness.db", "not a usable harness db")
    assert (tmp_path / "ws" / "harness.db").read_bytes() == content


@pytest.mark.parametrize(
    "param,says", [("n=.nan", "not a finite number"), ("n=!!binary aGVsbG8=", "a bytes value is not allowed")]
)
def test_notebook_parameters(tmp_path, param, says):
    rc, err = cli("run", "eval_and_analyze", "--name", "x", "-p", param, "--runs-dir", tmp_path)
    one_short_line(rc, err, says)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "body,says",
    [
        ("notebook: eval_and_analyze\njobs: many\n", "field 'jobs': must be a whole number"),
        ("notebook: [a, b]\n", "field 'notebook': must be text"),
        ("notebook: eval_and_analyze\nnotebook: b\n", "duplicate key 'notebook'"),
        (BOMB.replace("harness:", "params:"), "YAML expands to more than"),
    ],
)
def test_sweep_files(tmp_path, body, says):
    (tmp_path / "s.yaml").write_text(body)
    rc, err = cli("sweep", tmp_path / "s.yaml", "--runs-dir", tmp_path / "runs")
    one_short_line(rc, err, says, "s.yaml")
    assert not (tmp_path / "runs").exists()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("q")
    save_file(
        {"query_tokens": np.random.default_rng(0).normal(size=(1, 8, 16)).astype(np.float32)}, str(d / "q.safetensors")
    )
    return d / "q.safetensors"


def test_out_dot_names_the_folder_it_is(ckpt, tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    rc, err = cli("analyze", "queries", ckpt, "--out", ".", "--no-plots", cwd=tmp_path)
    one_short_line(rc, err, "refusing to replace a folder this tool did not write", str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


@pytest.mark.skipif(PRLIMIT is None, reason="prlimit is not installed")
def test_a_full_disk_is_one_line_and_keeps_the_old_output(ckpt, tmp_path):
    """RLIMIT_FSIZE makes every write past 2 KiB fail with EFBIG, as a full disk fails with ENOSPC."""
    out = tmp_path / "out"
    assert cli("analyze", "queries", ckpt, "--out", out, "--no-plots")[0] == 0
    before = (out / "summary.json").read_bytes()
    rc, err = cli("analyze", "queries", ckpt, "--out", out, "--no-plots", prefix=[PRLIMIT, "--fsize=2048"])
    one_short_line(rc, err, "too large")
    assert (out / "summary.json").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


NUMBERS = [  # every numeric flag is checked before any data is read (the dataset paths here do not exist)
    (["video", "phase1", "no-data", "--epochs", "0"], "--epochs must be a positive integer"),
    (["video", "phase1", "no-data", "--width", "-3"], "--width must be a positive integer"),
    (["video", "phase1", "no-data", "--lr", "nan"], "finite"),
    (["video", "phase2", "no-data", "--lr", "inf"], "--lr must be a finite number"),
    (["video", "phase2", "no-data", "--num-queries", "0"], "--num-queries must be a positive integer"),
    (["video", "phase2", "no-data", "--warmup-ratio", "2"], "--warmup-ratio must be in [0, 1)"),
    (["release", "make-synthetic", "--out", "OUT", "--records", "-5"], "--records must be from 1 to 1,000,000"),
    (["release", "make-synthetic", "--out", "OUT", "--records", "1000000000"], "--records must be from 1 to 1,000,000"),
    (["harness", "make-synthetic", "--out", "OUT", "--n-train-videos", "2"], "raise --n-train-videos"),
    (["harness", "make-synthetic", "--out", "OUT", "--n-test-videos", "0"], "--n-test-videos must be at least 1"),
    (["video", "phase2", "no-data", "--threads", "-1"], "--threads must be from 0 (all cores)"),
    (["video", "features", "no-data", "--batch-size", "0", "--cache", "OUT"], "--batch-size must be at least 1"),
    (["video", "features", "no-data", "--batch-size", "-1", "--cache", "OUT"], "--batch-size must be at least 1"),
    (["video", "features", "no-data", "--workers", "10000", "--cache", "OUT"], "--workers must be from 0 to"),
    (["video", "features", "no-data", "--frames", "1000000000", "--cache", "OUT"], "--frames 1000000000"),
    (["video", "features", "no-data", "--image-size", "100000", "--cache", "OUT"], "--image-size 100000"),
    (["sweep", "no.yaml", "--jobs", "-3"], "--jobs must be from 1 to"),
]


@pytest.mark.parametrize("argv,says", NUMBERS, ids=lambda v: " ".join(v[-2:]) if isinstance(v, list) else None)
def test_numbers_out_of_range(tmp_path, capsys, monkeypatch, argv, says):
    from vtreetrm.cli import main  # in this process: the video imports are paid once

    monkeypatch.chdir(tmp_path)
    rc = main([str(tmp_path / "out") if a == "OUT" else a for a in argv])
    one_short_line(rc, capsys.readouterr().err, says)
    assert not (tmp_path / "out").exists()
