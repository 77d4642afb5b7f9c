"The harness_train experiment notebook through `vtreetrm run`, with small parameters, recording its metrics."

import json
import sqlite3

import pytest


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
