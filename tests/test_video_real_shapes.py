"""Phase-2 at real widths with random weights: a Qwen2.5-0.5B-wide LLM (2 layers) in bf16, a BLIP-2-shaped Q-former,
an encoder of width 768; one training step through the CLI, then peft and transformers load what it wrote."""

import json

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, Dinov2Config, Dinov2Model, Qwen2Config, Qwen2ForCausalLM

from vtreetrm.cli import main
from vtreetrm.utils import sha256_file
from vtreetrm.video.config import PROJECTIONS
from vtreetrm.video.synthetic import SyntheticConfig, make_synthetic
from vtreetrm.video.tiny_llm import build_tokenizer

QWEN25_05B = dict(
    hidden_size=896,
    num_attention_heads=14,
    num_key_value_heads=2,
    intermediate_size=4864,
    num_hidden_layers=2,
    max_position_embeddings=32768,
    rope_theta=1e6,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)
M, R, ALPHA = 16, 8, 16


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    d = tmp_path_factory.mktemp("shapes")
    make_synthetic(
        d / "syn",
        SyntheticConfig(head_count=6, min_count=4, mammalnet_count=2, multi_label=1, n_short=0),
        progress=False,
    )
    tok = build_tokenizer()
    torch.manual_seed(0)  # the random LLM, the same each run: the tolerances below were measured on it
    llm = Qwen2ForCausalLM(
        Qwen2Config(
            **QWEN25_05B,
            vocab_size=len(tok),
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
            bos_token_id=tok.pad_token_id,
        )
    )
    llm.save_pretrained(d / "llm")  # fp32 on disk: --dtype bf16 must cast when loading
    tok.save_pretrained(d / "llm")  # with the ChatML chat template
    Dinov2Model(
        Dinov2Config(
            hidden_size=768, num_hidden_layers=1, num_attention_heads=12, patch_size=14, image_size=56, mlp_ratio=4
        )
    ).save_pretrained(d / "dino")
    return d


def _randomize_adapter(ckpt, seed=0, std=0.05):
    "Seeded random LoRA A and B weights in checkpoint `ckpt`'s adapter, its sha256 in checkpoint.json updated."
    f = ckpt / "adapter" / "adapter_model.safetensors"
    g = torch.Generator().manual_seed(seed)
    tensors = {k: (torch.randn(v.shape, generator=g) * std).to(v.dtype) for k, v in sorted(load_file(str(f)).items())}
    save_file(tensors, str(f))
    meta = json.loads((ckpt / "checkpoint.json").read_text())
    meta["files"]["adapter/adapter_model.safetensors"] = sha256_file(f)
    (ckpt / "checkpoint.json").write_text(json.dumps(meta))


