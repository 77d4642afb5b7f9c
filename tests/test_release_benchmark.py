"""The release benchmark script runs end to end at a tiny size (no timing asserted)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_release_benchmark_smoke(tmp_path):
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/release_chain.py"),
            "--records",
            "300",
            "--workdir",
            str(tmp_path),
            "--trajectories",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    for step in ("preprocess", "sft-export", "rl-validate-cascade", "trajectory-export", "trajectory-validate"):
        assert step in p.stdout
    assert "chain total" in p.stdout and "bare pyarrow write_table" in p.stdout and "tool re-execution" in p.stdout
    last = p.stdout.strip().splitlines()[-2:]  # the figures the README's performance table points at, last
    assert last[0].startswith("chain: 300 records in") and "peak RSS of any step" in last[0], last
    assert (
        last[1].startswith("sft-export ratio to bare write_table (medians of 5): export part")
        and "whole command" in last[1]
    ), last
