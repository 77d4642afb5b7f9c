"""Hostile and broken checkpoints, families of them, against every video command that reads one: a one-line error
naming the path, exit code 2, nothing written, and no pickle ever run."""

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from vtreetrm.cli import main
from vtreetrm.video.synthetic import SyntheticConfig, make_synthetic

torch.set_num_threads(1)


class Payload:
    "Unpickling this runs `touch MARKER`."

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def run(*args):
    return main([str(a) for a in args])


def sha(p):
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("ck")
    make_synthetic(
        d / "syn",
        SyntheticConfig(head_count=6, min_count=4, mammalnet_count=2, multi_label=1, n_short=0),
        progress=False,
    )
    common = ["--cache", d / "cache", "--threads", 1]
    assert run("video", "phase1", d / "syn" / "lote", "--out", d / "p1", "--epochs", 1, *common[:2]) == 0
    assert (
        run(
            "video",
            "phase2",
            d / "syn" / "lote",
            "--out",
            d / "p2",
            "--epochs",
            1,
            "--max-steps",
            1,
            "--num-queries",
            4,
            "--max-new-tokens",
            4,
            *common,
        )
        == 0
    )
    return d


def expect_refused(capsys, rc, *needles, written=()):
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for n in needles:
        assert str(n) in err, (n, err)
    for w in written:
        assert not Path(w).exists(), w


def _evil_file(d, name, marker):
    p = Path(d) / name
    p.write_bytes(pickle.dumps(Payload(marker)))
    return p


@pytest.mark.parametrize("where", ["predict", "phase2 --phase1", "export", "analyze"])
def test_pickle_given_for_a_checkpoint_is_never_run(trained, tmp_path, capsys, where):
    marker = tmp_path / "marker"
    evil = _evil_file(tmp_path, "best.pt", marker)
    torch.save({"query_tokens": Payload(marker)}, tmp_path / "q.pt")
    out = tmp_path / "out"
    rc = {
        "predict": lambda: run(
            "video", "predict", evil, "--dataset", trained / "syn" / "lote", "--out", out, "--cache", trained / "cache"
        ),
        "phase2 --phase1": lambda: run(
            "video", "phase2", trained / "syn" / "lote", "--phase1", evil, "--out", out, "--cache", trained / "cache"
        ),
        "export": lambda: run("video", "export", evil, "--out", out, "--merge"),
        "analyze": lambda: run("analyze", "queries", tmp_path / "q.pt", "--out", out),
    }[where]()
    expect_refused(capsys, rc, tmp_path, written=[out])
    assert not marker.exists()


@pytest.mark.parametrize("kind", ["phase1", "phase2"])
def test_crafted_resume_state_is_refused(trained, tmp_path, capsys, kind):
    run_dir = tmp_path / kind
    shutil.copytree(trained / ("p1" if kind == "phase1" else "p2"), run_dir)
    marker = tmp_path / "marker"
    last = run_dir / "last"
    torch.save({"optimizer": Payload(marker)}, last / "resume.pt")
    meta = json.loads((last / "checkpoint.json").read_text())  # an attacker fixes the sha256 too
    meta["files"]["resume.pt"] = sha(last / "resume.pt")
    (last / "checkpoint.json").write_text(json.dumps(meta))
    before = (run_dir / "history.jsonl").read_bytes()
    if kind == "phase1":
        rc = run(
            "video",
            "phase1",
            trained / "syn" / "lote",
            "--out",
            run_dir,
            "--epochs",
            2,
            "--cache",
            trained / "cache",
            "--resume",
        )
    else:
        rc = run(
            "video",
            "phase2",
            trained / "syn" / "lote",
            "--out",
            run_dir,
            "--epochs",
            2,
            "--cache",
            trained / "cache",
            "--resume",
        )
    err = capsys.readouterr().err
    assert rc == 2 and "refused: resume.pt is not plain tensor state" in err and str(last / "resume.pt") in err, err
    assert not marker.exists()
    assert (run_dir / "history.jsonl").read_bytes() == before


