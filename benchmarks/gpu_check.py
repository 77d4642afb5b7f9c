"""`make gpu-check`: the GPU checks in one command and one JSON summary; without CUDA, their CPU half.

    python benchmarks/gpu_check.py [--out papermill_runs/gpu_check] [--items NAME ...] [--budget-scale 1.0]

Items (each a key of OUT/summary.json with `status` ok / failed / not run, its figures, and the reason when not run):
  harness_cuda           the harness's embedder and transformers backend on CUDA (benchmarks/harness_device_check.py)
  dinov2_large_features  a DINOv2-L-wide random encoder (width 1024, 24 layers, 16 heads) on 224 px frames in bf16:
                         frames/s, the GPU's busy share (kernel time in torch.profiler / wall), peak memory
  phase2_7b              Phase-2 training steps at the Qwen2-7B width (hidden 3584, intermediate 18944, 28 / 4 heads)
                         cut to 4 layers, bf16, LoRA, gradient checkpointing (benchmarks/phase2_scale.py's variant):
                         tokens/s, MFU against the card's dense bf16 peak, peak memory
  verl_sft               verl's SFT trainer for 3 steps (`vtreetrm release verl-sft --device cuda --no-dry-run`) on the
                         tiny release and tiny Qwen2 of tests/verl_chain.py: its finite losses
  vllm_rollout           vLLM generates the first episodes of that chain's rl-cascade release with a tiny random Qwen2
                         (one turn each); `rollout-gate --from-dump` scores them (the gate has no vLLM backend of its own)
Without CUDA, harness_cuda, dinov2_large_features and phase2_7b run at a tiny size on the CPU (`device: cpu`, their
GPU-only figures null and named under `not_run`); verl_sft and vllm_rollout are not run. Each item has a time budget
(all of them together fit 8 minutes on one H200; `--budget-scale` scales them); an item over its budget has failed.
Exit 1 when an item that ran failed.
"""

import argparse
import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests")]
import torch
from report import begin

from vtreetrm.utils import UserError, check_file_output, read_json, write_output_json

NO_CUDA = "no CUDA device"
SFT_STEPS = 3
FLOPS = (
    "the standard 6 * N * tokens / s over the peak: N the LLM's parameters without LoRA, tokens the LLM's input tokens "
    "(the frozen LLM does forward 2N and input-gradient 2N a token, and gradient checkpointing recomputes the forward, "
    "2N: 6N is also what runs); the Q-former and LoRA are not counted"
)


class NotRun(Exception):
    "An item that cannot run here; its message is the reason."


def peak_mib() -> float:
    return torch.cuda.max_memory_allocated() / 2**20


def harness_cuda(cuda: bool, tmp: Path, budget: float) -> dict:
    import harness_device_check

    r = harness_device_check.check(captions=4096 if cuda else 256)
    return r if cuda else {**r, "not_run": {"cuda_captions_per_s": NO_CUDA, "cuda_vs_cpu_max_abs_diff": NO_CUDA}}


