"""Resolve requirements/verl-rl.txt with pip (no install) and check the versions RL needs: verl 0.9.1 with vllm 0.24.0,
torch 2.11.0 and transformers 5.9.0, and vtreetrm's core requirements in the same resolution."""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WANT = {"verl": "0.9.1", "vllm": "0.24.0", "torch": "2.11.0", "transformers": "5.9.0"}
root = Path(__file__).resolve().parents[1]
with tempfile.TemporaryDirectory() as td:
    rep, r = Path(td) / "report.json", None
    # a stalled download (pip's read timeout) is not retried by pip itself; the index may answer a minute later
    for attempt in range(3):
        if attempt:
            print(f"requirements/verl-rl.txt did not resolve, retrying ({attempt} of 2): {r.stderr.strip()[-300:]}")
            time.sleep(15)
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--dry-run",
                "--ignore-installed",
                "--report",
                str(rep),
                "-r",
                str(root / "requirements" / "verl-rl.txt"),
            ],
            capture_output=True,
            text=True,
        )
        if not r.returncode:
            break
    if r.returncode:
        sys.exit(f"requirements/verl-rl.txt does not resolve: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    got = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(rep.read_text())["install"]}
bad = {k: (v, got.get(k)) for k, v in WANT.items() if got.get(k) != v}
if bad:
    sys.exit(f"requirements/verl-rl.txt resolves to other versions than RL needs: {bad}")
core = [l.split("#")[0].strip() for l in (root / "requirements" / "core.txt").read_text().splitlines()]
missing = [
    c
    for c in core
    if c
    and c.split(">")[0].split("=")[0].split("<")[0].lower().replace("_", "-") not in {k.replace("_", "-") for k in got}
]
if missing:
    sys.exit(f"core requirements missing from the RL resolution: {missing}")
print(f"requirements/verl-rl.txt resolves: {len(got)} packages; " + ", ".join(f"{k} {got[k]}" for k in WANT))
