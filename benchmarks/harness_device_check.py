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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--captions", type=int, default=4096)
    a = ap.parse_args()
    cuda = torch.cuda.is_available()
    print(
        f"torch {torch.__version__}, cuda available: {cuda}" + (f" ({torch.cuda.get_device_name(0)})" if cuda else "")
    )
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(6, 18))) + f" {i}" for i in range(a.captions)]
    with tempfile.TemporaryDirectory() as d:
        enc = encoder_folder(Path(d) / "enc")
        cpu = LocalEmbedder(str(enc), device="cpu", batch_size=256)
        v_cpu = cpu.encode(texts[:512])
        cpu_rate = throughput(cpu, texts)
        print(f"cpu: {cpu_rate:.0f} captions/s")
        if cuda:
            gpu = LocalEmbedder(str(enc), device="cuda", batch_size=256)
            v_gpu = gpu.encode(texts[:512])
            diff = float(np.abs(v_cpu - v_gpu).max())
            gpu_rate = throughput(gpu, texts)
            print(
                f"cuda vs cpu vectors: max abs difference {diff:.2e} (norms {np.linalg.norm(v_gpu, axis=1).min():.4f}..{np.linalg.norm(v_gpu, axis=1).max():.4f})"
            )
            print(f"cuda: {gpu_rate:.0f} captions/s, {gpu_rate / cpu_rate:.1f}x the cpu rate in this process")
            assert diff < 1e-3, diff
        lm = lm_folder(Path(d) / "lm")
        b = TransformersBackend(lm, max_new_tokens=8, device="cuda" if cuda else "cpu")
        r = asyncio.run(b.chat([{"role": "user", "content": "Question: which? Answer: A"}]))
        print(
            f"transformers backend on {b.model.device}: generated {len(r.content)} characters, tool calls {len(r.tool_calls)}"
        )
        assert str(b.model.device).startswith("cuda" if cuda else "cpu")
    print("device check: ok" if cuda else "device check: cpu half ok (no CUDA here)")


if __name__ == "__main__":
    main()
