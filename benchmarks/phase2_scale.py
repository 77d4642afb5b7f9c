"""Phase-2 training throughput and memory at real widths: the frozen LLM in bf16 against fp32, in one run.

    python benchmarks/phase2_scale.py [--steps 3] [--batch-size 4] [--threads 2] [--gpu-layers 4] [--procs 2]

The model is Phase-2 with random weights at real widths: an LLM shaped like Qwen2.5-0.5B (hidden 896, 14 heads,
2 KV heads, intermediate 4864) cut to 2 layers, a BLIP-2-shaped Q-former (hidden 768, 12 heads, 2 layers,
cross-attention every 2) and frozen features of width 768 (DINOv2-B). Each variant runs in a fresh subprocess
(so its peak memory is its own: process peak RSS on the CPU, CUDA max allocated on a GPU) and times `--steps`
training steps after one warm-up step on prompts of the real length (21 candidate actions). Printed per variant:
samples/s, LLM tokens/s, peak memory and the frozen LLM's parameter bytes; then the bf16 / fp32 ratios. All of it goes
to reports/phase2_scale.json (with what produced it) and reports/phase2_scale.md, the table the README shows.

`--procs N` adds the fp32 variant on N processes (torchrun, gloo on the CPU; each process 1/N of the threads and
its own batch of `--batch-size`, DDP averaging the gradients) and prints its samples/s against one process.

On a GPU it adds the Qwen2.5-7B width (hidden 3584, 28 heads, 4 KV heads, intermediate 18944) cut to
`--gpu-layers` layers, in bf16, with and without gradient checkpointing. The 7B width is never built on the CPU.
"""

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

import torch
from report import begin, write_report
from transformers import Qwen2Config, Qwen2ForCausalLM

from vtreetrm.video.config import Phase2Config
from vtreetrm.video.labels import LOTE_SIMPLE
from vtreetrm.video.model import VideoQFormerLM, encode_prompt
from vtreetrm.video.phase2 import make_accelerator, make_optimizer
from vtreetrm.video.tiny_llm import build_tokenizer, resolve_dtype

QWEN25_05B = dict(hidden_size=896, num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864)
QWEN25_7B = dict(hidden_size=3584, num_attention_heads=28, num_key_value_heads=4, intermediate_size=18944)
# "tiny": the width benchmarks/gpu_check.py's CPU half runs
WIDTHS = {
    "0.5b": QWEN25_05B,
    "7b": QWEN25_7B,
    "tiny": dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, intermediate_size=256),
}
BLIP2_QFORMER = dict(qformer_hidden=768, qformer_heads=12, qformer_layers=2, cross_attention_frequency=2)
FEATURES = (8, 17, 768)  # (T, P, D): 8 frames, CLS + 4x4 pooled patches, DINOv2-B width


