"""verl's own SFT trainer run on a CPU (`release verl-sft --device cpu --no-dry-run`), then `verl-merge` of its
checkpoint and the live rollout gate on the merged model, on the synthetic chain and a tiny Qwen2."""

import math
import os
import re
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import one_line
from verl_chain import TRAINED_QWEN2, verl_chain

from vtreetrm.cli import main
from vtreetrm.utils import model_identity, read_json, sha256_file

pytest.importorskip("verl", reason="needs the optional verl extra")
ROOT = Path(__file__).resolve().parents[1]
STEPS = 3


def run(capfd, *argv):
    rc = main(["release", *map(str, argv)])
    cap = capfd.readouterr()
    return rc, cap.out, cap.err


@pytest.mark.slow
@pytest.mark.verl
def test_verl_sft_trains_on_cpu_then_merges_and_gates(tmp_path, capfd, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM

    # the launched torchrun and its trainer import this checkout's vtreetrm
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    c = verl_chain(tmp_path, **TRAINED_QWEN2)
    r, a = c.run, c.assets
    extra = [f"trainer.total_training_steps={STEPS}", f"trainer.save_freq={STEPS}", "trainer.test_freq=-1"]
    extra += ["data.train_batch_size=4", "data.micro_batch_size_per_gpu=2"]
    sft = ["verl-sft", "--release", r / "traj", "--model", tmp_path / "model", "--output-dir", tmp_path / "sft"]
    rc, out, err = run(capfd, *sft, "--smoke", "--device", "cpu", "--no-dry-run", "--extra", *extra)
    assert rc == 0, err[-3000:]
    cmd = (tmp_path / "sft/command.sh").read_text()
    assert "-m vtreetrm.release.verl_cpu" in cmd and "trainer.device=cpu" in cmd and "engine.strategy=fsdp2" in cmd
    # verl's console logger: one line per optimizer step, each with a finite loss
    losses = {int(s): float(v) for s, v in re.findall(r"step:(\d+) - .*?train/loss:(\S+)", out + err)}
    assert sorted(losses) == list(range(1, STEPS + 1)), out[-3000:]
    assert all(math.isfinite(v) for v in losses.values()), losses
    ck = tmp_path / f"sft/checkpoints/global_step_{STEPS}"
    assert (ck / "model_world_size_1_rank_0.pt").is_file() and (ck / "fsdp_config.json").is_file()
    assert (tmp_path / "sft/checkpoints/latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)

    rc, out, err = run(capfd, "verl-merge", "--checkpoint", ck, "--out", tmp_path / "merged")
    assert rc == 0, err[-3000:]
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    init = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    trained, start = merged.state_dict(), init.state_dict()
    assert trained.keys() == start.keys()
    assert any(not torch.equal(trained[k].float(), start[k].float()) for k in start), (
        "the merge holds the initial weights"
    )

    gate = tmp_path / "gate.json"
    tools = ["--registry", a.registry, "--corpus", a.corpus, "--task-config", a.task_config]
    live = ["--n", 2, "--max-turns", 1, "--max-new-tokens", 8, "--report", gate]
    rc, out, err = run(capfd, "rollout-gate", "--model", tmp_path / "merged", "--release", r / "rl", *tools, *live)
    # 2 episodes give a rate of 0, 50 or 100%, never inside the 5-30% band: the gate runs to the end and fails
    assert rc == 1 and read_json(gate)["status"] == "failed", err[-3000:]
    sha = model_identity(tmp_path / "merged")["sha256"]
    assert read_json(gate)["model"]["sha256"] == sha == read_json(tmp_path / "merged/merge_report.json")["sha256"]
    # verl-rl takes that gate for that model (with the release's audit) and refuses it in one line, with the gate's
    # figures; nothing written
    audit = tmp_path / "audit.json"
    std = [f"--{k}-standard=shougang={c.syn}/STANDARDS/shougang.{k}.json" for k in ("classification", "grading")]
    rc, out, err = run(capfd, "audit", "--bundle", "--canonical", f"shougang={r}/canonical/shougang/all.json", *std,
                       "--report", audit, "--no-progress")  # fmt: skip
    assert rc == 0 and read_json(audit)["status"] == "passed", err[-3000:]
    launch = ["verl-rl", "--release", r / "rl", "--sft-model", tmp_path / "merged", "--rollout-gate", gate, *tools]
    launch += ["--audit", audit, "--reference", tmp_path / "model"]
    rc, out, err = run(capfd, *launch, "--output-dir", tmp_path / "rl-launch")
    one_line(err, rc, "the rollout gate did not pass", "nonzero_reward_rate", str(gate))
    assert not (tmp_path / "rl-launch").exists()


# the accepting chain: a direct-answer trajectory release (thoughts filled by the reviewed-generator step), verl's own
# trainer long enough to answer in the release's format, its checkpoint merged, gated live and launched
ACCEPT_STEPS = 600
THINK = "依据字段描述与表名选定类别。"


@pytest.mark.slow
@pytest.mark.verl
def test_verl_sft_checkpoint_passes_the_gate_and_launches_rl(tmp_path, capfd, monkeypatch):
    from verl_chain import validated_launch

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    c = verl_chain(tmp_path, records=1000, classes=["direct"], think=THINK, seed=0, **TRAINED_QWEN2)
    r, a = c.run, c.assets
    assert read_json(r / "traj/export_report.json")["classes"] == ["direct"]
    extra = [
        f"trainer.total_training_steps={ACCEPT_STEPS}",
        f"trainer.save_freq={ACCEPT_STEPS}",
        "trainer.test_freq=-1",
    ]
    extra += [
        "trainer.total_epochs=1000",
        "data.train_batch_size=4",
        "data.micro_batch_size_per_gpu=4",
        "optim.lr=5e-3",
        "optim.lr_scheduler_type=cosine",  # a constant 5e-3 to the end leaves the tiny model's format unsteady
        "optim.lr_warmup_steps_ratio=0.05",
    ]
    sft = ["verl-sft", "--release", r / "traj", "--model", tmp_path / "model", "--output-dir", tmp_path / "sft"]
    rc, out, err = run(
        capfd, *sft, "--device", "cpu", "--no-dry-run", "--extra", *extra
    )  # a filled release: no --smoke
    assert rc == 0, err[-3000:]
    losses = {int(s): float(v) for s, v in re.findall(r"step:(\d+) - .*?train/loss:(\S+)", out + err)}
    assert sorted(losses) == list(range(1, ACCEPT_STEPS + 1)) and losses[ACCEPT_STEPS] < losses[1] / 4, losses
    ck = tmp_path / f"sft/checkpoints/global_step_{ACCEPT_STEPS}"
    rc, out, err = run(capfd, "verl-merge", "--checkpoint", ck, "--out", tmp_path / "merged")
    assert rc == 0, err[-3000:]

    gate = tmp_path / "gate.json"
    tools = ["--registry", a.registry, "--corpus", a.corpus, "--task-config", a.task_config]
    live = ["--n", 200, "--max-turns", 2, "--max-new-tokens", 48, "--report", gate]  # every val episode
    rc, out, err = run(capfd, "rollout-gate", "--model", tmp_path / "merged", "--release", r / "rl", *tools, *live)
    g = read_json(gate)
    with capfd.disabled():  # the gate's figures in the test log (pytest -s)
        keys = ("denominator", "nonzero_reward_numerator", "nonzero_reward_rate", "answer_parsed_rate")
        print("rollout gate:", {k: g[k] for k in keys}, "model", g["model"]["sha256"])
    # every answer parses (the format is learnt), and some are right: the band RL can learn from
    assert rc == 0 and g["status"] == "passed" and g["answer_parsed_rate"] == 1.0, (g, err[-2000:])
    assert g["denominator"] == pq.read_metadata(r / "rl/val.parquet").num_rows > 64, g
    assert (
        0.05 <= g["nonzero_reward_rate"] <= 0.30
        and g["model"]["sha256"] == model_identity(tmp_path / "merged")["sha256"]
    )

    audit = tmp_path / "audit.json"
    std = [f"--{k}-standard=shougang={c.syn}/STANDARDS/shougang.{k}.json" for k in ("classification", "grading")]
    rc, out, err = run(capfd, "audit", "--bundle", "--canonical", f"shougang={r}/canonical/shougang/all.json", *std,
                       "--report", audit, "--no-progress")  # fmt: skip
    assert rc == 0, err[-3000:]
    launch = ["verl-rl", "--release", r / "rl", "--sft-model", tmp_path / "merged", "--rollout-gate", gate, *tools]
    launch += ["--audit", audit, "--reference", tmp_path / "model", "--output-dir", tmp_path / "rl-launch"]
    rc, out, err = run(capfd, *launch)
    assert rc == 0, err[-3000:]
    rep = read_json(tmp_path / "rl-launch/launch_report.json")
    assert rep["gates"]["rollout_gate"]["sha256"] == sha256_file(gate) and rep["checks"]["rollout_gate_passed"], rep
    cfg = validated_launch(tmp_path / "rl-launch/command.sh")  # verl's own validate_config passed on it
    assert cfg.actor_rollout_ref.model.path == str(tmp_path / "merged")
