"""Hostile inputs to the video commands: a base LLM swapped under a Phase-2 checkpoint, two trainings on one run
folder, video links out of --videos, one file in two splits, duplicate JSON keys and CSV columns, containers that
overstate their duration, damaged cached features and NaN weights. Each is refused in one line (exit 2) or left out
under --skip-bad, never used."""

import json
import os
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import refused_cli
from safetensors.torch import load_file, save_file

from vtreetrm.cli import main
from vtreetrm.utils import UserError, folder_lock, sha256_file
from vtreetrm.video.features import decode_clip
from vtreetrm.video.labels import load_dataset
from vtreetrm.video.synthetic import LOTE_MOTION, SyntheticConfig, make_synthetic, render_frames, write_mp4

torch.set_num_threads(1)


def run(*args):
    return main([str(a) for a in args])


def refused(capsys, rc, *needles):
    "Exit 2 and one `error:` line holding every needle; returns the line."
    err = capsys.readouterr().err
    lines = re.findall(r"(?:error|warning): [^\r\n]*", err)  # (a progress bar may precede it on its line)
    assert rc == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert str(n) in lines[0], (n, err)
    return lines[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    "A tiny synthetic dataset, its feature cache and a one-step Phase-2 run (its own random tiny LLM in base_llm/)."
    d = tmp_path_factory.mktemp("hv")
    make_synthetic(
        d / "syn",
        SyntheticConfig(head_count=6, min_count=4, mammalnet_count=2, multi_label=1, n_short=0),
        datasets=("lote",),
        progress=False,
    )
    flags = ["--epochs", 1, "--max-steps", 1, "--num-queries", 4, "--max-new-tokens", 4, "--llm-pretrain-steps", 0]
    rc = run("video", "phase2", d / "syn" / "lote", "--out", d / "p2", "--cache", d / "cache", "--threads", 1, *flags)
    assert rc == 0
    return d


def _predict(trained, ckpt, out):
    return run(
        "video", "predict", ckpt, "--dataset", trained / "syn" / "lote", "--out", out, "--cache", trained / "cache"
    )


# ---------------------------------------------------------------- the base LLM under a Phase-2 checkpoint


def _change_base(base: Path, how: str):
    if how == "noised weights":
        w = load_file(str(base / "model.safetensors"))
        g = torch.Generator().manual_seed(0)
        save_file(
            {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in w.items()}, str(base / "model.safetensors")
        )
    elif how == "replaced weights":
        w = load_file(str(base / "model.safetensors"))
        save_file({k: torch.zeros_like(v) for k, v in w.items()}, str(base / "model.safetensors"))
    elif how == "tokenizer":
        t = json.loads((base / "tokenizer.json").read_text())
        vocab = t["model"]["vocab"]
        a, b = list(vocab)[10:12]
        vocab[a], vocab[b] = vocab[b], vocab[a]  # two tokens swap their ids
        (base / "tokenizer.json").write_text(json.dumps(t))
    elif how == "chat template":
        f = base / "chat_template.jinja"
        if f.is_file():
            f.write_text(f.read_text().replace("assistant", "helper"))
        else:
            c = json.loads((base / "tokenizer_config.json").read_text())
            c["chat_template"] = c["chat_template"].replace("assistant", "helper")
            (base / "tokenizer_config.json").write_text(json.dumps(c))


@pytest.mark.parametrize("how", ["noised weights", "replaced weights", "tokenizer", "chat template"])
def test_phase2_checkpoint_refuses_another_base_llm(trained, tmp_path, capsys, how):
    "The config.json is the same; the weights, the tokenizer or the chat template are not: predict refuses."
    r = tmp_path / "run"
    shutil.copytree(trained / "p2", r)
    _change_base(r / "base_llm", how)
    out = tmp_path / "out"
    refused(capsys, _predict(trained, r / "best", out), "another base LLM", r / "base_llm")
    assert not out.exists()


@pytest.mark.parametrize("command", ["export", "ladder"])
def test_export_and_ladder_refuse_another_base_llm(trained, tmp_path, capsys, command):
    r = tmp_path / "run"
    shutil.copytree(trained / "p2", r)
    _change_base(r / "base_llm", "noised weights")
    out = tmp_path / "out"
    if command == "export":
        rc = run("video", "export", r / "best", "--out", out)
    else:
        rc = run("video", "ladder", trained / "syn" / "lote", "--phase2", r, "--cache", trained / "cache", "--out", out)
    refused(capsys, rc, "another base LLM")
    assert not out.exists()


def test_checkpoint_without_base_identity_warns(trained, tmp_path, capsys):
    "A checkpoint written before the base LLM's identity was recorded still predicts, with a warning saying so."
    r = tmp_path / "run"
    shutil.copytree(trained / "p2", r)
    meta = json.loads((r / "best" / "checkpoint.json").read_text())
    assert len(meta["llm"]["identity"]["sha256"]) == 64 and "model.safetensors" in meta["llm"]["identity"]["files"]
    del meta["llm"]["identity"]
    (r / "best" / "checkpoint.json").write_text(json.dumps(meta))
    assert _predict(trained, r / "best", tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "weights and tokenizer are not verified" in err, err


def test_nan_weights_are_refused(trained, tmp_path, capsys):
    "NaN in model.safetensors (its sha256 updated in checkpoint.json) is refused on load, naming the tensor."
    r = tmp_path / "run"
    shutil.copytree(trained / "p2", r)
    f = r / "best" / "model.safetensors"
    w = load_file(str(f))
    name = sorted(w)[0]
    w[name] = w[name].clone()
    w[name].view(-1)[0] = float("nan")
    save_file(w, str(f))
    meta = json.loads((r / "best" / "checkpoint.json").read_text())
    meta["files"]["model.safetensors"] = sha256_file(f)
    (r / "best" / "checkpoint.json").write_text(json.dumps(meta))
    refused(capsys, _predict(trained, r / "best", tmp_path / "out"), "not finite", name, f)


def test_nan_adapter_weights_are_refused(trained, tmp_path, capsys):
    r = tmp_path / "run"
    shutil.copytree(trained / "p2", r)
    f = r / "best" / "adapter" / "adapter_model.safetensors"
    w = load_file(str(f))
    name = sorted(w)[0]
    w[name] = torch.full_like(w[name], float("inf"))
    save_file(w, str(f))
    meta = json.loads((r / "best" / "checkpoint.json").read_text())
    meta["files"]["adapter/adapter_model.safetensors"] = sha256_file(f)
    (r / "best" / "checkpoint.json").write_text(json.dumps(meta))
    refused(capsys, run("video", "export", r / "best", "--out", tmp_path / "out"), "not finite", name)


# ---------------------------------------------------------------- one training per run folder


@pytest.mark.parametrize("kind", ["phase1", "phase2"])
def test_second_training_on_one_run_folder_is_refused(trained, tmp_path, cli, kind):
    "While another process trains into --out (it holds the folder's lock), a second training refuses at once."
    out = tmp_path / "run"
    with folder_lock(out):
        r = cli("video", kind, trained / "syn" / "lote", "--out", out, "--cache", tmp_path / "cache", "--epochs", 1)
    refused_cli(r, out, "another process")
    assert not out.exists() and not (tmp_path / "cache").exists()  # refused before any work


@pytest.mark.parametrize("kind", ["link", "user folder"])
def test_training_folder_must_be_ours(trained, tmp_path, capsys, kind):
    "A link, or a folder with a run.json this tool did not make, is refused before any feature is encoded."
    out, target = tmp_path / "run", tmp_path / "elsewhere"
    target.mkdir()
    if kind == "link":
        out.symlink_to(target)
    else:
        out.mkdir()
        (out / "run.json").write_text("{}")
        (out / "notes.txt").write_text("mine")
    rc = run("video", "phase1", trained / "syn" / "lote", "--out", out, "--cache", tmp_path / "cache", "--epochs", 1)
    refused(capsys, rc, out)
    assert not (tmp_path / "cache").exists() and not any(target.iterdir())


# ---------------------------------------------------------------- import


def _video(path: Path, seconds: int = 2, fps: int = 8):
    frames = render_frames([("circle", (240, 240, 240), LOTE_MOTION["Walking"])], "forest", seconds * fps, 32)
    write_mp4(path, frames, fps=fps)
    return path


def _csv(path: Path, rows: list, header: str = "video,start,end,label,split") -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def _import(ann, videos, out, *flags, fmt="csv"):
    return run("video", "import", ann, "--format", fmt, "--videos", videos, "--out", out, *flags)


def test_video_link_out_of_the_videos_folder(tmp_path, capsys):
    "videos/b.mp4 links to a file outside --videos: refused, naming the file; --skip-bad leaves it out and says why."
    v = tmp_path / "videos"
    _video(v / "a.mp4")
    _video(tmp_path / "secret" / "s.mp4")
    (v / "b.mp4").symlink_to(tmp_path / "secret" / "s.mp4")
    ann = _csv(tmp_path / "a.csv", ["a,0,1,Walking,train", "b,0,1,Walking,test"])
    refused(capsys, _import(ann, v, tmp_path / "ds"), "outside", v / "b.mp4")
    assert not (tmp_path / "ds").exists()
    assert _import(ann, v, tmp_path / "ds", "--skip-bad") == 0
    rep = json.loads((tmp_path / "ds" / "import_report.json").read_text())
    assert rep["rows"] == 1 and len(rep["skipped"]) == 1 and "outside" in rep["skipped"][0]["reason"]
    assert all("secret" not in c.video for c in load_dataset(tmp_path / "ds").clips)


@pytest.mark.parametrize("alias", ["extension", "link"])
def test_one_file_in_two_splits(tmp_path, capsys, alias):
    "`v1` and `v1.mp4` (or a link to v1.mp4) are one file: it may not be in train and in test."
    v = tmp_path / "videos"
    _video(v / "v1.mp4")
    _video(v / "v2.mp4")
    other = "v1.mp4"
    if alias == "link":
        (v / "copy.mp4").symlink_to(v / "v1.mp4")
        other = "copy"
    ann = _csv(tmp_path / "a.csv", ["v1,0,1,Walking,train", "v2,0,1,Walking,train", f"{other},1,2,Walking,test"])
    refused(capsys, _import(ann, v, tmp_path / "ds"), "two splits", "v1.mp4")
    assert _import(ann, v, tmp_path / "ds", "--skip-bad") == 0
    rep = json.loads((tmp_path / "ds" / "import_report.json").read_text())
    assert rep["rows"] == 2 and rep["splits"]["test"] == 0 and "two splits" in rep["skipped"][0]["reason"]


def test_hand_written_manifest_with_one_file_in_two_splits(tmp_path, capsys):
    "A manifest written by hand is held to the import's rule when training reads it: a link is the file it names."
    d = tmp_path / "ds"
    _video(d / "v1.mp4")
    (d / "alias.mp4").symlink_to(d / "v1.mp4")
    (d / "label_map.json").write_text(json.dumps({"Walking": "walking"}))
    row = dict(id="c1", video="v1.mp4", labels=["Walking"], split="train")
    rows = [row, {**row, "id": "c2", "video": "alias.mp4", "split": "test"}]
    (d / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rc = run("video", "phase1", d, "--out", tmp_path / "p1", "--cache", tmp_path / "cache", "--epochs", 1)
    refused(capsys, rc, "manifest.jsonl:2", "field 'split'", "two splits")
    assert not (tmp_path / "p1").exists()


def test_duplicate_json_keys_are_refused(tmp_path, capsys):
    "A second `cam0` entry would silently replace the first one's annotations."
    v = tmp_path / "videos"
    _video(v / "cam0.mp4")

    def entry(label):
        return json.dumps({"subset": "training", "annotations": [{"segment": [0, 1], "label": label}]})

    ann = tmp_path / "a.json"
    ann.write_text(f'{{"database": {{"cam0": {entry("Walking")}, "cam0": {entry("Resting")}}}}}')
    refused(capsys, _import(ann, v, tmp_path / "ds", fmt="activitynet"), ann, "duplicate key", "cam0")
    lm = tmp_path / "map.json"
    lm.write_text('{"Walking": "walking", "Walking": "strolling"}')
    ann.write_text(f'{{"database": {{"cam0": {entry("Walking")}}}}}')
    refused(capsys, _import(ann, v, tmp_path / "ds", "--label-map", lm, fmt="activitynet"), lm, "Walking")


def test_duplicate_csv_column_is_refused(tmp_path, capsys):
    v = tmp_path / "videos"
    _video(v / "a.mp4")
    ann = _csv(tmp_path / "a.csv", ["a,0,1,Walking,train,Resting"], header="video,start,end,label,split,label")
    refused(capsys, _import(ann, v, tmp_path / "ds"), ann, "label", "twice")


def test_header_only_csv_says_it_has_no_rows(tmp_path, capsys):
    v = tmp_path / "videos"
    _video(v / "a.mp4")
    ann = _csv(tmp_path / "a.csv", [])
    line = refused(capsys, _import(ann, v, tmp_path / "ds"), ann, "no rows")
    assert "missing" not in line


def test_labels_differing_only_in_case_are_refused(tmp_path, capsys):
    "`Feeding` and `feeding` are one label to the scorer: refused where the label map is read, not after training."
    v = tmp_path / "videos"
    _video(v / "a.mp4")
    lm = tmp_path / "map.json"
    lm.write_text(json.dumps({"Feeding": "eating", "feeding": "grazing"}))
    ann = _csv(tmp_path / "a.csv", ["a,0,1,Feeding,train", "a,1,2,feeding,train"])
    refused(capsys, _import(ann, v, tmp_path / "ds", "--label-map", lm), lm, "feeding", "Feeding")
    assert _import(ann, v, tmp_path / "ds", "--label-map", lm, "--skip-bad") == 2  # no rows are at fault
    capsys.readouterr()


# ---------------------------------------------------------------- durations and cached features


def _overstated_mkv(path: Path, seconds: float = 1e9) -> Path:
    "A 5-second mkv whose header claims `seconds` (its Segment Duration element rewritten)."
    _video(path, seconds=5)
    b = bytearray(path.read_bytes())
    i = b.find(b"\x44\x89\x88")  # Duration, an 8-byte float in milliseconds (TimecodeScale 1 ms)
    assert i > 0
    b[i + 3 : i + 11] = struct.pack(">d", seconds * 1000)
    path.write_bytes(bytes(b))
    return path


def test_overstated_duration_is_not_trusted_at_import(tmp_path, capsys):
    v = tmp_path / "videos"
    _overstated_mkv(v / "liar.mkv")
    _video(v / "ok.mp4")
    ann = _csv(tmp_path / "a.csv", ["liar,100,5000,Walking,train", "ok,0,1,Walking,train"])
    refused(capsys, _import(ann, v, tmp_path / "ds"), "liar", "ends after the video (5.000 s)")
    assert _import(ann, v, tmp_path / "ds", "--skip-bad") == 0
    assert json.loads((tmp_path / "ds" / "import_report.json").read_text())["rows"] == 1


def test_segment_past_the_last_frame_is_never_encoded(tmp_path, capsys):
    "A manifest segment [100, 200] of a 5-second file that claims 1e9 s: refused naming the video and the time."
    f = _overstated_mkv(tmp_path / "liar.mkv")
    with pytest.raises(UserError, match=r"no frame at 112\.500 s .* last frame ends at 5\.000 s") as e:
        decode_clip(f, 4, 100.0, 200.0)
    assert "liar.mkv" in str(e.value)
    frames, info = decode_clip(f, 4, 1.0, 4.0)  # a segment inside the video is fine
    assert frames.shape[0] == 4
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "label_map.json").write_text(json.dumps({"Walking": "walking"}))
    rows = [
        {"id": "bad", "video": str(f), "start": 100.0, "end": 200.0, "labels": ["Walking"], "split": "train"},
        {"id": "good", "video": str(f), "start": 0.0, "end": 4.0, "labels": ["Walking"], "split": "train"},
    ]
    (ds / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    refused(capsys, run("video", "features", ds, "--cache", tmp_path / "cache"), "bad", "last frame")
    rep = tmp_path / "rep.json"
    assert run("video", "features", ds, "--cache", tmp_path / "cache", "--skip-bad", "--report", rep) == 0
    r = json.loads(rep.read_text())["datasets"][str(ds)]
    assert r["encoded"] == 1 and [s["id"] for s in r["skipped"]] == ["bad"]


@pytest.mark.parametrize("damage", ["shape", "dtype", "nan", "not npy"])
def test_damaged_cached_features_are_encoded_again(trained, tmp_path, damage):
    "A cached .npy of the wrong shape or dtype, with NaN, or unreadable is never used: the clip is encoded again."
    cache = tmp_path / "cache"
    shutil.copytree(trained / "cache", cache)
    files = sorted(cache.rglob("*.npy"))
    good = np.load(files[0])
    if damage == "shape":
        np.save(files[0], good[:, :3])
    elif damage == "dtype":
        np.save(files[0], good.astype(np.float64))
    elif damage == "nan":
        np.save(files[0], np.full_like(good, np.nan))
    else:
        files[0].write_bytes(b"not an array")
    rep = tmp_path / "rep.json"
    assert run("video", "features", trained / "syn" / "lote", "--cache", cache, "--report", rep) == 0
    r = json.loads(rep.read_text())["datasets"][str(trained / "syn" / "lote")]
    assert r["encoded"] == 1 and r["cached"] == len(files) - 1
    np.testing.assert_allclose(np.load(files[0]), good, rtol=1e-5, atol=1e-5)


def test_label_map_with_case_duplicates_is_refused_on_load(tmp_path):
    "A hand-edited label_map.json of a dataset folder is checked the same way when the dataset is read."
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "label_map.json").write_text(json.dumps({"Feeding": "eating", "feeding": "grazing"}))
    (ds / "manifest.jsonl").write_text("")
    with pytest.raises(UserError, match="Feeding"):
        load_dataset(ds, check_files=False)
    assert os.path.exists(ds / "label_map.json")
