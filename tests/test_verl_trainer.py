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


def on_this_checkout(monkeypatch):
    "The launched torchrun and its trainer import this checkout's vtreetrm."
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


def train_and_merge(capfd, c, t: Path, steps: int, *flags):
    """`verl-sft --device cpu --no-dry-run` on the chain's trajectory release for `steps` steps (more verl overrides and
    flags in `flags`), the losses of verl's console logger checked (one finite loss per step), then `verl-merge` of the
    last checkpoint into t/merged: the losses by step."""
    sft = ["verl-sft", "--release", c.run / "traj", "--model", t / "model", "--output-dir", t / "sft"]
    rc, out, err = run(capfd, *sft, "--device", "cpu", "--no-dry-run", *flags)
    assert rc == 0, err[-3000:]
    losses = {int(s): float(v) for s, v in re.findall(r"step:(\d+) - .*?train/loss:(\S+)", out + err)}
    assert sorted(losses) == list(range(1, steps + 1)), (out + err)[-3000:]
    assert all(math.isfinite(v) for v in losses.values()), losses
    ck = t / f"sft/checkpoints/global_step_{steps}"
    rc, _, merr = run(capfd, "verl-merge", "--checkpoint", ck, "--out", t / "merged")
    assert rc == 0, merr[-3000:]
    return losses


def tools(c) -> list:
    a = c.assets
    return ["--registry", a.registry, "--corpus", a.corpus, "--task-config", a.task_config]


def live_gate(capfd, c, t: Path, *live):
    "`rollout-gate` live on t/merged over the chain's RL release, its report in t/gate.json: (exit code, report, stderr)."
    rc, _, err = run(capfd, "rollout-gate", "--model", t / "merged", "--release", c.run / "rl", *tools(c), *live,
                     "--report", t / "gate.json")  # fmt: skip
    return rc, read_json(t / "gate.json"), err


def audit_and_launch(capfd, c, t: Path):
    """The release's audit (it must pass), then `verl-rl` on t/merged with t/gate.json and that audit, writing to
    t/rl-launch: (exit code, stdout, stderr)."""
    r, audit = c.run, t / "audit.json"
    std = [f"--{k}-standard=shougang={c.syn}/STANDARDS/shougang.{k}.json" for k in ("classification", "grading")]
    rc, out, err = run(capfd, "audit", "--bundle", "--canonical", f"shougang={r}/canonical/shougang/all.json", *std,
                       "--report", audit, "--no-progress")  # fmt: skip
    assert rc == 0 and read_json(audit)["status"] == "passed", err[-3000:]
    launch = ["verl-rl", "--release", r / "rl", "--sft-model", t / "merged", "--rollout-gate", t / "gate.json"]
    launch += [*tools(c), "--audit", audit, "--reference", t / "model", "--output-dir", t / "rl-launch"]
    return run(capfd, *launch)


@pytest.mark.slow
@pytest.mark.verl
def test_verl_sft_trains_on_cpu_then_merges_and_gates(tmp_path, capfd, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM

    on_this_checkout(monkeypatch)
    c = verl_chain(tmp_path, **TRAINED_QWEN2)
    extra = [f"trainer.total_training_steps={STEPS}", f"trainer.save_freq={STEPS}", "trainer.test_freq=-1"]
    extra += ["data.train_batch_size=4", "data.micro_batch_size_per_gpu=2"]
    train_and_merge(capfd, c, tmp_path, STEPS, "--smoke", "--extra", *extra)
    cmd = (tmp_path / "sft/command.sh").read_text()
    assert "-m vtreetrm.release.verl_cpu" in cmd and "trainer.device=cpu" in cmd and "engine.strategy=fsdp2" in cmd
    ck = tmp_path / f"sft/checkpoints/global_step_{STEPS}"
    assert (ck / "model_world_size_1_rank_0.pt").is_file() and (ck / "fsdp_config.json").is_file()
    assert (tmp_path / "sft/checkpoints/latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    init = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    trained, start = merged.state_dict(), init.state_dict()
    assert trained.keys() == start.keys()
    assert any(not torch.equal(trained[k].float(), start[k].float()) for k in start), (
        "the merge holds the initial weights"
    )

    rc, g, err = live_gate(capfd, c, tmp_path, "--n", 2, "--max-turns", 1, "--max-new-tokens", 8)
    # 2 episodes give a rate of 0, 50 or 100%, never inside the 5-30% band: the gate runs to the end and fails
    assert rc == 1 and g["status"] == "failed", err[-3000:]
    sha = model_identity(tmp_path / "merged")["sha256"]
    assert g["model"]["sha256"] == sha == read_json(tmp_path / "merged/merge_report.json")["sha256"]
    # verl-rl takes that gate for that model (with the release's audit) and refuses it in one line, with the gate's
    # figures; nothing written
    rc, out, err = audit_and_launch(capfd, c, tmp_path)
    one_line(err, rc, "the rollout gate did not pass", "nonzero_reward_rate", str(tmp_path / "gate.json"))
    assert not (tmp_path / "rl-launch").exists()


# the accepting chain: a direct-answer trajectory release (thoughts filled by the reviewed-generator step), verl's own
# trainer long enough to answer in the release's format, its checkpoint merged, gated live and launched
ACCEPT_STEPS = 600
THINK = "依据字段描述与表名选定类别。"


@pytest.mark.slow
@pytest.mark.verl
def test_verl_sft_checkpoint_passes_the_gate_and_launches_rl(tmp_path, capfd, monkeypatch):
    from verl_chain import validated_launch

    on_this_checkout(monkeypatch)
    c = verl_chain(tmp_path, records=1000, classes=["direct"], think=THINK, seed=0, **TRAINED_QWEN2)
    assert read_json(c.run / "traj/export_report.json")["classes"] == ["direct"]
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
    losses = train_and_merge(capfd, c, tmp_path, ACCEPT_STEPS, "--extra", *extra)  # a filled release: no --smoke
    assert losses[ACCEPT_STEPS] < losses[1] / 4, losses

    # every val episode
    rc, g, err = live_gate(capfd, c, tmp_path, "--n", 200, "--max-turns", 2, "--max-new-tokens", 48)
    with capfd.disabled():  # the gate's figures in the test log (pytest -s)
        keys = ("denominator", "nonzero_reward_numerator", "nonzero_reward_rate", "answer_parsed_rate")
        print("rollout gate:", {k: g[k] for k in keys}, "model", g["model"]["sha256"])
    # every answer parses (the format is learnt), and some are right: the band RL can learn from
    assert rc == 0 and g["status"] == "passed" and g["answer_parsed_rate"] == 1.0, (g, err[-2000:])
    assert g["denominator"] == pq.read_metadata(c.run / "rl/val.parquet").num_rows > 64, g
    assert (
        0.05 <= g["nonzero_reward_rate"] <= 0.30
        and g["model"]["sha256"] == model_identity(tmp_path / "merged")["sha256"]
    )

    rc, out, err = audit_and_launch(capfd, c, tmp_path)
    assert rc == 0, err[-3000:]
    rep = read_json(tmp_path / "rl-launch/launch_report.json")
    gate = tmp_path / "gate.json"
    assert rep["gates"]["rollout_gate"]["sha256"] == sha256_file(gate) and rep["checks"]["rollout_gate_passed"], rep
    cfg = validated_launch(tmp_path / "rl-launch/command.sh")  # verl's own validate_config passed on it
    assert cfg.actor_rollout_ref.model.path == str(tmp_path / "merged")
