"""Publication under attack: a kill at every rename never loses the published output, a folder or file this tool
did not write is never replaced, and published files get the umask's mode. Each family runs on several commands."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

EXE = Path(sys.executable).parent / "vtreetrm"
STRACE = shutil.which("strace")
CALLS = "rename,renameat,renameat2,unlink,unlinkat,rmdir"  # strace counts each call on its own: when=K hits the K-th of each


def cli(*args, umask=None, prefix=()):
    pre = (lambda: os.umask(umask)) if umask is not None else None
    return subprocess.run(
        [*prefix, str(EXE), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=pre,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"},
    )


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("pub")
    for seed in (0, 1):  # q0 the checkpoint, q1 another one (seed 1 of the commands below)
        q = np.random.default_rng(seed).normal(size=(1, 8, 16)).astype(np.float32)
        save_file({"query_tokens": q}, str(d / f"q{seed}.safetensors"))
    return d / "q0.safetensors"


COMMANDS = {  # name -> its args with OUT, and a seed that changes what it writes
    "analyze queries": lambda ck, out, seed=0: [
        *("analyze", "queries", ck.with_name(f"q{seed}.safetensors"), "--out", out, "--no-plots")
    ],
    "release make-synthetic": lambda ck, out, seed=0: [
        *("release", "make-synthetic", "--out", out, "--records", 40, "--no-progress", "--seed", seed)
    ],
    "harness make-synthetic": lambda ck, out, seed=0: ["harness", "make-synthetic", "--out", out, "--seed", seed],
}
VOLATILE = re.compile(rb'"(created|started|finished)": "[^"]*"')  # when a file was written: not what it says


def _tree(out: Path) -> dict:
    "A published folder as {relative path: contents, timestamps blanked}; refused unless published whole (its marker)."
    assert out.is_dir() and (out / ".vtreetrm-published").is_file(), sorted(os.listdir(out.parent))
    return {str(p.relative_to(out)): VOLATILE.sub(rb'"\1": ""', p.read_bytes()) for p in out.rglob("*") if p.is_file()}


@pytest.mark.skipif(STRACE is None, reason="strace is not installed")
@pytest.mark.parametrize(
    "name",
    [
        "analyze queries",
        pytest.param("harness make-synthetic", marks=pytest.mark.slow),
        pytest.param("release make-synthetic", marks=pytest.mark.slow),
    ],
)
def test_kill_at_every_rename_keeps_the_output(ckpt, tmp_path, name):
    args = COMMANDS[name]
    out = tmp_path / "out"
    assert cli(*args(ckpt, out)).returncode == 0
    old, after = _tree(out), []  # the published output; the output after each kill of a run publishing another
    killed = 0
    for k in range(1, 200):
        trap = [
            STRACE,
            "-f",
            "-qq",
            "-o",
            "/dev/null",
            "-e",
            f"trace={CALLS}",
            "-e",
            f"inject={CALLS}:signal=SIGKILL:when={k}",
        ]
        r = cli(*args(ckpt, out, seed=1), prefix=trap)
        after.append(_tree(out))
        if r.returncode == 0:
            break
        killed += 1
    assert killed >= 2  # renames were really interrupted
    new = after.pop()  # what the run that was not killed published
    assert new != old and set(new) == set(old)  # the two outputs differ in what they say, not in their files
    states = ["old" if t == old else "new" if t == new else f"neither: {sorted(t)}" for t in after]
    assert set(states) <= {"old", "new"} and states[0] == "old", states  # after every kill: the old or the new, whole
    assert cli(*args(ckpt, out)).returncode == 0  # the next run recovers: no stale temp or old folders remain
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")] == []


@pytest.mark.parametrize("name", list(COMMANDS))
@pytest.mark.parametrize("target", ["user folder", "file", "symlink"])
def test_outputs_replace_only_what_this_tool_wrote(ckpt, tmp_path, name, target):
    args = COMMANDS[name]
    out = tmp_path / "out"
    if target == "user folder":
        out.mkdir()
        (out / "notes.txt").write_text("keep me")
    elif target == "file":
        out.write_text("keep me")
    else:
        (tmp_path / "elsewhere").mkdir()
        out.symlink_to(tmp_path / "elsewhere")
    r = cli(*args(ckpt, out))
    assert r.returncode == 2 and "refusing to replace" in r.stderr and str(out) in r.stderr, r.stderr
    assert len([l for l in r.stderr.splitlines() if l.startswith("error: ")]) == 1 and "Traceback" not in r.stderr
    if target == "user folder":
        assert (out / "notes.txt").read_text() == "keep me"
    elif target == "file":
        assert out.read_text() == "keep me"
    else:
        assert out.is_symlink() and list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_published_files_get_the_umask_mode(ckpt, tmp_path, umask):
    out = tmp_path / "out"
    assert cli("analyze", "queries", ckpt, "--out", out, umask=umask).returncode == 0
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask
    assert (out / "summary.json").stat().st_mode & 0o777 == 0o666 & ~umask
    preds = tmp_path / "p"
    preds.mkdir()
    (preds / "predictions.jsonl").write_text(
        json.dumps(
            {"id": "a", "gold": ["x"], "output": "<predicted_actions>x</predicted_actions>", "candidates": ["x", "y"]}
        )
        + "\n"
    )
    assert cli("eval", "metrics", preds, umask=umask).returncode == 0
    assert (preds / "metrics.json").stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("umask", [0o002, 0o077])
def test_streamed_record_files_get_the_umask_mode(tmp_path, umask):
    "`release preprocess` streams its records file (not written whole): it too gets the mode a plain open() gives."
    syn = tmp_path / "syn"
    assert cli("release", "make-synthetic", "--out", syn, "--records", 20, "--no-progress").returncode == 0
    out = tmp_path / "processed" / "all.json"
    args = (
        "--input",
        syn / "RAW" / "shougang.xlsx",
        "--mapping",
        syn / "ASSETS" / "mappings" / "shougang.mapping.json",
    )
    r = cli("release", "preprocess", *args, "--output", out, "--dataset", "shougang", umask=umask)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask
