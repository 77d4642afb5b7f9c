"""Launch gates (verl-sft, verl-rl in --dry-run) and the post-SFT rollout gate, on a tiny local model built in-process."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import one_line
from verl_chain import gate_dump, validated_launch, verl_chain

from vtreetrm.cli import main
from vtreetrm.release.assets import NATIVE_PROMPT_FIELDS
from vtreetrm.utils import read_json

MF = ["--metadata-fields", *NATIVE_PROMPT_FIELDS]


def run(capsys, *argv):
    rc = main(["release", *map(str, argv)])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    t = tmp_path_factory.mktemp("launch")
    return t, verl_chain(t).assets


def tools_flags(a):
    return ["--registry", a.registry, "--corpus", a.corpus, "--task-config", a.task_config]


@pytest.mark.verl
def test_verl_sft_dry_run(setup, capsys):
    pytest.importorskip("verl")
    t, a = setup
    # the fixture's release was exported with mock <think> text: a CPU smoke, refused as a formal SFT
    rc, out, err = run(
        capsys, "verl-sft", "--release", t / "run/traj", "--model", t / "model", "--output-dir", t / "launch-sft"
    )
    assert (
        rc == 2
        and "think_source is mock" in err
        and "--smoke" in err
        and "export_report.json" in err
        and not (t / "launch-sft").exists()
    )
    rc, out, err = run(
        capsys,
        "verl-sft",
        "--release",
        t / "run/traj",
        "--model",
        t / "model",
        "--output-dir",
        t / "launch-sft",
        "--smoke",
    )
    assert rc == 0, err
    assert (
        "torchrun --standalone" in out.splitlines()[-1]
        and out.split()[0].endswith("torchrun")
        and "verl.trainer.sft_trainer" in out
        and "data.enable_thinking_default=null" in out
    )
    assert "trainer.experiment_name=sft-trajectory-smoke" in out
    assert (
        "data.custom_cls.path=pkg://vtreetrm.release.verl_dataset" in out
        and "data.custom_cls.name=PrefixDiffSFTDataset" in out
    )
    rep = read_json(t / "launch-sft/launch_report.json")
    assert (
        rep["status"] == "ready"
        and rep["checks"]["multiturn_sft_dataset_rows"] > 0
        and rep["verl_version"].startswith("0.9")
    )
    assert rep["smoke"] is True and rep["think_source"] == "mock"
    cfg = (t / "launch-sft/config.yaml").read_text()
    assert "enable_thinking_default: null" in cfg and "tools_key: tools" in cfg
    assert (t / "launch-sft/command.sh").read_text().count("torchrun") == 1
    assert rep["checks"]["custom_cls"] == "pkg://vtreetrm.release.verl_dataset:PrefixDiffSFTDataset"


# a template that prints contents alone, as SmolLM2-Instruct's does: tools, calls and reasoning vanish
BARE_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _with_template(model: Path, to: Path, template: str) -> Path:
    "A copy of the test model at `to` whose tokenizer has the chat template `template`."
    shutil.copytree(model, to)
    (to / "chat_template.jinja").write_text(template)
    return to


@pytest.mark.verl
def test_verl_sft_gate_with_qwen3_template(setup, capsys, tmp_path):
    "A model whose tokenizer has a Qwen3-style template passes the gate (verl's per-message dataset would not)."
    pytest.importorskip("verl")
    t, a = setup
    m = _with_template(t / "model", tmp_path / "qwen3-model",
                       (Path(__file__).parent / "fixtures/qwen3_rules_chat_template.jinja").read_text())  # fmt: skip
    rc, out, err = run(
        capsys, "verl-sft", "--release", t / "run/traj", "--model", m, "--output-dir", tmp_path / "l", "--smoke"
    )
    assert rc == 0, err
    assert read_json(tmp_path / "l/launch_report.json")["checks"]["multiturn_sft_dataset_rows"] == 8
    # a template that drops the reasoning of an earlier turn from inside the conversation is refused, naming the turn
    (m / "chat_template.jinja").write_text(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' and loop.last %}"
        "<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    rc, out, err = run(
        capsys, "verl-sft", "--release", t / "run/traj", "--model", m, "--output-dir", tmp_path / "l2", "--smoke"
    )
    # (it drops the tool calls too, so `auto` writes them into the turns: the reasoning still moves)
    assert (
        rc == 2 and "InlineToolsSFTDataset rejects the data" in err and "(assistant)" in err and "train.parquet" in err
    )
    assert not (tmp_path / "l2").exists()


@pytest.mark.verl
def test_verl_sft_writes_tool_calls_into_the_turns_of_a_template_that_drops_them(setup, capsys, tmp_path):
    "A template that prints contents alone (SmolLM2-Instruct's): `native` is refused in one line, `auto` goes inline."
    pytest.importorskip("verl")
    t, a = setup
    m = _with_template(t / "model", tmp_path / "bare-model", BARE_TEMPLATE)
    flags = ["--release", t / "run/traj", "--model", m, "--smoke"]
    rc, out, err = run(capsys, "verl-sft", *flags, "--output-dir", tmp_path / "n", "--tool-format", "native")
    assert (
        rc == 2
        and "template drops" in err
        and "a turn's tool calls" in err
        and "--tool-format inline" in err
        and "Traceback" not in err
    )
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "n").exists()
    rc, out, err = run(capsys, "verl-sft", *flags, "--output-dir", tmp_path / "i")
    assert rc == 0, err
    rep = read_json(tmp_path / "i/launch_report.json")
    tf = rep["tool_format"]
    assert tf["requested"] == "auto" and tf["used"] == "inline" and "a turn's tool calls" in tf["template_drops"]
    assert rep["checks"]["custom_cls"].endswith(":InlineToolsSFTDataset")
    assert "data.custom_cls.name=InlineToolsSFTDataset" in (tmp_path / "i/command.sh").read_text()
    # the same template under the project's ChatML one keeps everything: native
    rc, out, err = run(capsys, "verl-sft", "--release", t / "run/traj", "--model", t / "model", "--smoke",
                       "--output-dir", tmp_path / "c")  # fmt: skip
    assert rc == 0 and read_json(tmp_path / "c/launch_report.json")["tool_format"]["used"] == "native", err


def _audit(capsys, t, canonical, report):
    s = t / "syn"
    return run(
        capsys,
        "audit",
        "--bundle",
        "--canonical",
        f"shougang={canonical}",
        "--classification-standard",
        f"shougang={s}/STANDARDS/shougang.classification.json",
        "--grading-standard",
        f"shougang={s}/STANDARDS/shougang.grading.json",
        "--report",
        report,
        "--no-progress",
    )


@pytest.mark.verl
def test_verl_rl_dry_run(setup, capsys, tmp_path):
    pytest.importorskip("verl")
    t, a = setup
    assert (
        run(
            capsys,
            "rollout-gate",
            "--from-dump",
            gate_dump(t / "run/rl", tmp_path / "d.jsonl", 8),
            "--model",
            t / "model",
            "--report",
            tmp_path / "gate.json",
        )[0]
        == 0
    )
    assert _audit(capsys, t, t / "run/canonical/shougang/all.json", tmp_path / "audit.json")[0] == 0
    rl = [
        "verl-rl",
        "--release",
        t / "run/rl",
        "--sft-model",
        t / "model",
        *tools_flags(a),
        "--rollout-gate",
        tmp_path / "gate.json",
        "--audit",
        tmp_path / "audit.json",
        "--reference",
        t / "model",
    ]
    rc, out, err = run(
        capsys,
        *rl,
        "--output-dir",
        t / "launch-rl",
        "--nnodes",
        2,
        "--gpus-per-node",
        8,
        "--logger",
        "console,tensorboard",
    )
    assert rc == 0, err
    # the written launch passes verl's own validate_config, composed here as verl.trainer.main_ppo composes it: verl's
    # installed ppo_trainer.yaml with the command's overrides, the world size the launch states (2 nodes x 8 GPUs)
    cfg = validated_launch(t / "launch-rl/command.sh")
    assert cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node == 16
    assert (
        "verl.trainer.main_ppo" in out
        and "algorithm.adv_estimator=rloo" in out
        and "reward.custom_reward_function.name=compute_score" in out
    )
    assert (
        "actor_rollout_ref.rollout.name=vllm" in out
        and "trainer.nnodes=2" in out
        and "trainer.n_gpus_per_node=8" in out
    )
    assert "trainer.logger=[console,tensorboard]" in out
    # the project's ChatML template renders the tools itself: verl's agent loop keeps it
    assert "custom_chat_template" not in out and cfg.actor_rollout_ref.model.custom_chat_template is None
    rep = read_json(t / "launch-rl/launch_report.json")
    assert rep["checks"]["validate_config"] and rep["checks"]["tools"] == [
        "search_categories",
        "read_category",
        "list_children",
    ]
    g = rep["gates"]
    assert g["sft_model"]["sha256"] == read_json(tmp_path / "gate.json")["model"]["sha256"] == g["reference"]["sha256"]
    assert g["audit"]["conflict_keys"] == 0 and len(g["audit"]["canonical"]) == 1
    assert (t / "launch-rl/tools.yaml").is_file() and "adv_estimator: rloo" in (t / "launch-rl/config.yaml").read_text()
    assert "ray start --head" in (t / "launch-rl/command.sh").read_text()
    # a launch verl's validate_config refuses (6 sequences a step cannot be split over 8 GPUs) stops here, in one line:
    # verl's reason and the launch settings it is made of
    rc, _, err = run(capsys, *rl, "--output-dir", tmp_path / "x", "--gpus-per-node", 8, "--train-batch-size", 3,
                     "--rollout-n", 2)  # fmt: skip
    one_line(err, rc, "verl's validate_config refuses the launch (data.train_batch_size=3, actor_rollout_ref.rollout.n=2, "
             "trainer.n_gpus_per_node=8, trainer.nnodes=1): real_train_batch_size (6) must be divisible by minimal "
             "possible batch size (8)")  # fmt: skip
    assert not (tmp_path / "x").exists() and not (tmp_path / ".x.tools.yaml").exists()
    # each rule refuses on its own, before anything is written
    assert (
        run(
            capsys,
            "rollout-gate",
            "--from-dump",
            gate_dump(t / "run/rl", tmp_path / "hi.jsonl", 2),
            "--model",
            t / "model",
            "--report",
            tmp_path / "hi.json",
        )[0]
        == 1
    )
    assert (
        run(
            capsys,
            "rollout-gate",
            "--from-dump",
            tmp_path / "d.jsonl",
            "--model-sha256",
            "0" * 64,
            "--report",
            tmp_path / "other.json",
        )[0]
        == 0
    )
    other_can = tmp_path / "all.json"
    other_can.write_bytes((t / "run/canonical/shougang/all.json").read_bytes() + b"\n")
    assert _audit(capsys, t, other_can, tmp_path / "audit-other.json")[0] == 0
    bad_audit = read_json(tmp_path / "audit.json")
    bad_audit.update(status="failed", conflict_keys=3)
    (tmp_path / "audit-bad.json").write_text(json.dumps(bad_audit))
    for swap, says in (
        ({"--rollout-gate": tmp_path / "hi.json"}, "rollout gate did not pass"),
        ({"--rollout-gate": tmp_path / "other.json"}, "run on another model"),
        ({"--audit": tmp_path / "audit-bad.json"}, "did not pass with 0 conflict keys"),
        ({"--audit": tmp_path / "audit-other.json"}, "other canonical data"),
        ({"--reference": tmp_path / "nope"}, "no such reference model folder"),
        ({"--rollout-engine": "hf"}, "--rollout-engine must be one of vllm, sglang"),
        ({"--logger": "console,slack"}, "--logger must be a comma list"),
    ):
        argv = [*rl]
        for k, v in swap.items():
            if k in argv:
                argv[argv.index(k) + 1] = v
            else:
                argv += [k, v]
        rc, _, err = run(capsys, *argv, "--output-dir", tmp_path / "x")
        assert rc == 2 and says in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "x").exists(), (
            swap,
            err,
        )


@pytest.mark.verl
def test_verl_rl_hands_the_agent_loop_the_inline_template_of_a_model_whose_template_drops_tools(
    setup, capsys, tmp_path
):
    """verl's agent loop renders prompts with the model's template and `tools=`: under a template that drops them the
    launch hands verl the inline rewrite (`custom_chat_template`), which renders the release's tools; `native` is
    refused in one line."""
    pytest.importorskip("verl")
    import yaml
    from transformers import AutoTokenizer

    from vtreetrm.release.chat import inline_tools, inline_tools_template

    t, a = setup
    m = _with_template(t / "model", tmp_path / "bare-model", BARE_TEMPLATE)
    gate = tmp_path / "gate.json"
    assert run(capsys, "rollout-gate", "--from-dump", gate_dump(t / "run/rl", tmp_path / "d.jsonl", 8), "--model", m,
               "--report", gate)[0] == 0  # fmt: skip
    assert _audit(capsys, t, t / "run/canonical/shougang/all.json", tmp_path / "audit.json")[0] == 0
    rl = ["verl-rl", "--release", t / "run/rl", "--sft-model", m, *tools_flags(a), "--rollout-gate", gate,
          "--audit", tmp_path / "audit.json", "--reference", m]  # fmt: skip
    rc, out, err = run(capsys, *rl, "--output-dir", tmp_path / "n", "--tool-format", "native")
    one_line(err, rc, "drops the tool schemas", "--tool-format inline", "chat_template")
    assert not (tmp_path / "n").exists()
    rc, out, err = run(capsys, *rl, "--output-dir", tmp_path / "i")
    assert rc == 0, err
    rep = read_json(tmp_path / "i/launch_report.json")
    assert rep["tool_format"]["used"] == "inline" and "the tool schemas" in rep["tool_format"]["template_drops"]
    cfg = validated_launch(tmp_path / "i/command.sh")  # what verl composes from the command line
    tok = AutoTokenizer.from_pretrained(m)
    template = cfg.actor_rollout_ref.model.custom_chat_template
    assert template == inline_tools_template(tok.chat_template)
    schemas = [x["tool_schema"] for x in yaml.safe_load((tmp_path / "i/tools.yaml").read_text())["tools"]]
    prompt = pq.read_table(t / "run/rl/train.parquet").to_pylist()[0]["prompt"]
    text = tok.apply_chat_template(prompt, tools=schemas, chat_template=template, tokenize=False)
    assert all(f'"name": "{n}"' in text for n in rep["checks"]["tools"]) and "<tool_call>" in text
    assert text == tok.apply_chat_template(inline_tools(prompt, schemas), tokenize=False)


@pytest.mark.verl
def test_launch_gate_refuses_wrong_release_and_unsupported_verl(setup, capsys, monkeypatch):
    verl = pytest.importorskip("verl")
    t, a = setup
    rc, _, err = run(capsys, "verl-sft", "--release", t / "run/rl", "--model", t / "model", "--output-dir", t / "x")
    assert rc == 2 and "native-tool trajectory release" in err and not (t / "x").exists()
    monkeypatch.setattr(verl, "__version__", "0.8.3")
    rc, _, err = run(
        capsys, "verl-sft", "--release", t / "run/traj", "--model", t / "model", "--output-dir", t / "y", "--smoke"
    )
    assert rc == 2 and "verl 0.8.3 is not supported" in err and "'.[verl]'" in err and not (t / "y").exists()


def test_launch_gate_without_verl(setup):
    t, a = setup
    code = (
        "import sys; sys.modules['verl'] = None\nfrom vtreetrm.cli import main\n"
        f"sys.exit(main(['release', 'verl-sft', '--release', {str(t / 'run/traj')!r}, '--model', {str(t / 'model')!r}, '--output-dir', {str(t / 'z')!r}]))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 2 and "verl is not installed" in p.stderr and "pip install -e '.[verl]'" in p.stderr


def test_rollout_gate_tiny_model_fails_with_cause(setup, capsys):
    t, a = setup
    rc, out, err = run(
        capsys,
        "rollout-gate",
        "--model",
        t / "model",
        "--release",
        t / "run/rl",
        "-n",
        3,
        "--split",
        "train",
        *tools_flags(a),
        "--report",
        t / "gate.json",
        "--max-new-tokens",
        12,
        "--max-turns",
        2,
        "--no-progress",
    )
    rep = read_json(t / "gate.json")
    assert rc == 1 and rep["denominator"] == 3 and rep["nonzero_reward_rate"] == 0 and rep["status"] == "failed"
    assert (
        "parser found no answers" in rep["likely_cause"]
        and rep["model"]["sha256"]
        and rep["release"]["mixture_report_sha256"]
    )
    assert rep["agent_loop"]["max_turns"] == 2 and rep["parser"]["reward"].endswith("compute_score")


def test_rollout_gate_from_dump(setup, capsys, tmp_path):
    t, a = setup

    def dump(name, k):
        return gate_dump(t / "run/rl", tmp_path / name, k)

    rc, _, err = run(capsys, "rollout-gate", "--from-dump", dump("ok.jsonl", 8), "--report", tmp_path / "ok.json")
    assert (
        rc == 2 and "--model HF_DIR or --model-sha256" in err and not (tmp_path / "ok.json").exists()
    )  # a gate of no model is no gate
    rc, out, _ = run(
        capsys,
        "rollout-gate",
        "--from-dump",
        dump("ok.jsonl", 8),
        "--model",
        t / "model",
        "--report",
        tmp_path / "ok.json",
    )
    ok = read_json(tmp_path / "ok.json")
    assert (
        rc == 0 and ok["nonzero_reward_numerator"] == 5 and "passed" in out and ok["model"]["files"][0] == "config.json"
    )
    sha = ok["model"]["sha256"]
    rc, _, _ = run(
        capsys,
        "rollout-gate",
        "--from-dump",
        dump("hi.jsonl", 2),
        "--model-sha256",
        sha,
        "--report",
        tmp_path / "hi.json",
    )
    assert (
        rc == 1
        and read_json(tmp_path / "hi.json")["nonzero_reward_rate"] == 0.5
        and read_json(tmp_path / "hi.json")["model"]["sha256"] == sha
    )
    rc, _, err = run(
        capsys,
        "rollout-gate",
        "--from-dump",
        dump("hi.jsonl", 2),
        "--model",
        t / "model",
        "--model-sha256",
        "0" * 64,
        "--report",
        tmp_path / "x.json",
    )
    assert rc == 2 and "is not the folder" in err
    (tmp_path / "empty.jsonl").write_text("")
    rc, _, err = run(
        capsys,
        "rollout-gate",
        "--from-dump",
        tmp_path / "empty.jsonl",
        "--model-sha256",
        sha,
        "--report",
        tmp_path / "e.json",
    )
    assert rc == 2 and "no rows" in err


def _fsdp_checkpoint(t, d, world_size=1, extra=None):
    "The layout verl's FSDP trainer saves for one rank (plain tensors; world size 1), from the tiny model: a fixture, not verl's saver."
    import torch
    from transformers import AutoModelForCausalLM

    sd = AutoModelForCausalLM.from_pretrained(t / "model").state_dict()
    (d / "huggingface").mkdir(parents=True)
    torch.save({**sd, **(extra or {})}, d / f"model_world_size_{world_size}_rank_0.pt")
    (d / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": world_size}))
    for f in (t / "model").iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, d / "huggingface" / f.name)
    return d, sd


class NotATensor:
    pass


@pytest.mark.verl
def test_verl_merge_then_gate(setup, capsys, tmp_path):
    """verl's own merger turns the FSDP layout into a transformers folder that loads with the same weights (in bf16),
    and rollout-gate records its identity; unsafe or incomplete checkpoints and an existing target are refused."""
    pytest.importorskip("verl")
    import torch
    from transformers import AutoModelForCausalLM

    t, a = setup
    ck, sd = _fsdp_checkpoint(t, tmp_path / "ckpt/global_step_10/actor")
    rc, out, err = run(capsys, "verl-merge", "--checkpoint", ck, "--out", tmp_path / "hf", "--dry-run")
    assert rc == 0 and "verl.model_merger merge --backend fsdp" in out and not (tmp_path / "hf").exists()
    rc, out, err = run(capsys, "verl-merge", "--checkpoint", ck, "--out", tmp_path / "hf")
    assert rc == 0, err
    m = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").state_dict()
    assert all(torch.allclose(m[k].float(), v.to(m[k].dtype).float()) for k, v in sd.items() if k in m) and set(
        sd
    ) <= set(m)
    rep = read_json(tmp_path / "hf/merge_report.json")
    sha = rep["sha256"]
    assert f"sha256 {sha}" in out
    # verl's merger casts to bfloat16 whatever the checkpoint holds: the report and the line say so
    assert rep["dtype"] == {"checkpoint": ["float32"], "merged": ["bfloat16"]}, rep["dtype"]
    assert "parameters in bfloat16 (trained in float32)" in out
    gate_dump(t / "run/rl", tmp_path / "d.jsonl", 8, n=20)
    run(
        capsys,
        "rollout-gate",
        "--from-dump",
        tmp_path / "d.jsonl",
        "--model",
        tmp_path / "hf",
        "--report",
        tmp_path / "g.json",
    )
    assert read_json(tmp_path / "g.json")["model"]["sha256"] == sha
    # refusals, one line each, nothing written
    rc, _, err = run(capsys, "verl-merge", "--checkpoint", ck, "--out", tmp_path / "hf")
    assert rc == 2 and "exists (pass --overwrite" in err
    evil, _ = _fsdp_checkpoint(t, tmp_path / "evil", extra={"note": NotATensor()})
    rc, _, err = run(capsys, "verl-merge", "--checkpoint", evil, "--out", tmp_path / "e")
    assert rc == 2 and "refusing" in err and not (tmp_path / "e").exists()
    two, _ = _fsdp_checkpoint(t, tmp_path / "two", world_size=2)
    rc, _, err = run(capsys, "verl-merge", "--checkpoint", two, "--out", tmp_path / "w")
    assert rc == 2 and "missing shard of world size 2" in err and "rank_1.pt" in err


@pytest.mark.verl
@pytest.mark.slow  # a dozen console-script runs (about 35 s); the commands it drives are tested one by one above
def test_gpu_smoke_script_dry_run(tmp_path):
    "benchmarks/verl_sft_smoke.sh up to the SFT gate (its GPU part needs CUDA): the script stays in step with the commands."
    pytest.importorskip("verl")
    import os

    root = Path(__file__).parents[1]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    p = subprocess.run(
        ["bash", root / "benchmarks/verl_sft_smoke.sh", tmp_path / "w", "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    rep = read_json(tmp_path / "w/sft/launch_report.json")
    assert rep["status"] == "ready" and rep["smoke"] is True and rep["checks"]["multiturn_sft_dataset_rows"] == 8
    assert "trainer.total_training_steps=10" in (tmp_path / "w/sft/command.sh").read_text()


def _tampered_release(t, tmp_path, change) -> Path:
    "A copy of the trajectory release whose train split `change(train, val)` rewrote (and its report's counts, if asked)."
    import pyarrow as pa

    rel = tmp_path / "rel"
    shutil.copytree(t / "run/traj", rel)
    train, val = pq.read_table(rel / "train.parquet"), pq.read_table(rel / "val.parquet")
    new, fix_report = change(train, val)
    pq.write_table(pa.concat_tables(new), rel / "train.parquet")
    if fix_report:  # a tamperer who also updates the counts: the split membership still gives it away
        rep = read_json(rel / "export_report.json")
        rep["rows"]["train"] = sum(x.num_rows for x in new)
        (rel / "export_report.json").write_text(json.dumps(rep))
    return rel


@pytest.mark.verl
@pytest.mark.parametrize(
    "change,needles",
    [
        (lambda tr, va: ([tr, tr], False), ["train.parquet", "field 'rows'", "release report records"]),
        (lambda tr, va: ([tr, va], True), ["val.parquet", "field 'source_id'", "is in train and in val"]),
    ],
    ids=["every row twice", "val copied into train"],
)
def test_verl_sft_gate_refuses_a_release_its_report_does_not_describe(setup, capsys, tmp_path, change, needles):
    pytest.importorskip("verl")
    t, _ = setup
    rel = _tampered_release(t, tmp_path, change)
    out = tmp_path / "launch"
    rc, _, err = run(capsys, "verl-sft", "--release", rel, "--model", t / "model", "--output-dir", out, "--smoke")
    one_line(err, rc, *needles)
    assert not out.exists()


@pytest.mark.verl
def test_verl_sft_takes_any_legal_path_and_refuses_nonsense_sizes(setup, capsys, tmp_path):
    pytest.importorskip("verl")
    t, _ = setup
    odd = tmp_path / "mö del (1)"
    shutil.copytree(t / "model", odd / "model")
    rel, out = odd / "traj", odd / "launch"
    shutil.copytree(t / "run/traj", rel)
    rc, _, err = run(capsys, "verl-sft", "--release", rel, "--model", odd / "model", "--output-dir", out, "--smoke")
    assert rc == 0, err  # Hydra read every quoted path back as it is
    import yaml

    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["model"]["path"] == str((odd / "model").resolve())
    assert cfg["data"]["train_files"] == str((rel / "train.parquet").resolve())
    for flag, v in (("--n-gpus", "-1"), ("--max-length", "0"), ("--check-rows", "0")):
        rc, _, err = run(
            capsys, "verl-sft", "--release", rel, "--model", odd / "model", "--output-dir", tmp_path / "x", flag, v
        )
        one_line(err, rc, f"{flag} must be a positive integer")
    assert not (tmp_path / "x").exists()
