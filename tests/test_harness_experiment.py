"The harness_train experiment notebook through `vtreetrm run`, with small parameters, recording its metrics."

import json
import sqlite3

import pytest

ACCEPTED = ("confirm", "provisional")  # the gate's decisions that make the candidate the incumbent


def _rows(db, sql: str, *args) -> list[dict]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(sql, args)]
    finally:
        con.close()


def _check_gate_moves_the_versions(ws, m: dict):
    """The skills the training ends with are the ones the gate's decisions lead to, replayed from the store; the gate both
    accepted and rejected edits; the held-out and test scores move only with the versions."""
    fin = json.loads((ws / "analyses" / "final_test_eval.json").read_text())
    db, run = ws / "harness.db", fin["run_id"]
    gates = _rows(db, "SELECT * FROM gate_decisions WHERE run_id=? ORDER BY rowid", run)
    edits = [g for g in gates if g["kind"] != "watch"]
    assert {g["decision"] for g in edits} <= {*ACCEPTED, "reject"}, gates
    decisions = [g["decision"] for g in edits]
    assert set(decisions) & set(ACCEPTED) and "reject" in decisions, decisions  # the gate chose, edit by edit
    S, at_step = fin["baseline"]["skills_version"], {}  # the incumbent, replayed; the incumbent after each fast step
    for g in gates:
        assert g["incumbent_version"] == S, (g, S)  # each round gates a candidate against the current incumbent
        if g["decision"] in ACCEPTED and g["kind"] != "watch" or g["decision"] == "rollback":
            S = g["candidate_version"]  # accepted: the candidate; rolled back: the parent
        if g["kind"] != "slow":
            at_step[g["step"]] = S
    assert S == fin["final"]["skills_version"] == m["final_skills_version"]
    P = fin["baseline"]["prompts_version"]
    for e in _rows(db, "SELECT detail_json FROM events WHERE run_id=? AND key LIKE 'prompts/%' ORDER BY rowid", run):
        e = json.loads(e["detail_json"])
        P = e["candidate"] if e["adopted"] else P
    assert P == fin["final"]["prompts_version"]
    # the skills in use at each step are the replayed incumbent; the held-out score is one per version pair
    S, heldout = fin["baseline"]["skills_version"], {}
    for r in _rows(db, "SELECT * FROM dual_metric WHERE run_id=? ORDER BY step", run):
        S = at_step.get(r["step"], S)
        assert r["skills_version"] == S, (r, S)
        assert (
            heldout.setdefault((r["skills_version"], r["prompts_version"]), r["heldout_accuracy"])
            == r["heldout_accuracy"]
        )
    # the test scores are those of the answers the store holds for each side's versions
    for side in ("baseline", "final"):
        v = fin[side]
        rows = _rows(
            db,
            "SELECT correct FROM answers WHERE run_id=? AND phase='test' AND skills_version=? AND prompts_version=?",
            run,
            v["skills_version"],
            v["prompts_version"],
        )
        assert len(rows) == v["n"] and v["accuracy"] == pytest.approx(sum(r["correct"] for r in rows) / len(rows))
    same = (fin["final"]["skills_version"], fin["final"]["prompts_version"]) == (
        fin["baseline"]["skills_version"],
        fin["baseline"]["prompts_version"],
    )
    assert not same  # the accepted edits survived to the end ...
    assert m["test_accuracy_final"] > m["test_accuracy_baseline"]  # ... and raised the test score, as the gate claimed


def test_harness_train_notebook_runs(tmp_path, cli):
    cli(
        "run",
        "harness_train",
        "--runs-dir",
        tmp_path / "runs",
        "--name",
        "small",
        "--no-html",
        "-p",
        "embed_backend=hashing",
        "n_train_videos=12",
        "n_test_videos=16",
        "epochs=2",
        check=0,
    )
    d = tmp_path / "runs" / "small"
    m = json.loads((d / "metrics.json").read_text())
    assert m["epochs_run"] == 2 and len(m["per_epoch_val"]) == 2
    assert m["test_accuracy_final"] >= m["test_accuracy_baseline"]
    _check_gate_moves_the_versions(d / "harness" / "syn" / "workspaces" / "train-action-recognition", m)
    assert m["gate_off"]["bad_edits_accepted"] > m["gate"]["bad_edits_accepted"]
    nb = json.loads((d / "small.ipynb").read_text())
    outputs = json.dumps([c.get("outputs", []) for c in nb["cells"] if c["cell_type"] == "code"])
    assert (
        "holdout not run" not in outputs and "batch_accuracy" in outputs and "candidate" in outputs
    )  # four-way table, dual_metric shown


def test_harness_videos_notebook_runs(tmp_path, cli):
    "Videos -> build-trees -> Video-MME-layout questions -> infer and train; the HTML shows a tree and the accuracy table."
    cli("run", "harness_videos", "--runs-dir", tmp_path / "runs", "--name", "hv", "-p", "n_videos=6", check=0)
    d = tmp_path / "runs" / "hv"
    m = json.loads((d / "metrics.json").read_text())
    assert m["trees"] == 6 and m["n_test"] == 3 * 4  # 3 test videos x (3 colour questions + 1 order question)
    assert m["boundary_at_scene_change"] == 1.0 and m["figure_colour_named"] >= 0.9  # the trees fit the rendered scenes
    assert set(m["per_task_type"]) == {"Object Recognition", "Temporal Perception"}
    assert m["test_accuracy_baseline_infer"] == m["test_accuracy_train_start"]
    # the final accuracy recomputed from the answers the store holds for the final versions (answer == gold)
    work = d / "harness-videos" / "ws"
    fin = json.loads((work / "analyses" / "final_test_eval.json").read_text())["final"]
    con = sqlite3.connect(work / "harness.db")
    try:
        rows = con.execute(
            "SELECT answer, gold FROM answers WHERE phase='test' AND run_id NOT LIKE 'infer_%'"
            " AND skills_version=? AND prompts_version=?",
            (fin["skills_version"], fin["prompts_version"]),
        ).fetchall()
    finally:
        con.close()
    assert len(rows) == m["n_test"]
    assert m["test_accuracy_train_final"] == pytest.approx(sum(a == g for a, g in rows) / len(rows))
    html = (d / "hv.html").read_text()
    assert "segment span (s)" in html and "train: final" in html and "A dark black scene" in html