def dinov2_large_features(cuda: bool, tmp: Path, budget: float) -> dict:
    from transformers import Dinov2Config, Dinov2Model

    from vtreetrm.video.features import Sampling, encode_pixels, load_vision_encoder

    dev = "cuda" if cuda else "cpu"
    if cuda:
        torch.manual_seed(0)
        cfg = Dinov2Config(
            hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, patch_size=14, image_size=224
        )
        m = Dinov2Model(cfg).requires_grad_(False).eval().to(dev, torch.bfloat16)
        clips, batches = 16, 10
    else:
        m, clips, batches = load_vision_encoder("tiny"), 1, 2
    s = Sampling().resolved(m)  # 8 frames a clip, at the encoder's image size
    x = torch.randn(clips * s.frames, 3, s.image_size, s.image_size, device=dev)

    def run(n):
        for _ in range(n):
            encode_pixels(m, x, clips, s)
        if cuda:
            torch.cuda.synchronize()

    run(1)  # warm-up
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    run(batches)
    dt = time.perf_counter() - t0
    out = {
        "device": dev,
        "shape": f"width {m.config.hidden_size}, {m.config.num_hidden_layers} layers, {m.config.num_attention_heads} heads, "
        f"{s.image_size} px, {m.dtype}",
        "frames_per_batch": len(x),
        "frames_per_s": batches * len(x) / dt,
    }
    if not cuda:
        return {**out, "gpu_busy_share": None, "peak_memory_mib": None,
                "not_run": {"gpu_busy_share": NO_CUDA, "peak_memory_mib": NO_CUDA}}  # fmt: skip
    out["peak_memory_mib"] = peak_mib()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        run(3)
        wall = time.perf_counter() - t0
    kernel_us = sum(e.self_device_time_total for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    return {
        **out,
        "gpu_busy_share": kernel_us / 1e6 / wall,
        "busy_share_measured": "CUDA kernel time / wall, 3 batches under torch.profiler",
    }


PEAK_NOTE = "the card's dense bf16 peak from benchmarks/phase2_scale.py's PEAK_BF16_TFLOPS"


def phase2_7b(cuda: bool, tmp: Path, budget: float) -> dict:
    import phase2_scale

    spec = dict(
        llm="7b" if cuda else "tiny",
        layers=4 if cuda else 2,
        steps=10 if cuda else 2,
        batch_size=32 if cuda else 2,
        threads=torch.get_num_threads(),
        num_queries=32,
        dtype="bf16" if cuda else "fp32",
        ckpt=True,
        peak_tflops=phase2_scale.gpu_peak_tflops(),
    )
    r = phase2_scale.variant(spec)
    if not r["loss_finite"]:
        raise RuntimeError("a training loss is not finite")
    w = phase2_scale.WIDTHS[spec["llm"]]
    out = {
        "device": r["device"],
        "shape": f"Qwen2 hidden {w['hidden_size']}, intermediate {w['intermediate_size']}, {w['num_attention_heads']} / "
        f"{w['num_key_value_heads']} kv heads, {spec['layers']} layers, {spec['dtype']}, LoRA r 8, gradient checkpointing",
        **{k: spec[k] for k in ("steps", "batch_size", "num_queries")},
        "llm_parameters": r["llm_parameters"],
        "tokens_per_s": r["tokens_per_s"],
        "samples_per_s": r["samples_per_s"],
        "flops_formula": FLOPS,
        "peak_tflops": spec["peak_tflops"],
        "mfu": None,
        "peak_memory_mib": r["peak_memory_mib"] if cuda else None,
        "not_run": {},
    }
    if not cuda:
        out["not_run"] = {"mfu": NO_CUDA, "peak_memory_mib": NO_CUDA}
    elif spec["peak_tflops"] is None:
        out["not_run"]["mfu"] = f"unknown card {torch.cuda.get_device_name()!r}: not in {PEAK_NOTE}"
    else:
        out["mfu"] = 6 * r["llm_parameters"] * r["tokens_per_s"] / (spec["peak_tflops"] * 1e12)
    return out


def need(module: str, where: str):
    if importlib.util.find_spec(module) is None:
        raise NotRun(f"{module} is not importable in this environment ({where} installs it)")


def verl_sft(cuda: bool, tmp: Path, budget: float) -> dict:
    if not cuda:
        raise NotRun(
            f"{NO_CUDA} (verl's SFT trainer on a CPU, `release verl-sft --device cpu`, is the slow test tests/test_verl_trainer.py)"
        )
    need("verl", "`make env`, its [verl] extra")
    from verl_chain import TRAINED_QWEN2, verl_chain

    r = verl_chain(tmp, **TRAINED_QWEN2).run
    extra = [f"trainer.total_training_steps={SFT_STEPS}", f"trainer.save_freq={SFT_STEPS}", "trainer.test_freq=-1"]
    extra += ["data.train_batch_size=4", "data.micro_batch_size_per_gpu=2"]
    flash = importlib.util.find_spec("flash_attn") is not None  # verl's default attention on CUDA, packed sequences
    if not flash:
        extra += ["model.use_remove_padding=false", "+model.override_config.attn_implementation=sdpa"]
    bin_ = Path(sys.executable).parent
    cmd = [bin_ / "vtreetrm", "release", "verl-sft", "--release", r / "traj", "--model", tmp / "model"]
    cmd += ["--output-dir", tmp / "sft", "--smoke", "--device", "cuda", "--no-dry-run", "--extra", *extra]
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}  # fmt: skip
    p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, env=env, timeout=budget)
    log = p.stdout + p.stderr
    losses = {int(s): float(v) for s, v in re.findall(r"step:(\d+) - .*?train/loss:(\S+)", log)}
    if p.returncode or sorted(losses) != list(range(1, SFT_STEPS + 1)) or not all(map(math.isfinite, losses.values())):
        raise RuntimeError(f"verl-sft exit {p.returncode}, losses {losses}:\n{log[-3000:]}")
    attn = "flash_attention_2" if flash else "sdpa, unpadded (flash_attn is not importable here)"
    return {"device": "cuda", "steps": SFT_STEPS, "losses": [losses[i] for i in sorted(losses)], "attention": attn}


