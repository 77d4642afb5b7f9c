"""Hostile inputs to the release and eval lines: a rollout gate report that contradicts itself or names another
model, labels the answer parser would rewrite, repeated episodes, malformed ground truths, a byte-order mark, and a
spreadsheet with one huge cell. Each is refused in one line (or read as the user meant), never scored silently."""

import json
from pathlib import Path

import pytest

from vtreetrm.cli import main

GT = json.dumps({"choice_id": "K12345678", "data_level": "L2"})
WRONG = json.dumps({"choice_id": "K00000000", "data_level": "L2"})


def run(capsys, *argv):
    "`vtreetrm ARGV` in-process: (exit code, stdout, stderr)."
    rc = main([*map(str, argv)])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def one_line(rc, err, *needles):
    "A refusal: exit 2, one `error:` line naming every needle, no traceback."
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and all(n in lines[0] for n in needles), err


def make_model(d: Path) -> Path:
    "A model folder as far as its identity goes: config, weights, tokenizer with a chat template, generation config."
    d.mkdir(parents=True)
    (d / "config.json").write_text('{"model_type": "qwen2"}')
    (d / "model.safetensors").write_bytes(b"weights")
    (d / "tokenizer.json").write_text('{"version": "1.0"}')
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "chat_template": "{{ x }}"}))
    (d / "generation_config.json").write_text('{"eos_token_id": 2}')
    return d


def dump(path: Path, rights: int, n: int, ids=None) -> Path:
    "A rollout dump of `n` episodes, the first `rights` of them right."
    ids = ids or [f"s{i}" for i in range(n)]
    lines = [{"sample_id": s, "ground_truth": GT, "response": GT if i < rights else WRONG} for i, s in enumerate(ids)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture
def gated(tmp_path, capsys):
    "A model and the rollout gate report that passed for it (2/10 nonzero)."
    m = make_model(tmp_path / "model")
    gate = tmp_path / "gate.json"
    rc, _, err = run(capsys, "release", "rollout-gate", "--from-dump", dump(tmp_path / "d.jsonl", 2, 10),
                     "--model", m, "--report", gate)  # fmt: skip
    assert rc == 0, err
    return m, gate


def verl_rl(capsys, tmp_path, model, gate):
    "`release verl-rl` up to its gates (the audit and release do not exist: the rollout gate is checked first)."
    return run(capsys, "release", "verl-rl", "--release", tmp_path / "rel", "--sft-model", model,
               "--registry", tmp_path / "r.json", "--corpus", tmp_path / "c.json", "--task-config", tmp_path / "t.json",
               "--rollout-gate", gate, "--audit", tmp_path / "audit.json", "--reference", model,
               "--output-dir", tmp_path / "launch")  # fmt: skip


def test_gate_that_passes_reaches_the_audit(tmp_path, capsys, gated):
    "The control: an untouched gate report is accepted and the launch goes on to the audit."
    m, gate = gated
    rc, _, err = verl_rl(capsys, tmp_path, m, gate)
    one_line(rc, err, "audit.json")


@pytest.mark.parametrize("edit", [{"passed": True}, {"passed": True, "status": "passed"}])
def test_verl_rl_refuses_a_failed_gate_marked_passed(tmp_path, capsys, edit):
    "A gate that failed at 95% nonzero, edited to say `passed: true`: verl-rl re-derives the verdict and refuses."
    m = make_model(tmp_path / "model")
    gate = tmp_path / "gate.json"
    rc, _, _ = run(capsys, "release", "rollout-gate", "--from-dump", dump(tmp_path / "d.jsonl", 19, 20),
                   "--model", m, "--report", gate)  # fmt: skip
    assert rc == 1
    gate.write_text(json.dumps({**json.loads(gate.read_text()), **edit}))
    rc, _, err = verl_rl(capsys, tmp_path, m, gate)
    one_line(rc, err, "gate.json", "rollout gate did not pass", "19/20 nonzero = 95.00%", "status ")
    assert not (tmp_path / "launch").exists()


@pytest.mark.parametrize(
    "edit, says",
    [
        ({"status": "failed"}, "says status 'failed', passed True"),
        ({"passed": False}, "passed False"),
        ({"nonzero_reward_rate": 0.1}, "nonzero_reward_rate 0.1 is not 2/10"),
        ({"gate_range": [0.0, 1.0]}, "gate_range [0.0, 1.0]"),
        ({"denominator": 0}, "denominator is 0"),
        ({"nonzero_reward_numerator": "2"}, "nonzero_reward_numerator is '2'"),
        ({"episodes": []}, "lists 0 episodes"),
        ({"nonzero_reward_numerator": 3, "nonzero_reward_rate": 0.3}, "episodes have 2 nonzero rewards: not 3/10"),
    ],
)
def test_verl_rl_refuses_a_gate_report_that_does_not_add_up(tmp_path, capsys, gated, edit, says):
    "A gate report whose verdict, rate, band, denominator or episodes disagree with each other is refused in one line."
    m, gate = gated
    gate.write_text(json.dumps({**json.loads(gate.read_text()), **edit}))
    rc, _, err = verl_rl(capsys, tmp_path, m, gate)
    one_line(rc, err, "gate.json", "rollout gate", says)
    assert not (tmp_path / "launch").exists()


@pytest.mark.parametrize(
    "name, text",
    [
        ("tokenizer_config.json", json.dumps({"eos_token": "<|endoftext|>", "chat_template": "{{ x }}"})),
        ("tokenizer_config.json", json.dumps({"eos_token": "<|im_end|>", "chat_template": "{{ y }}"})),
        ("chat_template.jinja", "{{ other }}"),
        ("generation_config.json", '{"eos_token_id": 3}'),
        ("tokenizer.json", '{"version": "2.0"}'),
    ],
)
def test_verl_rl_refuses_a_model_changed_after_its_gate(tmp_path, capsys, gated, name, text):
    "The gate's model identity covers the tokenizer, chat template and generation config, not the weights alone."
    m, gate = gated
    (m / name).write_text(text)
    rc, _, err = verl_rl(capsys, tmp_path, m, gate)
    one_line(rc, err, "gate.json", "run on another model", f"files changed: {name}")


def test_model_identity_covers_what_generation_reads(tmp_path):
    "`model_identity` hashes every file that decides what the model generates; other files do not count."
    from vtreetrm.utils import model_identity

    m = make_model(tmp_path / "m")
    a = model_identity(m)
    assert a["files"][0] == "config.json" and set(a["file_sha256"]) == set(a["files"])
    assert {"model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"} <= set(a["files"])
    (m / "README.md").write_text("notes")
    assert model_identity(m)["sha256"] == a["sha256"]
    (m / "special_tokens_map.json").write_text("{}")
    assert model_identity(m)["sha256"] != a["sha256"]
