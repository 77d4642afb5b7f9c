"""Harness concurrency: 480 agent episodes against a local OpenAI-compatible stub (127.0.0.1, fixed latency).

Each simulated episode makes 4 model calls (look, search_captions, read_captions, answer), so with latency L and
concurrency C the ideal wall time is ceil(N / C) * 4 * L. Prints the measured time, the ratio to that ideal, and
the speed-up over a sequential baseline (concurrency 1) measured in the same process.

    .venv/bin/python benchmarks/harness_concurrency.py [--episodes 480] [--concurrency 24] [--latency 0.05]
"""

import argparse
import asyncio
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from vtreetrm.harness.config import EmbedConfig, RunConfig
from vtreetrm.harness.runner import Runner
from vtreetrm.harness.synthetic import make_synthetic

CALLS_PER_EPISODE = 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_stub(latency):
    port = free_port()
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from vtreetrm.harness.stub import main; main()",
            "--port",
            str(port),
            "--latency",
            str(latency),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(200):
        try:
            httpx.post(
                url + "/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "Question: x"}]},
                timeout=1,
            )
            return p, url
        except httpx.TransportError:
            time.sleep(0.05)
    p.kill()
    raise SystemExit("stub server did not start")


def timed_answers(root, url, n, concurrency, run_id):
    cfg = RunConfig(
        workspace_dir=root / "ws",
        store_dir=root / "store",
        mode="infer",
        run_id=run_id,
        backend="openai",
        base_url=url,
        model="stub",
        concurrency=concurrency,
        n_samples=n,
        embed=EmbedConfig(backend="hashing"),
    )
    r = Runner(cfg, fresh=True, progress=False)

    async def go():
        r._setup()
        try:
            t0 = time.perf_counter()
            rows = await r.answer_many(r.questions, r.S0, r.P0, {"phase": "infer"})
            return time.perf_counter() - t0, rows
        finally:
            await r.backend.aclose()
            r.store.close()
            r._log.close()

    return asyncio.run(go())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=480)
    ap.add_argument("--concurrency", type=int, default=24)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--baseline-episodes", type=int, default=24)
    a = ap.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "sk-local-stub")
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "syn"
        per_task = math.ceil(a.episodes / 6)
        make_synthetic(
            root,
            n_train_videos=max(20, per_task // 6 + 10),
            n_test_videos=10,
            per_task=per_task,
            test_ar=10,
            test_other=2,
        )
        stub, url = start_stub(a.latency)
        try:
            timed_answers(root, url, 8, 8, "warmup")  # imports, tree loading, first shapes
            t_seq, rows_seq = timed_answers(root, url, a.baseline_episodes, 1, "sequential")
            t_conc, rows = timed_answers(root, url, a.episodes, a.concurrency, "concurrent")
        finally:
            stub.kill()
            stub.wait()
    assert len(rows) == a.episodes and all(r["error"] is None for r in rows), "episodes failed"
    ideal = math.ceil(a.episodes / a.concurrency) * CALLS_PER_EPISODE * a.latency
    per_ep_seq = t_seq / a.baseline_episodes
    print(
        f"episodes={a.episodes} concurrency={a.concurrency} latency={a.latency * 1000:.0f}ms calls/episode={CALLS_PER_EPISODE}"
    )
    print(
        f"sequential baseline: {per_ep_seq * 1000:.1f} ms/episode (ideal {CALLS_PER_EPISODE * a.latency * 1000:.0f} ms)"
    )
    print(f"concurrent: {t_conc:.2f} s, ideal {ideal:.2f} s, ratio to ideal {t_conc / ideal:.3f} (target <= 1.2)")
    print(f"speed-up over sequential: {per_ep_seq * a.episodes / t_conc:.1f}x (ideal {a.concurrency}x)")


if __name__ == "__main__":
    main()