def vllm_rollout(cuda: bool, tmp: Path, budget: float) -> dict:
    if not cuda:
        raise NotRun(NO_CUDA)
    need("vllm", "`make env-rl` on a GPU node")
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
    from verl_chain import TRAINED_QWEN2, verl_chain
    from vllm import LLM, SamplingParams

    from vtreetrm.release.parquet import iter_parquet
    from vtreetrm.release.rollout import GateRecord, rollout_gate
    from vtreetrm.release.tools import TOOL_SCHEMAS
    from vtreetrm.utils import write_jsonl

    r = verl_chain(tmp, **TRAINED_QWEN2).run
    folder = tmp / "model"
    tok = AutoTokenizer.from_pretrained(folder)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, max_position_embeddings=8192)  # fmt: skip
    Qwen2ForCausalLM(cfg).save_pretrained(folder)  # head width 64, which vLLM's attention kernels take
    rows = [row for _, (_, row) in zip(range(16), iter_parquet(r / "rl/val.parquet"))]
    prompts = [
        tok(tok.apply_chat_template(x["prompt"], tools=TOOL_SCHEMAS, add_generation_prompt=True, tokenize=False),
            add_special_tokens=False)["input_ids"]
        for x in rows
    ]  # fmt: skip
    llm = LLM(
        model=str(folder), dtype="bfloat16", gpu_memory_utilization=0.3, enforce_eager=True, max_model_len=8192, seed=0
    )
    t0 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], SamplingParams(max_tokens=64, temperature=0.0))
    dt = time.perf_counter() - t0
    dump = write_jsonl(
        tmp / "rollout.jsonl",
        ({"sample_id": x["extra_info"]["sample_id"], "response": o.outputs[0].text, "data_source": x["data_source"],
          "ground_truth": x["reward_model"]["ground_truth"]} for x, o in zip(rows, outs)),
    )  # fmt: skip
    rc = rollout_gate(
        model=str(folder), record=GateRecord(from_dump=str(dump), report=str(tmp / "gate.json")), progress=False
    )
    g = read_json(tmp / "gate.json")
    if rc not in (0, 1) or g["denominator"] != len(rows):
        raise RuntimeError(f"rollout-gate exit {rc}, denominator {g['denominator']} of {len(rows)} episodes")
    return {
        "device": "cuda",
        "episodes": len(rows),
        "generated_tokens_per_s": sum(len(o.outputs[0].token_ids) for o in outs) / dt,
        "gate_status": g["status"],
        "nonzero_reward_rate": g["nonzero_reward_rate"],
        "note": "one turn per episode, a random model: the gate ran on vLLM's output, its verdict is not the point",
    }