def _damage(best, how):
    if how == "missing model":
        os.remove(best / "model.safetensors")
    elif how == "missing adapter":
        shutil.rmtree(best / "adapter")
    elif how == "truncated":
        b = (best / "model.safetensors").read_bytes()
        (best / "model.safetensors").write_bytes(b[: len(b) // 2])
    elif how == "bad json":
        (best / "checkpoint.json").write_text('{"format": ')
    elif how == "path escape":
        meta = json.loads((best / "checkpoint.json").read_text())
        meta["files"]["../../../etc/passwd"] = "0" * 64
        (best / "checkpoint.json").write_text(json.dumps(meta))
    elif how == "other base":
        cfg = best.parent / "base_llm" / "config.json"
        c = json.loads(cfg.read_text())
        c["rms_norm_eps"] = 1e-5
        cfg.write_text(json.dumps(c))
    elif how == "old pickles":
        shutil.rmtree(best)
        (best.parent / "best.pt").write_bytes(b"\x80\x04K\x01.")
    elif how.startswith("field "):  # a hand-edited checkpoint.json: one field gone or of the wrong kind
        _, k, v = how.split(" ", 2)
        meta = json.loads((best / "checkpoint.json").read_text())
        if v == "missing":
            meta.pop(k)
        else:
            meta[k] = json.loads(v)
        (best / "checkpoint.json").write_text(json.dumps(meta))


DAMAGE = {
    "missing model": "model.safetensors is missing",
    "missing adapter": "adapter",
    "truncated": "does not match the sha256",
    "bad json": "invalid JSON",
    "path escape": "outside the checkpoint folder",
    "other base": "belongs to another base LLM",
    "old pickles": "no such phase2 checkpoint folder",
    "field config missing": "field 'config': missing",
    'field config "x"': "field 'config': expected dict",
    "field llm 5": "field 'llm': expected dict",
    'field feature_shape "abc"': "field 'feature_shape': expected list",
    "field feature_shape [8, 0]": "field 'feature_shape': expected three positive sizes",
    'field epoch "x"': "field 'epoch': expected int",
    "field label_mode missing": "field 'label_mode': missing",
    "field label_map 5": "field 'label_map': expected dict",
}


@pytest.mark.parametrize("how", list(DAMAGE))
@pytest.mark.parametrize("command", ["predict", "export"])
def test_damaged_checkpoint_folder(trained, tmp_path, capsys, how, command):
    run_dir = tmp_path / "run"
    shutil.copytree(trained / "p2", run_dir)
    _damage(run_dir / "best", how)
    out = tmp_path / "out"
    if command == "predict":
        rc = run(
            "video",
            "predict",
            run_dir / "best",
            "--dataset",
            trained / "syn" / "lote",
            "--out",
            out,
            "--cache",
            trained / "cache",
        )
    else:
        rc = run("video", "export", run_dir / "best", "--out", out, "--merge")
    expect_refused(capsys, rc, DAMAGE[how], run_dir, written=[out])


def test_damaged_phase1_folder(trained, tmp_path, capsys):
    p1 = tmp_path / "p1"
    shutil.copytree(trained / "p1", p1)
    os.remove(p1 / "best" / "model.safetensors")
    out = tmp_path / "out"
    rc = run(
        "video", "phase2", trained / "syn" / "lote", "--phase1", p1 / "best", "--out", out, "--cache", trained / "cache"
    )
    expect_refused(capsys, rc, "model.safetensors is missing", p1 / "best", written=[out])
    rc = run(
        "video",
        "phase2",
        trained / "syn" / "lote",
        "--phase1",
        trained / "p1",
        "--out",
        out,
        "--cache",
        trained / "cache",
    )
    expect_refused(capsys, rc, "this is a run folder", written=[out])


@pytest.mark.parametrize("case", ["empty", "qwen", "pickle only", "no qformer tensors"])
def test_qformer_init_that_is_not_blip2(trained, tmp_path, capsys, case):
    d = tmp_path / "init"
    d.mkdir()
    marker = tmp_path / "marker"
    if case == "qwen":
        shutil.copy(trained / "p2" / "base_llm" / "config.json", d / "config.json")
    if case in ("pickle only", "no qformer tensors"):
        (d / "config.json").write_text(json.dumps({"model_type": "blip-2", "qformer_config": {"hidden_size": 64}}))
    if case == "pickle only":
        _evil_file(d, "pytorch_model.bin", marker)
    if case == "no qformer tensors":
        from safetensors.torch import save_file

        save_file({"vision_model.x": torch.zeros(2)}, str(d / "model.safetensors"))
    need = {
        "empty": "no config.json",
        "qwen": "model_type is 'qwen2'",
        "pickle only": "a pickle, which is never read",
        "no qformer tensors": "no query_tokens / qformer.* tensors",
    }[case]
    out = tmp_path / "out"
    rc = run(
        "video", "phase2", trained / "syn" / "lote", "--qformer-init", d, "--out", out, "--cache", trained / "cache"
    )
    expect_refused(capsys, rc, need, d, written=[out])
    assert not marker.exists()


@pytest.mark.parametrize(
    "flags, need",
    [
        (["--qformer-heads", "5"], "--qformer-heads 5 does not divide --qformer-hidden 64"),
        (["--lora-targets", "q_proj,c_attn"], "no module named c_attn"),
        (["--dtype", "fp16"], "--dtype fp16 needs a GPU"),
        (["--max-length", "64"], "--max-length 64 is too short"),
        (["--warmup-ratio", "1.5"], "--warmup-ratio must be in [0, 1)"),
        (["--grad-accum", "0"], "--grad-accum must be a positive integer"),
    ],
)
def test_impossible_configs_fail_before_training(trained, tmp_path, capsys, flags, need):
    out = tmp_path / "out"
    rc = run("video", "phase2", trained / "syn" / "lote", "--out", out, "--cache", trained / "cache", *flags)
    expect_refused(capsys, rc, need, written=[out])


def test_qformer_init_from_a_saved_blip2(trained, tmp_path, capsys):
    """--qformer-init: a tiny Blip2Model saved by transformers gives the Q-former its sizes, weights and first queries."""
    from safetensors.torch import load_file
    from transformers import Blip2Config, Blip2Model

    b = Blip2Model(
        Blip2Config(
            vision_config=dict(
                hidden_size=40,
                intermediate_size=80,
                num_hidden_layers=1,
                num_attention_heads=2,
                image_size=28,
                patch_size=14,
            ),
            qformer_config=dict(
                hidden_size=48,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=96,
                cross_attention_frequency=2,
            ),
            text_config=dict(
                model_type="opt",
                hidden_size=32,
                num_hidden_layers=1,
                num_attention_heads=2,
                ffn_dim=64,
                vocab_size=100,
                word_embed_proj_dim=32,
            ),
            num_query_tokens=6,
        )
    )
    b.save_pretrained(tmp_path / "blip2")
    out = tmp_path / "run"
    assert (
        run(
            "video",
            "phase2",
            trained / "syn" / "lote",
            "--qformer-init",
            tmp_path / "blip2",
            "--out",
            out,
            "--cache",
            trained / "cache",
            "--num-queries",
            8,
            "--epochs",
            1,
            "--max-steps",
            1,
            "--max-new-tokens",
            4,
            "--lr",
            1e-9,
            "--lora-lr",
            1e-9,
            "--threads",
            1,
        )
        == 0
    )
    init = json.loads((out / "run.json").read_text())["qformer_init"]
    assert (
        init["tensors_reinitialised"] == []
        and init["queries_from_checkpoint"] == 6
        and init["queries_in_checkpoint"] == 6
    )
    cfg = json.loads((out / "best" / "checkpoint.json").read_text())["config"]
    assert (cfg["qformer_hidden"], cfg["qformer_layers"], cfg["qformer_heads"], cfg["cross_attention_frequency"]) == (
        48,
        2,
        4,
        2,
    )
    own = load_file(str(out / "best" / "model.safetensors"))
    assert own["query_tokens"].shape == (1, 8, 48)
    torch.testing.assert_close(
        own["query_tokens"][:, :6], b.query_tokens.detach(), atol=1e-5, rtol=0
    )  # one step at lr 1e-9


@pytest.mark.parametrize("command", ["predict", "export"])
@pytest.mark.parametrize("target", ["user folder", "file"])
def test_outputs_never_replace_what_the_user_has(trained, tmp_path, capsys, command, target):
    out = tmp_path / "out"
    if target == "user folder":
        out.mkdir()
        (out / "notes.txt").write_text("keep me")
    else:
        out.write_text("keep me")
    if command == "predict":
        rc = run(
            "video",
            "predict",
            trained / "p2" / "best",
            "--dataset",
            trained / "syn" / "lote",
            "--out",
            out,
            "--cache",
            trained / "cache",
        )
    else:
        rc = run("video", "export", trained / "p2" / "best", "--out", out)
    expect_refused(capsys, rc, "refusing to replace", out)
    assert ((out / "notes.txt") if target == "user folder" else out).read_text() == "keep me"
