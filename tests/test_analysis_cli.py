"""`vtreetrm analyze queries` end to end on checkpoints with known answers, and its refusals."""

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import save_file


def orthogonal(M, d, seed=0):
    q = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))[0][:M]
    return torch.tensor(q, dtype=torch.float32)[None]  # (1, M, d)


def test_known_answers_and_figures(tmp_path, cli):
    save_file({"qformer.query_tokens": orthogonal(8, 16)}, str(tmp_path / "ortho.safetensors"))
    torch.save(
        {"model": {"query_tokens": torch.ones(1, 8, 16) * torch.arange(1, 9)[None, :, None]}}, tmp_path / "rank1.pt"
    )
    sig = np.array([4.0, 2, 1, 1])
    U = np.linalg.qr(np.random.default_rng(2).normal(size=(4, 4)))[0]
    V = np.linalg.qr(np.random.default_rng(3).normal(size=(6, 6)))[0][:4]
    np.save(tmp_path / "spec.npy", U @ np.diag(sig) @ V)
    r = cli(
        "analyze",
        "queries",
        tmp_path / "ortho.safetensors",
        tmp_path / "rank1.pt",
        tmp_path / "spec.npy",
        "--out",
        tmp_path / "out",
        check=0,
    )
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    e = {c["path"].rsplit("/", 1)[1]: c for c in s["checkpoints"]}
    assert e["ortho.safetensors"]["effective_rank_ratio"] == pytest.approx(1, abs=1e-6)
    assert e["ortho.safetensors"]["gini"] == pytest.approx(0, abs=1e-6)
    assert e["ortho.safetensors"]["mean_abs_cos"] == pytest.approx(0, abs=1e-6)
    assert e["rank1.pt"]["effective_rank"] == pytest.approx(1, abs=1e-6)
    p = sig / sig.sum()
    assert e["spec.npy"]["effective_rank"] == pytest.approx(math.exp(-(p * np.log(p)).sum()))
    assert e["spec.npy"]["gini"] == pytest.approx(5 / 16)
    assert e["spec.npy"]["energy90_fraction"] == pytest.approx(0.5)
    assert (e["spec.npy"]["M"], e["spec.npy"]["d"]) == (4, 6)
    assert sorted(s["by_M"]) == ["4", "8"] and s["by_M"]["8"]["num_checkpoints"] == 2
    assert s["by_M"]["8"]["effective_rank_ratio"] == pytest.approx((1 + 1 / 8) / 2, abs=1e-6)
    for f in ("spectrum.png", "energy.png", "abs_cos.png", "rank_gini.png"):
        assert (tmp_path / "out" / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "R_eff/M" in r.stdout


@pytest.mark.parametrize(
    "case,msg",
    [
        ("none", "no tensor whose key ends in 'query_tokens'"),
        ("several", "several query_tokens tensors"),
        ("nan", "NaN/inf"),
        ("1d", "expected (1, M, d) or (M, d)"),
        ("corrupt", "cannot read checkpoint"),
    ],
)
def test_bad_checkpoints(tmp_path, cli, case, msg):
    good = tmp_path / "good.npy"
    np.save(good, np.eye(4))
    bad = tmp_path / ("bad.npy" if case in ("nan", "1d") else "bad.safetensors")
    if case == "none":
        save_file({"w": torch.zeros(2, 2)}, str(bad))
    elif case == "several":
        save_file({"a.query_tokens": torch.zeros(1, 2, 2), "b.query_tokens": torch.zeros(1, 2, 2)}, str(bad))
    elif case == "nan":
        np.save(bad, np.full((3, 3), np.nan))
    elif case == "1d":
        np.save(bad, np.zeros(5))
    else:
        bad.write_bytes(b"not a safetensors file")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "summary.json").write_text('{"previous": true}')
    r = cli("analyze", "queries", good, bad, "--out", tmp_path / "out", check=2)
    assert msg in r.stderr and str(bad) in r.stderr and "Traceback" not in r.stderr
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == {"previous": True}  # untouched
