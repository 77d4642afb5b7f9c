"""Resolve the RL environments' requirements with pip (no install) and check the versions RL needs:
requirements/verl-rl.txt (GPU nodes): verl 0.9.1 with vllm 0.24.0, torch 2.11.0 and transformers 5.9.0;
requirements/verl-rl-cpu.txt after $TORCH_SPEC (`make env-rl` without CUDA): verl 0.9.1, transformers 5.9.0, the
TORCH_SPEC torch and no vllm or flash-attn; vtreetrm's core requirements in both resolutions."""

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

root = Path(__file__).resolve().parents[1]
core = [l.split("#")[0].strip() for l in (root / "requirements" / "core.txt").read_text().splitlines()]


def resolve(name: str, *args) -> dict:
    "name -> version of what `pip install ARGS` would install into an empty environment."
    with tempfile.TemporaryDirectory() as td:
        rep, r = Path(td) / "report.json", None
        # a stalled download (pip's read timeout) is not retried by pip itself; the index may answer a minute later
        for attempt in range(3):
            if attempt:
                print(f"{name} did not resolve, retrying ({attempt} of 2): {r.stderr.strip()[-300:]}")
                time.sleep(15)
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--dry-run",
                "--ignore-installed",
                "--report",
                str(rep),
            ]
            r = subprocess.run([*cmd, *args], capture_output=True, text=True)
            if not r.returncode:
                break
        if r.returncode:
            sys.exit(f"{name} does not resolve: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
        got = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(rep.read_text())["install"]}
    names = {k.replace("_", "-") for k in got}
    missing = [
        c for c in core if c and c.split(">")[0].split("=")[0].split("<")[0].lower().replace("_", "-") not in names
    ]
    if missing:
        sys.exit(f"core requirements missing from the resolution of {name}: {missing}")
    return got


gpu_want = {"verl": "0.9.1", "vllm": "0.24.0", "torch": "2.11.0", "transformers": "5.9.0"}
gpu = resolve("requirements/verl-rl.txt", "-r", str(root / "requirements" / "verl-rl.txt"))
bad = {k: (v, gpu.get(k)) for k, v in gpu_want.items() if gpu.get(k) != v}
if bad:
    sys.exit(f"requirements/verl-rl.txt resolves to other versions than RL needs: {bad}")
print(f"requirements/verl-rl.txt resolves: {len(gpu)} packages; " + ", ".join(f"{k} {gpu[k]}" for k in gpu_want))

torch_spec = shlex.split(os.environ.get("TORCH_SPEC", "torch==2.13.0"))
torch_version = next(a.split("==")[1] for a in torch_spec if a.startswith("torch=="))
cpu = resolve("requirements/verl-rl-cpu.txt", *torch_spec, "-r", str(root / "requirements" / "verl-rl-cpu.txt"))
bad = {k: (v, cpu.get(k)) for k, v in {"verl": "0.9.1", "transformers": "5.9.0"}.items() if cpu.get(k) != v}
if bad or cpu.get("torch", "").split("+")[0] != torch_version:
    sys.exit(f"requirements/verl-rl-cpu.txt resolves to other versions than RL needs: {bad}, torch {cpu.get('torch')}")
cuda_only = sorted(k for k in cpu if k in ("vllm", "flash-attn", "flash_attn"))
if cuda_only:
    sys.exit(f"requirements/verl-rl-cpu.txt pulls what needs CUDA: {cuda_only}")
nvidia = sum(k.startswith("nvidia-") for k in cpu)
print(f"requirements/verl-rl-cpu.txt resolves: {len(cpu)} packages; verl {cpu['verl']}, torch {cpu['torch']}, "
      f"transformers {cpu['transformers']}, no vllm or flash-attn, {nvidia} nvidia-* packages")  # fmt: skip
