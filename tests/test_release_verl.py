"""verl reads our data: the RL releases load through verl's own `create_rl_dataset` / `RLHFDataset`, and verl's
`get_custom_reward_fn` loads our reward function. The tokenizer is trained in-process (no download)."""

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

verl = pytest.importorskip("verl")
pytestmark = pytest.mark.verl

from omegaconf import OmegaConf

import vtreetrm.release.reward as reward_mod
from vtreetrm.release.assets import write_grading_manifest
from vtreetrm.release.canonical import SyntheticChain, synthetic_chain
from vtreetrm.release.chat import build_chat_tokenizer
from vtreetrm.release.mixture import mixture
from vtreetrm.release.rl import rl_export


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    t = tmp_path_factory.mktemp("verl")
    c = synthetic_chain(t, records=60)
    s, run = c.syn, c.run
    a = c.assets
    rl_export(
        run / "canonical/shougang/all.json",
        run / "rl-source",
        "shougang",
        progress=False,
        assets=a,
    )
    shutil.copy(s / "STANDARDS/shougang.grading.json", run / "grading.json")
    write_grading_manifest(run / "grading-manifest.json", {"shougang": "grading.json"})
    mixture(
        "rl-cascade",
        [f"shougang={run}/rl-source"],
        run / "grading-manifest.json",
        output_dir=run / "rl-cascade",
        progress=False,
        assets=a,
    )
    texts = [m["content"] for row in pq.read_table(run / "rl-cascade/train.parquet").to_pylist() for m in row["prompt"]]
    return t, run, build_chat_tokenizer(texts * 3, vocab_size=1500)


@pytest.mark.parametrize("release", ["rl-source", "rl-cascade"])
def test_rlhf_dataset_loads_rl_parquet(releases, release):
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils.dataset.rl_dataset import RLHFDataset

    t, run, tok = releases
    path = run / release / "train.parquet"
    rows = pq.read_table(path).to_pylist()
    cfg = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 8192,
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "truncation": "error",
            "cache_dir": str(t / "cache"),
            "return_raw_chat": True,
            "shuffle": False,
        }
    )
    ds = create_rl_dataset([str(path)], cfg, tok, None)
    assert isinstance(ds, RLHFDataset) and len(ds) == len(rows)  # nothing filtered out as overlong
    item = ds[0]
    assert [m["role"] for m in item["raw_prompt"]] == ["system", "user"]
    assert item["raw_prompt"][1]["content"] == rows[0]["prompt"][1]["content"]
    assert item["data_source"] == "shougang" and item["index"] == rows[0]["extra_info"]["index"]
    gt = item["reward_model"]["ground_truth"]
    assert json.loads(gt) == json.loads(rows[0]["reward_model"]["ground_truth"])
    # a prompt tokenizes through the chat template within the limit
    ids = tok.apply_chat_template(item["raw_prompt"], add_generation_prompt=True, tokenize=True)
    assert 0 < len(ids if isinstance(ids, list) else ids["input_ids"]) < 8192


def test_verl_loads_our_reward_function(releases):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    t, run, tok = releases
    cfg = OmegaConf.create(
        {"reward": {"custom_reward_function": {"path": reward_mod.__file__, "name": "compute_score"}}}
    )
    fn = get_custom_reward_fn(cfg)
    row = pq.read_table(run / "rl-cascade/train.parquet").slice(0, 1).to_pylist()[0]
    gt = row["reward_model"]["ground_truth"]
    g = json.loads(gt)
    assert fn("shougang", f"<think>x</think>{json.dumps(g)}", gt, row["extra_info"]) == 1.0
    assert fn("shougang", json.dumps({**g, "data_level": "L0"}), gt, row["extra_info"]) == 0.5
    assert fn("shougang", "I do not know", gt, row["extra_info"]) == 0.0


# ---------------------------------------------------------------- trajectory SFT through verl's MultiTurnSFTDataset


@pytest.fixture(scope="module")
def trajectories(releases):
    from vtreetrm.release.trajectory import trajectory_export

    t, run, _ = releases
    a = SyntheticChain(t / "syn", run).assets
    trajectory_export(
        "shougang", run / "canonical/shougang/all.json", output_dir=run / "traj", progress=False, assets=a
    )
    rows = pq.read_table(run / "traj/train.parquet").to_pylist()
    from vtreetrm.release.trajectory import _clean

    texts = [json.dumps([_clean(m) for m in r["messages"]], ensure_ascii=False) for r in rows]
    return run / "traj", rows, build_chat_tokenizer(texts * 3, vocab_size=2000)


