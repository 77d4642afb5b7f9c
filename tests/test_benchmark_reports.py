"""The README's measured figures come from committed summaries: benchmarks/learnability.py writes its summary with
the figures and what produced them, and .ci/readme.py refuses a --quick one, a missing one, or a repeated marker."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_module():
    spec = importlib.util.spec_from_file_location("readme_ci", ROOT / ".ci" / "readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # about 80 s: the whole chain through the CLI, tiny
def test_learnability_quick_summary(tmp_path):
    "The --quick chain (tiny data, 1 epoch, 2 seeds) writes both files with the runs, the spread and provenance."
    env = {**os.environ, "VTREETRM_CACHE": str(tmp_path / "vcache"), "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, ROOT / "benchmarks/learnability.py", "--quick", "--seeds", "0", "1", "--out", tmp_path / "r",
         "--work", tmp_path / "w"],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    s = json.loads((tmp_path / "r/learnability.json").read_text())
    assert s["quick"] is True and s["machine"]["cpus"] == os.cpu_count()
    names = [r["name"] for r in s["figures"]["runs"]]
    assert names == ["lote_seed0", "lote_seed1", "lote_seed0_shuffled", "mammalnet_seed0", "lote_seed0_threads2"]
    assert [r["threads"] for r in s["figures"]["runs"]] == [1, 1, 1, 1, 2]
    top1 = [r["top1_accuracy_single_label"] for r in s["figures"]["runs"][:2]]
    sp = s["figures"]["seed_spread"]["top1"]
    assert sp["n"] == 2 and sp["min"] == min(top1) and sp["max"] == max(top1)
    t = s["figures"]["threads"]
    assert t["top1_diff"] == t["top1_2"] - t["top1_1"] and t["within_3_points"] == (abs(t["top1_diff"]) <= 0.03)
    assert s["figures"]["probes"] and set(s["figures"]["seconds"]) == {"make_synthetic", "phase1", "phase2", "ladder"}
    pv = s["provenance"]
    assert pv["git_sha"] and pv["versions"]["torch"] and "--quick" in pv["command"] and pv["params"]["quick"]
    md = (tmp_path / "r/learnability.md").read_text()
    assert "| lote_seed0_threads2 | 0 | 2 |" in md and "A --quick run (not for the README)" in md
    with pytest.raises(SystemExit, match="learnability.json is a --quick run's"):
        readme_module().summary("learnability", tmp_path / "r")


def test_readme_refuses_missing_summary(tmp_path):
    with pytest.raises(SystemExit, match="phase2_scale.json is missing: run `python benchmarks/phase2_scale.py"):
        readme_module().summary("phase2_scale", tmp_path)


def test_a_benchmark_never_writes_over_a_users_files(tmp_path, monkeypatch):
    "write_report replaces only an earlier summary of the same benchmark; a user's NAME.json or NAME.md is left as it is."
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import report

    pv = report.begin({"x": 1})
    report.write_report("bench", {"a": 1}, "| a |", pv, 1.0, True, tmp_path)
    report.write_report("bench", {"a": 2}, "| a |", pv, 1.0, True, tmp_path)  # its own earlier summary: replaced
    assert json.loads((tmp_path / "bench.json").read_text())["figures"] == {"a": 2}
    (tmp_path / "other.json").write_text('{"mine": 1}\n')
    (tmp_path / "notes.md").write_text("mine\n")
    for name in ("other", "notes"):
        with pytest.raises(SystemExit, match="refusing to replace"):
            report.write_report(name, {"a": 1}, "| a |", pv, 1.0, True, tmp_path)
    assert (tmp_path / "other.json").read_text() == '{"mine": 1}\n' and (tmp_path / "notes.md").read_text() == "mine\n"


def test_the_real_release_summary_holds_together():
    "The release chain's real-LLM figures agree with one another: the loss fell, the gate's verdict, verl-rl's answer."
    f = json.loads((ROOT / "reports/real_release.json").read_text(encoding="utf-8"))["figures"]
    ls = f["sft"]["losses"]
    assert len(ls) == f["plan"]["steps"] >= 24 and f["loss_fell"] == (sum(ls[-3:]) < sum(ls[:3])) is True
    assert f["tool_format"] == "inline" and f["merge"]["merged"] == ["bfloat16"]
    for g in f["gate"].values():
        inside = 0.05 <= g["nonzero_reward_rate"] <= 0.30
        assert g["status"] == ("passed" if inside else "failed") and g["denominator"] == f["plan"]["gate_n"], g
        assert round(g["nonzero_reward_rate"] * g["denominator"], 6) % 1 == 0  # a count over the episodes
    rl = f["rl_launch"]
    assert (rl["exit"] == 0) == (f["gate"]["tuned"]["status"] == "passed"), rl
