"""`make gpu-check`'s CPU half (benchmarks/gpu_check.py without CUDA): one summary with every item, the CPU-sized items
ok with finite figures, the GPU-only ones not run with their reason, and a non-zero exit when an item fails."""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ITEMS = ("harness_cuda", "dinov2_large_features", "phase2_7b", "verl_sft", "vllm_rollout")


def gpu_check(out: Path, *args):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}  # the CPU half, also on a GPU node
    p = subprocess.run([sys.executable, ROOT / "benchmarks/gpu_check.py", "--out", out, *args],
                       capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    return p, json.loads((out / "summary.json").read_text())


def test_cpu_half_summary(tmp_path):
    p, s = gpu_check(tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert set(ITEMS) <= s.keys() and s["device"] == "cpu" and s["failed"] == []
    assert s["provenance"]["device_name"] == "cpu" and s["provenance"]["versions"]["torch"]
    for name in ("verl_sft", "vllm_rollout"):
        assert s[name]["status"] == "not run" and s[name]["reason"].startswith("no CUDA device"), s[name]
    figures = {
        "harness_cuda": ["cpu_captions_per_s"],
        "dinov2_large_features": ["frames_per_s"],
        "phase2_7b": ["tokens_per_s", "samples_per_s"],
    }
    for name, keys in figures.items():
        r = s[name]
        assert r["status"] == "ok" and r["device"] == "cpu", r
        assert all(math.isfinite(r[k]) and r[k] > 0 for k in keys), r
        assert r["not_run"] and all(r.get(k) is None and why == "no CUDA device" for k, why in r["not_run"].items()), r
        assert 0 < r["seconds"] <= r["budget_s"]
    assert "6 * N * tokens" in s["phase2_7b"]["flops_formula"] and s["phase2_7b"]["not_run"]["mfu"] == "no CUDA device"
    for name in ITEMS:
        assert f"\n{name}: {s[name]['status']} in " in p.stdout  # per-item seconds printed


def test_an_item_over_its_budget_fails_the_run(tmp_path):
    p, s = gpu_check(tmp_path, "--items", "phase2_7b", "--budget-scale", "0.0001")
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    assert s["failed"] == ["phase2_7b"] and s["phase2_7b"]["error"] == "TimeoutError: over its time budget"
    assert all(s[n] == {"status": "not run", "reason": "not among --items"} for n in ITEMS if n != "phase2_7b")


def test_over_budget_whatever_the_item_made_of_the_alarm(monkeypatch):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check as gc

    def swallowed(cuda, tmp, budget):  # a library that catches the alarm's TimeoutError and fails otherwise
        try:
            time.sleep(2)
        except TimeoutError:
            pass
        raise ModuleNotFoundError("No module named 'packaging._structures'")

    def hidden(cuda, tmp, budget):  # ... or goes on as if nothing happened
        try:
            time.sleep(2)
        except TimeoutError:
            pass
        return {"figure": 1.0}

    monkeypatch.setitem(gc.ITEMS, "swallowed", (1, swallowed))
    monkeypatch.setitem(gc.ITEMS, "hidden", (1, hidden))
    for name in ("swallowed", "hidden"):
        r = gc.run_item(name, False, 0.05)
        assert r["status"] == "failed" and r["error"] == "TimeoutError: over its time budget", r
    monkeypatch.setitem(gc.ITEMS, "quick", (1, lambda cuda, tmp, budget: {"figure": 1.0}))
    assert gc.run_item("quick", False, 5)["status"] == "ok"  # an item within its budget is not marked


@pytest.mark.cuda
@pytest.mark.slow  # the GPU half: DINOv2-large features, a Phase-2 step of the 7B shape, captions on the card
def test_gpu_half_summary(tmp_path):
    "`make gpu-check`'s GPU-sized items on a CUDA device: each ok there, its GPU figures measured (none left unrun)."
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "gpu"
    items = ["harness_cuda", "dinov2_large_features", "phase2_7b"]
    p = subprocess.run([sys.executable, ROOT / "benchmarks/gpu_check.py", "--out", out, "--items", *items],
                       capture_output=True, text=True, timeout=1800, env=env)  # fmt: skip
    s = json.loads((out / "summary.json").read_text())
    assert p.returncode == 0 and s["failed"] == [], p.stdout[-3000:] + p.stderr[-3000:]
    for name in items:
        r = s[name]
        assert r["status"] == "ok" and str(r["device"]).startswith("cuda") and not r.get("not_run"), r