def test_multiturn_sft_dataset_loads_trajectories_without_mismatch(trajectories):
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    try:
        from verl.trainer.sft_trainer import create_sft_dataset  # its module imports the trainer stack (needs uvicorn)
    except ModuleNotFoundError:

        def create_sft_dataset(paths, cfg, tok, processor):
            return MultiTurnSFTDataset(paths, tok, cfg, processor)

    from vtreetrm.release.trajectory import _clean

    d, rows, tok = trajectories
    cfg = OmegaConf.create(
        {
            "custom_cls": {"path": None, "name": None},
            "messages_key": "messages",
            "tools_key": "tools",
            "enable_thinking_default": None,
            "max_length": 8192,
            "truncation": "error",
            "pad_mode": "no_padding",
            "ignore_input_ids_mismatch": False,
        }
    )
    ds = create_sft_dataset([str(d / "train.parquet")], cfg, tok, None)
    assert isinstance(ds, MultiTurnSFTDataset) and len(ds) == len(rows)
    seen = set()
    for i, row in enumerate(rows):
        klass = row["trajectory_class"]
        if klass in seen:
            continue
        seen.add(klass)
        item = ds[i]  # sanity_check raises on any per-turn / whole-conversation mismatch
        ids, mask = item["input_ids"], item["loss_mask"]
        msgs = [_clean(m) for m in row["messages"]]
        whole = tok.apply_chat_template(msgs, tools=_clean(row["tools"]), tokenize=False)
        assert tok.decode(ids) == whole
        # loss only on assistant turns: reasoning, tool calls and the final answer, never prompts or tool results
        trained = tok.decode(ids[mask.bool()])
        want = "".join(
            tok.apply_chat_template([m], tokenize=False)[len("<|im_start|>assistant\n") :]
            for m in msgs
            if m["role"] == "assistant"
        )
        assert trained == want
        assert all(m["reasoning_content"] in trained for m in msgs if m["role"] == "assistant")
        assert not any(m["content"] in trained for m in msgs if m["role"] == "tool")
        assert msgs[1]["content"] not in trained
    assert seen == {"direct", "single_tool", "multi_tool", "no_result"}


def test_verl_loads_our_tools_for_rl_dataset(releases):
    import asyncio

    from verl.tools.tool_registry import load_all_tools
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from vtreetrm.release.tools import TOOL_SCHEMAS, CategoryTools, write_tool_config

    t, run, tok = releases
    s = t / "syn"
    a = (
        s / "ASSETS/registries/shougang.registry.json",
        s / "ASSETS/corpora/shougang.corpus.json",
        s / "CFG/shougang.task.json",
    )
    y = write_tool_config(t / "tools.yaml", *a)
    tools = load_all_tools(tool_config_path=str(y), function_tool_path=None)
    assert [x.name for x in tools] == ["search_categories", "read_category", "list_children"]
    resp, _, _ = asyncio.run(tools[1].execute("i", {"choice_id": "K00000000"}))
    assert json.loads(resp.text)["error"] == "unknown choice_id"
    row = pq.read_table(run / "rl-cascade/train.parquet").slice(0, 1).to_pylist()[0]
    cid = json.loads(row["reward_model"]["ground_truth"])["choice_id"]
    assert asyncio.run(tools[1].execute("i", {"choice_id": cid}))[0].text == CategoryTools.from_paths(*a).call(
        "read_category", {"choice_id": cid}
    )
    cfg = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 8192,
            "filter_overlong_prompts_workers": 1,
            "cache_dir": str(t / "cache2"),
            "tool_config_path": str(y),
        }
    )
    ds = RLHFDataset(str(run / "rl-cascade/train.parquet"), tok, cfg)
    assert ds.tool_schemas == TOOL_SCHEMAS and len(ds) == pq.read_metadata(run / "rl-cascade/train.parquet").num_rows


# ---------------------------------------------------------------- the same trajectories under Qwen3's chat template

QWEN3_RULES = Path(__file__).parent / "fixtures/qwen3_rules_chat_template.jinja"


