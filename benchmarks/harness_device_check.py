"""Harness on a CUDA device: embeddings and the transformers backend with `device: cuda`.

Builds a MiniLM-sized random BERT encoder (6 layers, width 384, a WordPiece tokenizer trained here) and a tiny random
Qwen2, then checks that `LocalEmbedder(device='cuda')` gives the CPU vectors (max abs difference), prints caption
embedding throughput on CUDA against CPU measured in the same process, and runs one `TransformersBackend` chat on
CUDA. Without CUDA it runs the CPU half and says so. Imports only the harness modules that need no dev extras.

    python benchmarks/harness_device_check.py [--captions 4096]
"""

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from vtreetrm.harness.backends import LocalEmbedder, TransformersBackend

WORDS = (
    "person kitchen garden chopping vegetables watering plants scene next to the red blue chairs buckets "
    "two three four beginning middle end video of in is are a there stand left right behind front"
).split()


def encoder_folder(d: Path) -> Path:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        [" ".join(WORDS)] * 10,
        trainers.WordPieceTrainer(vocab_size=200, special_tokens=["[UNK]", "[PAD]", "[CLS]", "[SEP]"]),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]"
    )
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=len(fast), hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536
        )
    ).save_pretrained(d)
    fast.save_pretrained(d)
    (d / "1_Pooling").mkdir()
    (d / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    return d


def lm_folder(d: Path) -> Path:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    tok.train_from_iterator(
        ["Answer: A", "Answer: B"] * 10,
        trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<|im_end|>", "<|endoftext|>"]),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"
    torch.manual_seed(0)
    Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(fast),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    ).save_pretrained(d)
    fast.save_pretrained(d)
    return d


def throughput(e, texts):
    e.memo.clear()
    e.encode(texts[:256])  # warm-up (kernels per shape)
    e.memo.clear()
    if e.device.startswith("cuda"):
        torch.cuda.synchronize()
    t = time.perf_counter()
    e.encode(texts)
    if e.device.startswith("cuda"):
        torch.cuda.synchronize()
    return len(texts) / (time.perf_counter() - t)


def check(captions: int = 4096) -> dict:
    "Embedder (CPU, and CUDA against CPU when there is one) and one transformers-backend chat; returns the figures."
    cuda = torch.cuda.is_available()
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(6, 18))) + f" {i}" for i in range(captions)]
    out = {"device": "cuda" if cuda else "cpu", "captions": captions}
    with tempfile.TemporaryDirectory() as d:
        enc = encoder_folder(Path(d) / "enc")
        cpu = LocalEmbedder(str(enc), device="cpu", batch_size=256)
        v_cpu = cpu.encode(texts[:512])
        out["cpu_captions_per_s"] = throughput(cpu, texts)
        if cuda:
            gpu = LocalEmbedder(str(enc), device="cuda", batch_size=256)
            v_gpu = gpu.encode(texts[:512])
            out["cuda_vs_cpu_max_abs_diff"] = float(np.abs(v_cpu - v_gpu).max())
            out["cuda_captions_per_s"] = throughput(gpu, texts)
            assert out["cuda_vs_cpu_max_abs_diff"] < 1e-3, out["cuda_vs_cpu_max_abs_diff"]
        lm = lm_folder(Path(d) / "lm")
        b = TransformersBackend(lm, max_new_tokens=8, device=out["device"])
        r = asyncio.run(b.chat([{"role": "user", "content": "Question: which? Answer: A"}]))
        out |= {
            "backend_device": str(b.model.device),
            "generated_chars": len(r.content),
            "tool_calls": len(r.tool_calls),
        }
        assert out["backend_device"].startswith(out["device"]), out["backend_device"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--captions", type=int, default=4096)
    a = ap.parse_args()
    cuda = torch.cuda.is_available()
    print(
        f"torch {torch.__version__}, cuda available: {cuda}" + (f" ({torch.cuda.get_device_name(0)})" if cuda else "")
    )
    r = check(a.captions)
    print(f"cpu: {r['cpu_captions_per_s']:.0f} captions/s")
    if cuda:
        print(f"cuda vs cpu vectors: max abs difference {r['cuda_vs_cpu_max_abs_diff']:.2e}")
        print(
            f"cuda: {r['cuda_captions_per_s']:.0f} captions/s, {r['cuda_captions_per_s'] / r['cpu_captions_per_s']:.1f}x the cpu rate in this process"
        )
    print(
        f"transformers backend on {r['backend_device']}: generated {r['generated_chars']} characters, tool calls {r['tool_calls']}"
    )
    print("device check: ok" if cuda else "device check: cpu half ok (no CUDA here)")


if __name__ == "__main__":
    main()
