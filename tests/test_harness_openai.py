"The openai backend against a local OpenAI-compatible stub on 127.0.0.1: tool calls, retries, timeouts, 429/500, keys."

import asyncio
import sqlite3

import pytest
from conftest import harness_infer

from vtreetrm.harness.backends import BackendError, Backoff, OpenAIBackend
from vtreetrm.harness.stub import StubServer
from vtreetrm.harness.synthetic import make_synthetic

MSGS = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "Task type: X\nQuestion: q?\nOptions:\nA. a\nB. b"},
]


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    d = tmp_path_factory.mktemp("oa") / "syn"
    make_synthetic(d, n_train_videos=8, n_test_videos=6, per_task=8, test_ar=8, test_other=2)
    return d


def test_retries_then_success_and_retry_after():
    with StubServer(fail_500_every=2, fail_429_every=3) as s:
        b = OpenAIBackend(s.url, "m", "k", timeout=5, max_retries=4, backoff=Backoff(0.01))

        async def go():
            out = [await b.chat(MSGS) for _ in range(6)]
            await b.aclose()
            return out

        replies = asyncio.run(go())
        assert all(r.tool_calls and r.tool_calls[0].name == "look" for r in replies)
        assert b.stats["retries"] >= 3 and b.stats["failures"] == 0 and s.stats["requests"] > 6


def test_timeout_is_retried_then_raised():
    with StubServer(hang_every=1, hang_s=2.0) as s:
        b = OpenAIBackend(s.url, "m", "k", timeout=0.2, max_retries=2, backoff=Backoff(0.01))

        async def go():
            try:
                await b.chat(MSGS)
            finally:
                await b.aclose()

        with pytest.raises(BackendError, match=r"timeout after 0.2s \(after 3 attempts\)"):
            asyncio.run(go())


def test_client_error_is_not_retried():
    with StubServer(api_key="right") as s:
        b = OpenAIBackend(s.url, "m", "wrong", timeout=5, max_retries=3, backoff=Backoff(0.01))

        async def go():
            try:
                await b.chat(MSGS)
            finally:
                await b.aclose()

        with pytest.raises(BackendError, match="HTTP 401"):
            asyncio.run(go())
        assert s.stats["requests"] == 1


def _infer(syn, url, run_id, backend="openai", extra=("max_retries=8",)):
    return harness_infer(
        syn / "store",
        syn / "ws",
        "--run-id",
        run_id,
        "--backend",
        backend,
        "--base-url",
        url,
        "--model",
        "stub",
        sets=("embed.backend=hashing", "request_timeout=5", *extra),
    )


def test_openai_run_matches_simulated_and_records_failures(syn, monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-local\n")  # the key comes from .env
    with StubServer(fail_500_every=5, fail_429_every=7, api_key="sk-local") as s:
        assert _infer(syn, s.url, "oa") == 0
        n_req = s.stats["requests"]
    assert _infer(syn, "http://unused", "sim", backend="simulated") == 0
    con = sqlite3.connect(syn / "ws/harness.db")
    oa = dict(con.execute("SELECT question_id, answer FROM answers WHERE run_id='infer_oa'").fetchall())
    sim = dict(con.execute("SELECT question_id, answer FROM answers WHERE run_id='infer_sim'").fetchall())
    assert oa == sim and len(oa) == 48 and n_req > 48 * 3
    # a server that always fails: every episode is recorded with its error, and the run fails naming the server
    capsys.readouterr()
    with StubServer(fail_500_every=1, api_key="sk-local") as s:
        assert _infer(syn, s.url, "down", extra=["n_samples=5", "max_retries=1"]) == 2
    rows = con.execute("SELECT answer, correct, error FROM answers WHERE run_id='infer_down'").fetchall()
    status = con.execute("SELECT status FROM runs WHERE run_id='infer_down'").fetchone()[0]
    con.close()
    assert len(rows) == 5 and all(a is None and c == 0 and "HTTP 500" in e for a, c, e in rows) and status == "failed"
    assert f"all 5 infer answers failed at {s.url}" in capsys.readouterr().err


def test_episodes_in_flight_never_exceed_concurrency(syn, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    with StubServer(latency_s=0.02) as s:
        rc = harness_infer(
            syn / "store",
            tmp_path / "ws",
            "--run-id",
            "c3",
            "--backend",
            "openai",
            "--base-url",
            s.url,
            "--model",
            "stub",
            "--concurrency",
            "3",
            "--n-samples",
            "12",
        )
        assert rc == 0 and s.stats["max_in_flight"] == 3 and s.stats["ok"] == 12 * 4


def test_local_server_needs_no_key(syn, monkeypatch, tmp_path, capsys):
    "A base URL alone is enough (a local vLLM has no key); neither a base URL nor a key stops the run before any question."
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env here either
    with StubServer() as s:
        rc = harness_infer(
            syn / "store",
            tmp_path / "ws",
            "--run-id",
            "nokey",
            "--backend",
            "openai",
            "--base-url",
            s.url,
            "--model",
            "stub",
            "--n-samples",
            "3",
        )
        assert rc == 0 and s.stats["ok"] == 3 * 4
    rc = harness_infer(syn / "store", tmp_path / "ws2", "--backend", "openai", "--model", "stub")
    assert (
        rc == 2 and "needs base_url" in capsys.readouterr().err and not (tmp_path / "ws2/logs/episodes.jsonl").exists()
    )