def _qwen3_tokenizers(base):
    "The fixture template on the in-process tokenizer; the published one too when a Qwen3 tokenizer folder is named."
    import copy
    import os

    rules = copy.deepcopy(base)
    rules.chat_template = QWEN3_RULES.read_text()
    found = [("qwen3-rules", rules)]
    if os.environ.get("VTREETRM_QWEN3_TOKENIZER"):
        from transformers import AutoTokenizer

        found.append(("qwen3-published", AutoTokenizer.from_pretrained(os.environ["VTREETRM_QWEN3_TOKENIZER"])))
    else:
        print("published Qwen3 template not checked: set VTREETRM_QWEN3_TOKENIZER to a Qwen3 tokenizer folder")
    return found


def _sft_config():
    return OmegaConf.create(
        {
            "custom_cls": {"path": "pkg://vtreetrm.release.verl_dataset", "name": "PrefixDiffSFTDataset"},
            "messages_key": "messages",
            "tools_key": "tools",
            "enable_thinking_default": None,
            "max_length": 8192,
            "truncation": "error",
            "pad_mode": "no_padding",
            "ignore_input_ids_mismatch": False,
        }
    )


def test_qwen3_template_loss_mask_is_the_assistant_turns(trajectories):
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset
    from verl.utils.import_utils import load_extern_object

    from vtreetrm.release.trajectory import _clean

    d, rows, base = trajectories
    for name, tok in _qwen3_tokenizers(base):
        # verl's own per-message path loses the reasoning of every assistant turn under this template, and says so
        plain = MultiTurnSFTDataset(str(d / "train.parquet"), tok, _sft_config())
        with pytest.raises(AssertionError, match="each turn separately"):
            plain[0]
        cfg = _sft_config()
        ds = load_extern_object(cfg.custom_cls.path, cfg.custom_cls.name)(str(d / "train.parquet"), tok, cfg)
        seen = set()
        for i, row in enumerate(rows):
            if row["trajectory_class"] in seen:
                continue
            seen.add(row["trajectory_class"])
            item = ds[i]  # verl's whole-conversation check runs inside
            msgs, tools = [_clean(m) for m in row["messages"]], _clean(row["tools"])
            whole = tok.apply_chat_template(msgs, tools=tools, tokenize=False)
            assert tok.decode(item["input_ids"]) == whole and "null" not in whole.split("</tools>")[0]
            # independent of the mask code: the assistant blocks of the rendered text, without their header
            blocks = whole.split("<|im_start|>")[1:]
            want = "".join(b[len("assistant\n") :] for b in blocks if b.startswith("assistant\n"))
            trained = tok.decode(item["input_ids"][item["loss_mask"].bool()])
            assert trained == want, name
            assert all(
                f"<think>\n{m['reasoning_content']}\n</think>" in trained for m in msgs if m["role"] == "assistant"
            )
            assert all(f'"name": "{c["function"]["name"]}"' in trained for m in msgs for c in m.get("tool_calls") or [])
            assert not any(m["content"] in trained for m in msgs if m["role"] in ("tool", "user"))
        assert seen == {"direct", "single_tool", "multi_tool", "no_result"}


def test_qwen3_grouped_tool_results_and_a_second_query():
    "Parallel calls answered by consecutive tool messages (one user turn in Qwen3); a turn before a later query is refused."
    from vtreetrm.release.chat import build_chat_tokenizer
    from vtreetrm.release.verl_dataset import conversation_tokens

    def call(n):
        return {"type": "function", "function": {"name": n, "arguments": '{"path": ""}'}}

    conv = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "two at once",
            "tool_calls": [call("list_children"), call("read_category")],
        },
        {"role": "tool", "content": "R1"},
        {"role": "tool", "content": "R2"},
        {"role": "assistant", "content": "A", "reasoning_content": "done"},
    ]
    tok = build_chat_tokenizer([json.dumps(conv)] * 5, vocab_size=400)
    tok.chat_template = QWEN3_RULES.read_text()
    ids, mask, cuts = conversation_tokens(tok, conv)
    whole = tok.apply_chat_template(conv, tokenize=False)
    assert whole.count("<|im_start|>user\n<tool_response>") == 1  # the two results share one turn
    assert cuts[4] == cuts[5] and tok.decode(ids[cuts[3] : cuts[4]]).count("<tool_response>") == 2
    trained = tok.decode([t for t, k in zip(ids, mask) if k])
    assert trained.count("<think>") == 2 and trained.count("<tool_call>") == 2 and "R1" not in trained
    # a second user query after the first answer: Qwen3 drops the first answer's reasoning from the history
    later = conv + [
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "B", "reasoning_content": "again"},
    ]
    with pytest.raises(ValueError, match="message 2 \\(assistant\\)"):
        conversation_tokens(tok, later)
