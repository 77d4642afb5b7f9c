"""The release smoke experiment runs end to end under papermill with tiny parameters and records its verdicts."""

import importlib.util
import json

import pytest

from vtreetrm.runs.papermill import run_notebook


@pytest.mark.slow  # the whole experiment notebook through papermill (about 20 s); its refusal case stays in the default tier
def test_release_smoke_notebook(tmp_path):
    run = run_notebook("release_smoke", "smoke", params={"records": 150}, runs_dir=tmp_path, html=False, progress=False)
    assert run["status"] == "done", run.get("error")
    m = json.loads((tmp_path / "smoke" / "metrics.json").read_text())
    assert m["records"] == 150 and sum(m["split_counts"].values()) == 150
    assert m["audit_status"] == "passed" and m["conflict_keys"] == 0
    assert set(m["verdicts"].values()) <= {"ok", "passed"} and len(m["verdicts"]) == 13
    assert m["sft_rows"] == 300 and m["rl_cascade_rows"] == 150
    assert sum(sum(c.values()) for c in m["trajectory_classes"].values()) == 150 and m["trajectory_tokens"]["n"] == 150
    g = m["rollout_gate"]
    assert (
        g["denominator"] >= 1 and g["status"] == "failed" and g["likely_cause"]
    )  # a tiny random model cannot pass the gate
    if importlib.util.find_spec("verl") is None:
        assert "skipped" in m["verl_checks"]
        pytest.skip(
            "verl is not installed (the [verl] extra): the notebook's checks through verl's dataset classes did not run"
        )
    assert "skipped" not in m["verl_checks"], m["verl_checks"]
    v = m["verl_checks"]
    # verl's own dataset classes read every RL row, and the first 16 SFT trajectories each train on some token
    assert v["RLHFDataset rows"] == v["rl-cascade rows"] == m["split_counts"]["train"]
    assert v["MultiTurnSFTDataset rows checked"] == 16


def test_release_smoke_blocks_on_conflicts(tmp_path):
    run = run_notebook(
        "release_smoke",
        "blocked",
        params={"records": 150, "conflicts": 6, "trajectories": False},
        runs_dir=tmp_path,
        html=False,
        progress=False,
    )
    assert run["status"] == "failed" and "prompt-conflict audit failed" in run["error"]