# name: (budget in seconds on one H200, the check); run in this order (vLLM last: it holds GPU memory)
ITEMS = {
    "harness_cuda": (45, harness_cuda),
    "dinov2_large_features": (45, dinov2_large_features),
    "phase2_7b": (90, phase2_7b),
    "verl_sft": (150, verl_sft),
    "vllm_rollout": (120, vllm_rollout),
}


OVER_BUDGET = "TimeoutError: over its time budget"
_alarm = {"fired": False}  # whether the running item's timer went off


def _over_budget(signum, frame):
    _alarm["fired"] = True
    raise TimeoutError("over its time budget")


def run_item(name: str, cuda: bool, budget: float) -> dict:
    "One item's summary entry: its figures and status, `seconds`, `budget_s`."
    t0 = time.perf_counter()
    _alarm["fired"] = False
    signal.signal(signal.SIGALRM, _over_budget)
    try:
        try:  # the timer is set and cleared inside: an alarm anywhere between is caught below
            signal.setitimer(signal.ITIMER_REAL, budget)
            with tempfile.TemporaryDirectory() as d:
                r = {"status": "ok", **ITEMS[name][1](cuda, Path(d), budget)}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except NotRun as e:
        r = {"status": "not run", "reason": str(e)}
    except Exception as e:  # TimeoutError: over its budget
        r = {"status": "failed", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
    if _alarm["fired"]:
        # over its budget, whatever came of it: the alarm's TimeoutError raised inside a library (an import, say) can be
        # caught there and end as another error, or as none
        r = {**r, "status": "failed", "error": OVER_BUDGET}
    if cuda:
        torch.cuda.empty_cache()
    return {**r, "seconds": round(time.perf_counter() - t0, 2), "budget_s": budget}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "papermill_runs/gpu_check"), help="folder of summary.json")
    ap.add_argument("--items", nargs="+", choices=list(ITEMS), default=list(ITEMS), help="run only these")
    ap.add_argument("--budget-scale", type=float, default=1.0, help="multiply every item's time budget")
    a = ap.parse_args(argv)
    if not (math.isfinite(a.budget_scale) and a.budget_scale > 0):
        ap.error(f"--budget-scale must be a number above 0, got {a.budget_scale}")
    try:  # before any work: a user's summary.json (or a folder, a link) at that path is never written over
        check_file_output(Path(a.out) / "summary.json", "gpu-check", "--out")
    except UserError as e:
        ap.exit(2, f"gpu_check.py: error: {e}\n")
    t0 = time.time()
    pv = begin(vars(a))
    cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name() if cuda else "cpu"
    print(
        f"gpu-check on {device}: {', '.join(a.items)} (budgets {sum(ITEMS[n][0] for n in a.items) * a.budget_scale:.0f} s in all)"
    )
    summary = {}
    for name in ITEMS:
        if name not in a.items:
            summary[name] = {"status": "not run", "reason": "not among --items"}
            continue
        summary[name] = r = run_item(name, cuda, ITEMS[name][0] * a.budget_scale)
        print(f"{name}: {r['status']} in {r['seconds']:.1f} s (budget {r['budget_s']:.0f} s)"
              + (f": {r.get('reason') or r.get('error', '').splitlines()[0]}" if r["status"] != "ok" else ""), flush=True)  # fmt: skip
    failed = [n for n, r in summary.items() if r["status"] == "failed"]
    summary |= {
        "device": device,
        "cuda": cuda,
        "failed": failed,
        "seconds": round(time.time() - t0, 1),
        "provenance": {**pv, "device_name": device, "torch_cuda": torch.version.cuda},
    }
    path = write_output_json(Path(a.out) / "summary.json", summary, "gpu-check", "--out")
    print(json.dumps({k: v for k, v in summary.items() if k != "provenance"}, indent=1, default=str))
    print("wrote", path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
