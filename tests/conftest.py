import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def vtreetrm_argv(*args) -> list:
    "The argv of the `vtreetrm` console script (or the same entry point through this Python) with `args`."
    exe = Path(sys.executable).parent / "vtreetrm"
    return [
        str(exe) if exe.exists() else sys.executable,
        *([] if exe.exists() else ["-c", "from vtreetrm.cli import console_main; console_main()"]),
        *map(str, args),
    ]


def vtreetrm(*args, cwd=None, check=None, timeout=900):
    "Run the `vtreetrm` console script like a user; returns the CompletedProcess."
    r = subprocess.run(vtreetrm_argv(*args), cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout)
    if check is not None:
        assert r.returncode == check, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


@pytest.fixture
def cli():
    return vtreetrm


# headless Chromium for the page tests: the flags that keep it off a closed network (no background, update or sync traffic)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"]  # fmt: skip


def chromium_cmd(profile, *extra) -> list:
    "A headless Chromium command line with its own profile folder and `extra` flags."
    return [CHROMIUM, "--headless", *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra]