@pytest.mark.slow  # a training step at 7B-wide layers on the CPU (about 20 s)
def test_bf16_step_at_real_widths(parts, tmp_path, capsys):
    run = tmp_path / "run"
    rc = main(
        [
            str(a)
            for a in [
                "video",
                "phase2",
                parts / "syn" / "lote",
                "--out",
                run,
                "--cache",
                tmp_path / "cache",
                "--vision",
                parts / "dino",
                "--grid",
                2,
                "--frames",
                4,
                "--llm",
                parts / "llm",
                "--dtype",
                "bf16",
                "--num-queries",
                M,
                "--qformer-hidden",
                768,
                "--qformer-heads",
                12,
                "--qformer-layers",
                2,
                "--cross-attention-frequency",
                2,
                "--lora-r",
                R,
                "--lora-alpha",
                ALPHA,
                "--batch-size",
                4,
                "--max-steps",
                1,
                "--epochs",
                1,
                "--max-new-tokens",
                4,
                "--gradient-checkpointing",
                "--threads",
                2,
            ]
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "trainable parameters" in out and "frozen LLM" in out and "bfloat16" in out
    p = json.loads((run / "run.json").read_text())["parameters"]
    assert set(p["trainable"]) == {"lora", "qformer", "query_tokens", "proj", "frame_proj", "encoder_norm"}
    assert p["frozen_llm_dtypes"] == ["bfloat16"]
    h, kv, ff = 896, 128, 4864  # LoRA adds r * (in + out) per target, per layer
    shapes = {
        "q_proj": (h, h),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (h, h),
        "gate_proj": (h, ff),
        "up_proj": (h, ff),
        "down_proj": (ff, h),
    }
    assert set(shapes) == set(PROJECTIONS)
    assert p["trainable"]["lora"] == 2 * sum(R * (i + o) for i, o in shapes.values())
    assert p["trainable"]["query_tokens"] == M * 768 and p["trainable"]["proj"] == 768 * h + h
    assert p["frozen_llm_bytes"] == 2 * p["frozen_llm"]  # bf16: two bytes a parameter
    hist = [json.loads(l) for l in (run / "history.jsonl").read_text().splitlines()]
    assert hist[-1]["step"] == 1 and torch.isfinite(torch.tensor(hist[-1]["train_loss"]))
    ck = json.loads((run / "best" / "checkpoint.json").read_text())
    assert ck["llm"]["dtype"] == "bfloat16" and ck["config"]["qformer_hidden"] == 768 and ck["encoder_width"] == 768
    own = load_file(str(run / "best" / "model.safetensors"))
    assert own["query_tokens"].shape == (1, M, 768) and not any(k.startswith("llm.") for k in own)
    # seeded random LoRA A and B, their product as large as the base weights: the merged LLM differs from the base
    _randomize_adapter(run / "best")
    # peft loads the adapter onto the base; transformers loads the merged export
    base = AutoModelForCausalLM.from_pretrained(parts / "llm", dtype=torch.bfloat16)
    peft_model = PeftModel.from_pretrained(base, str(run / "best" / "adapter")).float()
    assert sum(p.numel() for n, p in peft_model.named_parameters() if "lora_" in n) == p["trainable"]["lora"]
    assert main(["video", "export", str(run / "best"), "--out", str(tmp_path / "exp"), "--merge"]) == 0
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "exp" / "llm")
    assert merged.config.hidden_size == h and merged.dtype == torch.bfloat16
    assert not any("lora" in n for n, _ in merged.named_parameters())
    # each merged weight is W + alpha/r * B @ A (computed here in fp32 from the base and the adapter) in bf16: within
    # bf16 rounding (2^-9 relative; measured: at most 4.8e-4 on weights up to 0.14, half a bf16 step there)
    base_w = load_file(str(parts / "llm" / "model.safetensors"))
    lora = load_file(str(run / "best" / "adapter" / "adapter_model.safetensors"))
    got = dict(merged.named_parameters())
    mods = [
        k.removeprefix("base_model.model.").removesuffix(".lora_A.weight") for k in lora if k.endswith("lora_A.weight")
    ]
    assert len(mods) == 2 * len(PROJECTIONS)
    for mod in mods:
        a, b = (lora[f"base_model.model.{mod}.lora_{x}.weight"].float() for x in "AB")
        want = base_w[f"{mod}.weight"].to(torch.bfloat16).float() + ALPHA / R * b @ a
        torch.testing.assert_close(
            got[f"{mod}.weight"].float(), want, rtol=2**-8, atol=2**-14, msg=lambda m, mod=mod: f"{mod}: {m}"
        )
    # the merged LLM computes what peft computes (fp32 on the same bf16 weights), where the adapter changes it clearly:
    # measured max |merged - peft| 0.014 (the merged weights' bf16 rounding), max |peft - base| 2.6
    ids = torch.tensor([[1, 5, 9, 12]])
    with torch.no_grad():
        want = peft_model(ids).logits
        with peft_model.disable_adapter():
            plain = peft_model(ids).logits
        torch.testing.assert_close(merged.float()(ids).logits, want, atol=0.02, rtol=0)
    assert (want - plain).abs().max() > 100 * 0.02
    assert main(["analyze", "queries", str(run / "best" / "model.safetensors"), "--out", str(tmp_path / "q")]) == 0
    assert json.loads((tmp_path / "q" / "summary.json").read_text())["checkpoints"][0]["M"] == M