def variant(spec: dict) -> dict:
    "Build one variant, time its training steps; returns the measurements."
    torch.set_num_threads(spec["threads"])
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tok = build_tokenizer()
    widths = WIDTHS[spec["llm"]]
    torch.manual_seed(0)
    llm = Qwen2ForCausalLM(
        Qwen2Config(
            **widths,
            num_hidden_layers=spec["layers"],
            vocab_size=len(tok),
            tie_word_embeddings=True,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
    )
    cfg = Phase2Config(
        llm="bench",
        num_queries=spec["num_queries"],
        dtype=spec["dtype"],
        gradient_checkpointing=spec["ckpt"],
        **BLIP2_QFORMER,
    )
    dtype = resolve_dtype(cfg.dtype, dev.type)
    model = VideoQFormerLM(cfg, llm.to(dtype), FEATURES, len(LOTE_SIMPLE), tiny=False).train()
    frozen_bytes = model.parameter_counts()["frozen_llm_bytes"]
    opt, sched = make_optimizer(model, cfg, spec["steps"] + 1)
    acc = make_accelerator(dtype)  # DDP when started by torchrun with several processes
    model, opt = acc.prepare(model, opt)
    B = spec["batch_size"]
    pre, post = encode_prompt(tok, list(LOTE_SIMPLE))
    tgt = tok(
        "<predicted_actions>Walking</predicted_actions>\nAnalysis: the video shows a deer in a forest scene; "
        "its movement matches Walking.<|im_end|>",
        add_special_tokens=False,
    )["input_ids"]
    tokens = B * (len(pre) + cfg.num_queries + len(post) + len(tgt))

    def step():
        feats = torch.randn(B, *FEATURES, device=dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda" and dtype == torch.bfloat16):
            loss = model(feats, [pre] * B, [post] * B, [tgt] * B)
        acc.backward(loss)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    step()  # warm-up
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    losses = [step() for _ in range(spec["steps"])]
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    peak = (
        torch.cuda.max_memory_allocated()
        if dev.type == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    )
    W = acc.num_processes
    n_llm = sum(p.numel() for n, p in acc.unwrap_model(model).llm.named_parameters() if "lora_" not in n)
    # frozen LLM: forward 2N and input-gradient 2N FLOPs per token (no weight gradients); recomputation is not counted
    mfu = (
        (4 * n_llm * tokens * spec["steps"] * W / dt) / (spec["peak_tflops"] * 1e12 * W)
        if dev.type == "cuda" and spec["peak_tflops"]
        else None
    )
    return {
        **spec,
        "mfu": mfu,
        "device": dev.type,
        "processes": W,
        "samples_per_s": spec["steps"] * B * W / dt,
        "tokens_per_s": spec["steps"] * tokens * W / dt,
        "peak_memory_mib": peak / 2**20,
        "frozen_llm_bytes": frozen_bytes,
        "llm_parameters": n_llm,
        "loss_finite": all(math.isfinite(x) for x in losses),
    }


def run_variant(spec: dict, procs: int = 1) -> dict:
    launch = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs)]
        if procs > 1
        else [sys.executable]
    )
    out = subprocess.run([*launch, __file__, "--one", json.dumps(spec)], capture_output=True, text=True)
    line = next((l for l in out.stdout.splitlines() if l.startswith("{")), None)
    if out.returncode or line is None:
        sys.exit(f"variant {spec} failed:\n{out.stderr[-2000:]}")
    return json.loads(line)


PEAK_BF16_TFLOPS = {"H200": 989, "H100": 989, "A100": 312, "L40S": 362, "A10": 125}  # dense, per GPU


