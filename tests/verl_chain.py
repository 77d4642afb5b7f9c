"""The synthetic chain's releases and a tiny Qwen2 with a tokenizer trained on them, for the verl tests and
benchmarks/gpu_check.py (a module without pytest, so an environment without it, like .venv-rl, imports it)."""

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq

from vtreetrm.release.assets import write_grading_manifest

# the tiny Qwen2 that verl's trainer takes steps on (tests/test_verl_trainer.py, benchmarks/gpu_check.py)
TRAINED_QWEN2 = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    tie_word_embeddings=True,
)  # fmt: skip


def verl_chain(t: Path, records: int = 80, classes=None, think: str = None, seed: int = 0, **model):
    """The synthetic chain (`records` field records) in `t` with its rl-cascade release (run/rl) and trajectory release
    (run/traj: the trajectory `classes`, all when None; thoughts mock, or when `think` is given, the think shards
    collected and filled with that text as a reviewed generator would, then exported from the filled files), and a tiny
    Qwen2 in t/model (`model`: Qwen2Config sizes to change; its initial weights drawn from torch seed `seed`) with a tokenizer trained on the trajectories and the RL
    prompts, each of the release's choice ids one token (a byte-level BPE splits them into letters and digits)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from vtreetrm.release.canonical import synthetic_chain
    from vtreetrm.release.chat import build_chat_tokenizer
    from vtreetrm.release.mixture import mixture
    from vtreetrm.release.rl import rl_export
    from vtreetrm.release.trajectory import ThinkSource, _clean, trajectory_collect, trajectory_export

    c = synthetic_chain(t, records=records)
    r, a = c.run, c.assets
    can = r / "canonical/shougang/all.json"
    rl_export(can, r / "rl-source", "shougang", progress=False, assets=a)
    shutil.copy(c.syn / "STANDARDS/shougang.grading.json", r / "grading.json")
    write_grading_manifest(r / "grading-manifest.json", {"shougang": "grading.json"})
    mixture("rl-cascade", [f"shougang={r}/rl-source"], r / "grading-manifest.json", output_dir=r / "rl",
            progress=False, assets=a)  # fmt: skip
    source = ThinkSource()
    if think is not None:
        trajectory_collect("shougang", can, a, collect_dir=r / "collect", progress=False)
        (r / "filled").mkdir()
        for f in sorted((r / "collect").glob("think-*.jsonl")):
            lines = [json.loads(x) for x in f.read_text(encoding="utf-8").splitlines()]
            filled = [{**x, "think": think, "tool_think": [think] * len(x["tool_think"])} for x in lines]
            (r / "filled" / f.name).write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in filled))
        source = ThinkSource("file:filled", r)
    trajectory_export("shougang", can, a, source, output_dir=r / "traj", classes=classes, progress=False)
    rows = pq.read_table(r / "traj/train.parquet").to_pylist()
    prompts = [json.dumps(x["prompt"], ensure_ascii=False) for x in pq.read_table(r / "rl/train.parquet").to_pylist()]
    texts = [json.dumps([_clean(m) for m in x["messages"]], ensure_ascii=False) for x in rows] * 2 + prompts
    tok = build_chat_tokenizer(texts, vocab_size=1500)
    tok.add_tokens(sorted(a.context().choices.to_choice.values()))
    sizes = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
    )
    torch.manual_seed(seed)  # the same initial weights in every process, so the training that follows is repeatable
    Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), **{**sizes, **model})).save_pretrained(t / "model")
    tok.save_pretrained(t / "model")
    return c


def validated_launch(command_sh: Path):
    """The PPO config of a `verl-rl` launch composed as `verl.trainer.main_ppo` composes it (verl's installed
    ppo_trainer.yaml with the overrides of the command in `command_sh`), after verl's own `validate_config` passed on it."""
    import shlex

    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    lines = Path(command_sh).read_text().splitlines(keepends=True)
    while lines and lines[0].startswith(("#", "set ")):  # the shebang, set -euo pipefail, the Ray note
        lines.pop(0)
    cmd = shlex.split("".join(lines))  # one command, whose quoted values may span lines (a chat template)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer/config"), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=cmd[cmd.index("verl.trainer.main_ppo") + 1 :])
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    return cfg


def gate_dump(rl_release: Path, path: Path, every: int, n: int = 40) -> Path:
    """A rollout dump (`rollout-gate --from-dump`) of the first `n` train rows of an rl-cascade release, every
    `every`-th response right and the others a wrong choice: a gate rate of 1/`every`."""
    rows = pq.read_table(Path(rl_release) / "train.parquet").to_pylist()[:n]
    wrong = '{"choice_id": "K00000000", "data_level": "L1"}'
    lines = [{"sample_id": r["extra_info"]["sample_id"], "ground_truth": r["reward_model"]["ground_truth"],
              "response": r["reward_model"]["ground_truth"] if i % every == 0 else wrong} for i, r in enumerate(rows)]  # fmt: skip
    Path(path).write_text("".join(json.dumps(x) + "\n" for x in lines))
    return Path(path)
