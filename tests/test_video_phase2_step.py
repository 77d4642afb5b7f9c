"""The Phase-2 trainer's steps give the figures and weights of a plain reference loop written here.

The reference is the training step spelled out with the project's building blocks one sample at a time: the
epoch order, `rank_batches`, `candidates_for` / `encode_prompt` / `encode_target` per sample, the model's loss,
`torch.nn.utils.clip_grad_norm_`, `make_optimizer`'s AdamW and LR schedule, the losses of an optimizer step
summed in Python floats, every figure read back with `.item()` right away. The trainer batches its tokenizer
calls, keeps the figures on the device and writes steps.jsonl every few steps, so every logged figure and every
trained tensor must come out identical to the reference's (both run the same float ops in the same order on
CPU; the window loss is summed in float64 on both sides).
"""

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from vtreetrm.video.config import FeatureSpec, Phase2Config
from vtreetrm.video.labels import load_dataset
from vtreetrm.video.model import (
    OWN_EXCLUDE,
    build_phase2,
    candidates_for,
    encode_prompt,
    encode_target,
    make_samples,
)
from vtreetrm.video.phase1 import dataset_features, open_cache
from vtreetrm.video.phase2 import (
    RunOptions,
    _epoch_order,
    _total_steps,
    make_optimizer,
    rank_batches,
    train_phase2,
)
from vtreetrm.video.synthetic import SCALES, SyntheticConfig, make_synthetic

# the first losses of the default-sized tiny model, batch 4, from the per-step code (float32 on CPU, 1 thread)
PINNED_LOSSES = [
    6.579835891723633,
    6.4259114265441895,
    6.307495594024658,
    6.156157970428467,
    6.070950031280518,
    6.015822887420654,
]


@pytest.fixture(scope="module")
def lote(tmp_path_factory):
    d = tmp_path_factory.mktemp("p2step")
    make_synthetic(d / "syn", SyntheticConfig(**SCALES["tiny"]), datasets=("lote",), progress=False)
    return d


def reference(ds, feats, clips, cfg: Phase2Config) -> tuple[list, float, dict]:
    "(step rows, epoch mean loss, trained tensors) of epoch 1 trained one sample at a time."
    model, tok = build_phase2(cfg, ds, tuple(feats.shape[1:]))
    model.train()
    train = make_samples(clips, ds, cfg.label_mode, "train")
    opt, sched = make_optimizer(model, cfg, _total_steps(cfg, len(train), 1))
    cand = ds.labels.labels(cfg.label_mode)
    batches = rank_batches(_epoch_order(train, cfg, 1), cfg.batch_size)
    rows, tot, n, win, step = [], 0.0, 0, 0.0, 0
    for bi, batch in enumerate(batches):
        start = bi - bi % cfg.grad_accum
        window = min(cfg.grad_accum, len(batches) - start)
        enc = [encode_prompt(tok, candidates_for(cand, f"{s.id}:1", cfg.seed)) for s, _ in batch]
        tgt = []
        for (s, _), (pre, post) in zip(batch, enc):
            t = encode_target(tok, s, cfg.answer_order)
            tgt.append(t[: cfg.max_length - len(pre) - cfg.num_queries - len(post)])
        fb = feats[[s.index for s, _ in batch]]
        loss = model(fb, [e[0] for e in enc], [e[1] for e in enc], tgt, None)
        (loss / window).backward()
        tot, n, win = tot + loss.item(), n + 1, win + loss.item() / window
        if bi != start + window - 1:
            continue
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        rows.append(
            {
                "step": step,
                "loss": torch.tensor(win).item(),
                "lr": sched.get_last_lr()[0],
                "grad_norm": float(norm),
                "query_rank_entropy": model.last_rank_entropy.item(),
            }
        )
        win = 0.0
        if step >= cfg.max_steps:
            break
    own = {k: v for k, v in model.state_dict().items() if not k.startswith(OWN_EXCLUDE)}
    lora = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    return rows, torch.tensor(tot / n).item(), {**own, **lora}


@pytest.mark.parametrize("grad_accum,max_steps", [(1, 6), (2, 3)])
def test_trainer_steps_match_reference(lote, tmp_path, grad_accum, max_steps):
    torch.set_num_threads(1)
    cfg = Phase2Config(
        batch_size=4, grad_accum=grad_accum, epochs=1, max_steps=max_steps, llm_pretrain_steps=0, max_new_tokens=8
    )
    opts = RunOptions(lote / "syn" / "lote", FeatureSpec(cache=lote / "cache"), progress=False, threads=1)
    train_phase2(opts, tmp_path / "run", cfg)
    got = [json.loads(l) for l in (tmp_path / "run" / "steps.jsonl").read_text().splitlines()]
    hist = [json.loads(l) for l in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]

    ds = load_dataset(opts.dataset)
    clips, feats, _ = dataset_features(ds, open_cache(opts.features), progress=False)
    rows, epoch_loss, tensors = reference(ds, feats, clips, cfg)
    keys = ("step", "loss", "lr", "grad_norm", "query_rank_entropy")
    assert [{k: r[k] for k in keys} for r in got] == rows  # exact
    assert all(r["epoch"] == 1 and r["samples_per_s"] > 0 for r in got)
    assert hist[0]["train_loss"] == epoch_loss and hist[0]["step"] == max_steps
    own = load_file(tmp_path / "run" / "last" / "model.safetensors")
    lora = load_file(tmp_path / "run" / "last" / "adapter" / "adapter_model.safetensors")
    for k, v in own.items():
        assert torch.equal(v, tensors[k]), k
    trained = {k: v for k, v in tensors.items() if "lora_" in k}
    assert len(lora) == len(trained) > 0
    for k, v in lora.items():
        ref = next(
            t for n, t in trained.items() if n.replace(".default", "").endswith(k.split("base_model.model.", 1)[1])
        )
        assert torch.equal(v, ref), k
    if grad_accum == 1:  # both sides changed together would still be caught here
        assert all(math.isclose(r["loss"], p, rel_tol=1e-4) for r, p in zip(got, PINNED_LOSSES)), [
            r["loss"] for r in got
        ]
