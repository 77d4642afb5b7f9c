"The transformers backend with a tiny random Qwen2 model and a tokenizer trained here (no downloads)."

import asyncio
import json
import sqlite3

import pytest
from conftest import harness_infer

from vtreetrm.harness.backends import TransformersBackend
from vtreetrm.harness.synthetic import make_synthetic

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if tools %}<|im_start|>tools\n{{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    d = tmp_path_factory.mktemp("tiny") / "model"
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    corpus = [
        "Answer: A",
        "Answer: B",
        '<tool_call>{"name": "look", "arguments": {}}</tool_call>',
        "What is the person doing in the kitchen scene?",
    ] * 20
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"]),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHATML
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(fast),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=4096,
        )
    )
    fast.save_pretrained(d)
    model.save_pretrained(d)
    return d


def test_chat_runs_generation(tiny_model):
    b = TransformersBackend(tiny_model, max_new_tokens=6)
    r = asyncio.run(
        b.chat(
            [{"role": "user", "content": "Question: hi"}],
            tools=[{"type": "function", "function": {"name": "look", "parameters": {}}}],
        )
    )
    assert isinstance(r.content, str) and r.tool_calls == []


def test_infer_with_transformers_backend_records_unparsable_answers(tiny_model, tmp_path):
    syn = tmp_path / "syn"
    make_synthetic(syn, n_train_videos=6, n_test_videos=6, per_task=4, test_ar=4, test_other=1)
    rc = harness_infer(
        syn / "store",
        tmp_path / "ws",
        "--run-id",
        "tiny",
        "--backend",
        "transformers",
        "--model",
        tiny_model,
        "--n-samples",
        "2",
        "--max-steps",
        "1",
        "--concurrency",
        "2",
    )
    assert rc == 0
    con = sqlite3.connect(tmp_path / "ws/harness.db")
    rows = con.execute(
        "SELECT answer, correct, error, trajectory_json FROM answers WHERE run_id='infer_tiny'"
    ).fetchall()
    con.close()
    assert len(rows) == 2
    for answer, correct, error, traj in rows:  # a random model answers nothing parsable: recorded, the run goes on
        steps = json.loads(traj)
        assert answer is None and correct == 0 and error == "no parsable answer" and steps and not steps[-1]["ok"]


def test_missing_model_folder_is_user_error(tmp_path, capsys):
    syn = tmp_path / "syn"
    make_synthetic(syn, n_train_videos=6, n_test_videos=6, per_task=4, test_ar=4, test_other=1)
    rc = harness_infer(syn / "store", tmp_path / "ws", "--backend", "transformers", "--model", tmp_path / "nope")
    assert rc == 2 and "model folder not found" in capsys.readouterr().err


@pytest.mark.parametrize("cls_pooling", [True, False])
def test_local_embedder_pooling_follows_the_model_folder(tmp_path, cls_pooling):
    import numpy as np
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    from vtreetrm.harness.backends import LocalEmbedder

    d = tmp_path / "enc"
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        ["a person is chopping vegetables in the kitchen scene"] * 5,
        trainers.WordPieceTrainer(vocab_size=100, special_tokens=["[UNK]", "[PAD]", "[CLS]", "[SEP]"]),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]"
    )
    torch.manual_seed(0)
    model = BertModel(
        BertConfig(
            vocab_size=len(fast), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
        )
    ).eval()
    fast.save_pretrained(d / "hf")
    model.save_pretrained(d / "hf")
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import (
        Normalize,
        Pooling,
        Transformer,
    )  # the layout BGE / MiniLM ship

    SentenceTransformer(
        modules=[Transformer(str(d / "hf")), Pooling(16, pooling_mode="cls" if cls_pooling else "mean"), Normalize()]
    ).save(str(d))
    e = LocalEmbedder(str(d))
    assert e.pooling == ("cls" if cls_pooling else "mean") and e.dim == 16
    texts = ["a person is chopping", "kitchen scene vegetables in the kitchen"]
    got = e.encode(texts)
    enc = fast(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model(**enc).last_hidden_state
    m = enc["attention_mask"].unsqueeze(-1).float()
    ref = h[:, 0] if cls_pooling else (h * m).sum(1) / m.sum(1)
    ref = torch.nn.functional.normalize(ref, dim=-1).numpy()
    assert np.allclose(got, ref, atol=1e-5)


def test_the_reflector_generates_with_its_own_token_budget(tiny_model, tmp_path):
    "reflect_max_new_tokens gives the reflections a longer budget than the answers, on the one model; unset, the same."
    from vtreetrm.harness.config import RunConfig
    from vtreetrm.harness.runner import Runner

    for budget, want in ((300, 300), (None, 48)):
        cfg = RunConfig(backend="transformers", model=str(tiny_model), max_new_tokens=48, workspace_dir=str(tmp_path),
                        reflect_max_new_tokens=budget)  # fmt: skip
        r = Runner(cfg, progress=False)
        r._make_models("reflect")
        assert (r.backend.max_new_tokens, r.reflector.backend.max_new_tokens) == (48, want)
        assert r.reflector.backend.model is r.backend.model