def gpu_peak_tflops() -> float | None:
    "The GPU's dense bf16 peak, None without a GPU or for one not in the table (no MFU then)."
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def show(r: dict):
    print(
        f"{r['llm']:>5} x{r['layers']} {r['dtype']:<5} procs={r['processes']} ckpt={'on ' if r['ckpt'] else 'off'}  {r['samples_per_s']:8.2f} samples/s "
        f"{r['tokens_per_s']:10.1f} tokens/s   peak {r['peak_memory_mib']:9.1f} MiB   frozen LLM {r['frozen_llm_bytes'] / 2**20:8.1f} MiB"
        + (f"   MFU {100 * r['mfu']:.1f}% of {r['peak_tflops']} TFLOP/s" if r.get("mfu") is not None else "")
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--num-queries", type=int, default=32)
    ap.add_argument("--gpu-layers", type=int, default=4, help="layers of the 7B-wide LLM on a GPU")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--procs", type=int, default=1, help="also time the fp32 variant on this many processes")
    ap.add_argument("--out", help="folder for phase2_scale.json/.md (default: the repository's reports/)")
    args = ap.parse_args()
    t0 = time.time()
    pv = None if args.one else begin(vars(args))
    if args.one:
        r = variant(json.loads(args.one))
        if int(os.environ.get("RANK", 0)) == 0:
            print(json.dumps(r))
        return
    base = dict(
        llm="0.5b",
        layers=2,
        steps=args.steps,
        batch_size=args.batch_size,
        threads=args.threads,
        num_queries=args.num_queries,
        ckpt=False,
        peak_tflops=gpu_peak_tflops(),
    )
    fp32, bf16 = run_variant({**base, "dtype": "fp32"}), run_variant({**base, "dtype": "bf16"})
    rows, ratios = [fp32, bf16], {}
    for r in (fp32, bf16):
        show(r)
    ratios["bf16_over_fp32"] = {k: bf16[k] / fp32[k] for k in ("frozen_llm_bytes", "samples_per_s", "peak_memory_mib")}
    print(
        f"bf16 / fp32: frozen LLM bytes {ratios['bf16_over_fp32']['frozen_llm_bytes']:.3f}x, "
        f"samples/s {ratios['bf16_over_fp32']['samples_per_s']:.2f}x, peak memory {ratios['bf16_over_fp32']['peak_memory_mib']:.2f}x "
        f"(device {fp32['device']}, batch {args.batch_size}, M={args.num_queries}, {args.steps} steps)"
    )
    if args.procs > 1:
        many = run_variant({**base, "dtype": "fp32", "threads": max(1, args.threads // args.procs)}, args.procs)
        rows.append(many)
        show(many)
        ratios["procs_over_one"] = many["samples_per_s"] / fp32["samples_per_s"]
        print(
            f"{args.procs} processes / 1 process (fp32, {args.threads} threads in all, batch {args.batch_size} per process): "
            f"samples/s {ratios['procs_over_one']:.2f}x"
        )
    if torch.cuda.is_available():
        big = {**base, "llm": "7b", "layers": args.gpu_layers, "dtype": "bf16"}
        off, on = run_variant(big), run_variant({**big, "ckpt": True})
        rows += [off, on]
        for r in (off, on):
            show(r)
        ratios["ckpt_on_over_off"] = {k: on[k] / off[k] for k in ("peak_memory_mib", "samples_per_s")}
        print(
            f"gradient checkpointing on / off: peak memory {ratios['ckpt_on_over_off']['peak_memory_mib']:.2f}x, "
            f"samples/s {ratios['ckpt_on_over_off']['samples_per_s']:.2f}x"
        )
    else:
        print("no GPU: the Qwen2.5-7B-width variants run only on a GPU")
    paths = write_report(
        "phase2_scale", {"variants": rows, "ratios": ratios}, markdown({"variants": rows, "ratios": ratios}, vars(args)), pv, time.time() - t0,
        quick=False, out=args.out,
    )  # fmt: skip
    print("wrote", *paths)


def markdown(f: dict, params: dict) -> str:
    "The table of variants and the ratios, as the README shows them; `params`: the run's flags (its provenance's)."
    rows, ratios, args = f["variants"], f["ratios"], argparse.Namespace(**params)
    out = ["| LLM width | layers | dtype | processes x threads | grad. ckpt | samples/s | peak memory (MiB) | frozen LLM (MiB) |",
           "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    out += [f"| {r['llm']} | {r['layers']} | {r['dtype']} | {r['processes']} x {r['threads']} | {'on' if r['ckpt'] else 'off'} "
            f"| {r['samples_per_s']:.2f} | {r['peak_memory_mib']:.1f} | {r['frozen_llm_bytes'] / 2**20:.1f} |" for r in rows]  # fmt: skip
    b = ratios["bf16_over_fp32"]
    out += ["", f"bf16 / fp32: frozen LLM bytes {b['frozen_llm_bytes']:.3f}x, peak memory {b['peak_memory_mib']:.2f}x, "
            f"samples/s {b['samples_per_s']:.2f}x (batch {args.batch_size} per process, M = {args.num_queries}, "
            f"{args.steps} timed steps after one warm-up; peak memory: process peak RSS on the CPU, CUDA max allocated on a GPU)."]  # fmt: skip
    if "procs_over_one" in ratios:
        out[-1] += (
            f" {args.procs} processes / 1 process (fp32, {args.threads} threads in all): samples/s {ratios['procs_over_one']:.2f}x."
        )
    if "ckpt_on_over_off" in ratios:
        c = ratios["ckpt_on_over_off"]
        out[-1] += (
            f" Gradient checkpointing on / off: peak memory {c['peak_memory_mib']:.2f}x, samples/s {c['samples_per_s']:.2f}x."
        )
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
