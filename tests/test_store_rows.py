"""Every row the harness store writes, read back in this process: each field where it was put, each time stamp set,
values JSON cannot hold written as text, missing rows read as None, and correctness always scored again from the
answer and the gold (a db edited by hand cannot turn a wrong answer right)."""

import json
import sqlite3
from datetime import datetime
from pathlib import Path

import pytest

from vtreetrm.harness.store import HarnessStore, extract_run_db, scored
from vtreetrm.utils import UserError


def stamped(row: dict) -> bool:
    "Whether `row['created']` is an ISO time of today's kind (a time stamp the store set)."
    return isinstance(row["created"], str) and datetime.fromisoformat(row["created"]).year >= 2024


@pytest.fixture
def store(tmp_path):
    s = HarnessStore(tmp_path / "harness.db")
    yield s
    s.close()


def test_scored_trusts_no_stored_flag():
    assert scored({"answer": "B", "gold": "B", "correct": 0})["correct"] == 1
    assert scored({"answer": "A", "gold": "B", "correct": 1})["correct"] == 0
    assert scored({"answer": None, "gold": None, "correct": 1})["correct"] == 0  # no answer is never right
    assert (
        scored({"answer": None, "gold": "B"})["correct"] == 0 and scored({"answer": "B", "gold": None})["correct"] == 0
    )
    assert scored({"gold": "B"})["correct"] == 0 and type(scored({"answer": "B", "gold": "B"})["correct"]) is int


def test_a_run_is_started_resumed_and_finished(store):
    assert store.run("r1") is None and store.run_ids() == []
    store.start_run("r1", "train", {"where": Path("/data"), "epochs": 2}, "s1", "p1")
    r = store.run("r1")
    assert (r["run_id"], r["mode"], r["status"], r["finished"], r["note"]) == ("r1", "train", "running", None, None)
    assert (r["skills_version"], r["prompts_version"]) == ("s1", "p1")
    assert json.loads(r["config_json"]) == {"where": "/data", "epochs": 2}  # a path is written as text
    assert datetime.fromisoformat(r["started"]).year >= 2024
    store.start_run("r0", "infer", {}, "s0", "p0")
    assert store.run_ids() == ["r1", "r0"]  # in the order they started
    store.finish_run("r1", "failed", note="stopped")
    assert store.run("r1")["status"] == "failed" and store.run("r1")["finished"] is not None
    store.start_run("r1", "train", {"epochs": 9}, "s9", "p9")  # resumed: running again, the rest kept
    r2 = store.run("r1")
    assert r2["status"] == "running" and r2["finished"] is None and r2["started"] == r["started"]
    assert json.loads(r2["config_json"])["epochs"] == 2 and r2["skills_version"] == "s1"
    store.finish_run("r1", skills_version="s2")
    assert store.run("r1")["skills_version"] == "s2" and store.run("r1")["prompts_version"] == "p1"


def test_answers_are_read_back_scored_in_order(store):
    store.put_answer(run_id="r", question_id="q2", skills_sha="s", prompts_sha="p", answer="A", gold="A", correct=0,
                     created="2026-01-02T00:00:00")  # fmt: skip
    store.put_answer(run_id="r", question_id="q1", skills_sha="s", prompts_sha="p", answer="B", gold="A", correct=1)
    store.put_answer(run_id="r", question_id="q0", skills_sha="s", prompts_sha="p", answer=None, gold="A",
                     created="2026-01-02T00:00:00")  # fmt: skip
    rows = store.answers("r")
    assert [a["question_id"] for a in rows][:2] == ["q0", "q2"] and rows[-1]["question_id"] == "q1"
    assert [a["correct"] for a in rows] == [0, 1, 0] and stamped(rows[-1])
    assert store.correctness("r") == {"q0": False, "q2": True, "q1": False}
    assert store.get_answer("r", "q2", "s", "p")["correct"] == 1 and store.get_answer("r", "q2", "s", "x") is None
    assert store.answers("other") == [] and store.correctness("other") == {}


def test_versions_reflections_events_gates_metrics_and_holdout_cells(store):
    store.put_version("r", "skills", "v1", "sha1")
    store.put_version("r", "skills", "v2", "sha2", parent="v1")
    store.put_version("r", "prompts", "v1", "psha")
    assert store.versions("r", "skills") == {"v1": "sha1", "v2": "sha2"} and store.versions("r", "x") == {}
    v = store.table("versions", "r")
    assert [x["parent"] for x in v] == [None, "v1", None] and all(map(stamped, v))

    assert store.get_reflection("r", "k") is None
    store.put_reflection("r", "k", {"edits": [1, 2]})
    assert store.get_reflection("r", "k") == {"edits": [1, 2]} and stamped(store.table("reflections", "r")[0])

    assert store.get_event("r", "e") is None
    store.put_event("r", "e", {"at": Path("/x"), "n": 1})
    assert store.get_event("r", "e") == {"at": "/x", "n": 1} and stamped(store.table("events", "r")[0])

    store.put_gate("r", "g1", decision="accept", detail={"log_k": 1.5, "where": Path("/y")})
    store.put_gate("r", "g2", decision="reject")
    g = store.table("gate_decisions", "r")
    assert [(x["run_id"], x["key"], x["decision"]) for x in g] == [("r", "g1", "accept"), ("r", "g2", "reject")]
    assert json.loads(g[0]["detail_json"]) == {"log_k": 1.5, "where": "/y"} and json.loads(g[1]["detail_json"]) == {}
    assert all(map(stamped, g))

    store.put_dual_metric("r", 1, 7, batch_accuracy=0.5, n_batch=4)
    d = store.table("dual_metric", "r")[0]
    assert (d["run_id"], d["epoch"], d["step"], d["batch_accuracy"], d["n_batch"]) == ("r", 1, 7, 0.5, 4) and stamped(d)

    store.put_holdout("r", 2, skills="candidate", prompts="incumbent", accuracy=0.75, n=8)
    h = store.table("holdout", "r")[0]
    assert (h["run_id"], h["epoch"], h["skills"], h["accuracy"], h["n"]) == ("r", 2, "candidate", 0.75, 8)

    store.put_event("r2", "e", {})
    assert len(store.table("events")) == 2 and len(store.table("events", "r2")) == 1  # no run: every run's rows
    with pytest.raises(ValueError):
        store.table("sqlite_master")


def test_a_run_copied_out_is_its_rows_alone_in_a_db_of_one_file(store, tmp_path):
    store.start_run("r", "train", {}, "s", "p")
    store.start_run("other", "train", {}, "s", "p")
    store.put_event("r", "e", {"n": 1})
    store.put_event("other", "e", {"n": 2})
    out = extract_run_db(store.path, tmp_path / "one.db", "r")
    one = HarnessStore(out, readonly=True)
    try:
        assert one.run_ids() == ["r"] and one.get_event("r", "e") == {"n": 1} and one.get_event("other", "e") is None
    finally:
        one.close()
    assert not (tmp_path / "one.db-wal").exists() and not (tmp_path / ".one.db.tmp").exists()
    assert sqlite3.connect(out).execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # readable as one file
    with pytest.raises(UserError, match="no run 'nope'; runs here: other, r|no run 'nope'; runs here: r, other"):
        extract_run_db(store.path, tmp_path / "two.db", "nope")
    with pytest.raises(UserError, match="destination exists"):
        extract_run_db(store.path, out, "r")
    with pytest.raises(UserError, match="no such harness db"):
        extract_run_db(tmp_path / "missing.db", tmp_path / "three.db", "r")
