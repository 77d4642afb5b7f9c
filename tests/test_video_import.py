"""Long videos with temporal annotations, end to end through the CLI: import (ActivityNet layout and CSV), segment
features, a 2-epoch Phase-1 that skips the branches nobody annotated, a Phase-2 run and its predictions."""

import json

import numpy as np
import pytest
import torch

from vtreetrm.cli import main
from vtreetrm.video.labels import LOTE_SIMPLE, load_dataset
from vtreetrm.video.synthetic import LOTE_MOTION, render_frames, write_mp4

torch.set_num_threads(1)
LABELS = ["Feeding", "Resting", "Walking", "Running"]


def run(*args):
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    "Six 8-second videos, each four 2-second behaviours in a row, annotated per segment (one span with two labels)."
    d = tmp_path_factory.mktemp("long")
    rng = np.random.default_rng(0)
    db = {}
    for v in range(6):
        labs = [LABELS[(v + k) % 4] for k in range(4)]
        frames = np.concatenate(
            [render_frames([("circle", (240, 240, 240), LOTE_MOTION[l])], "forest", 16, 32, rng) for l in labs]
        )
        write_mp4(d / "videos" / f"cam{v}.mp4", frames, fps=8)
        anns = [{"segment": [2.0 * k, 2.0 * k + 2.0], "label": l} for k, l in enumerate(labs)]
        if v == 0:
            anns.append({"segment": [0.0, 2.0], "label": "Smelling"})
        db[f"cam{v}"] = {
            "duration": 8.0,
            "subset": "training" if v < 4 else "validation" if v == 4 else "testing",
            "annotations": anns,
        }
    (d / "anet.json").write_text(json.dumps({"database": db}))
    return d


def test_import_train_predict(annotated, tmp_path, capsys):
    d = annotated
    assert (
        run("video", "import", d / "anet.json", "--format", "lote", "--videos", d / "videos", "--out", tmp_path / "ds")
        == 0
    )
    ds = load_dataset(tmp_path / "ds")
    assert len(ds.clips) == 24 and ds.clips[0].labels == ["Feeding", "Smelling"] and ds.clips[0].end == 2.0
    assert json.loads((tmp_path / "ds" / "label_map.json").read_text()) == LOTE_SIMPLE  # the seed's table by default
    assert {c.split for c in ds.clips} == {"train", "val", "test"} and all(c.species is None for c in ds.clips)
    cache = tmp_path / "cache"
    assert (
        run(
            "video", "phase1", tmp_path / "ds", "--out", tmp_path / "p1", "--cache", cache, "--epochs", 2, "--width", 32
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "not trained: species, environment" in out
    m1 = json.loads((tmp_path / "p1" / "metrics.json").read_text())
    assert m1["branches_trained"] == ["behaviour"] and m1["features"]["ds"]["encoded"] == 24
    assert (
        run(
            "video",
            "phase2",
            tmp_path / "ds",
            "--out",
            tmp_path / "p2",
            "--phase1",
            tmp_path / "p1" / "best",
            "--cache",
            cache,
            "--epochs",
            2,
            "--num-queries",
            4,
            "--max-new-tokens",
            24,
            "--threads",
            1,
        )
        == 0
    )
    rows = [json.loads(l) for l in (tmp_path / "p2" / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["species"] is None for r in rows)
    assert json.loads((tmp_path / "p2" / "metrics.json").read_text())["num_samples"] == 4
    # the learnability ladder on the same split: probes on the features and on Phase-1, the Phase-2 cls head and answer
    assert (
        run(
            "video",
            "ladder",
            tmp_path / "ds",
            "--phase1",
            tmp_path / "p1" / "best",
            "--phase2",
            tmp_path / "p2" / "best",
            "--cache",
            cache,
            "--out",
            tmp_path / "ladder.json",
        )
        == 0
    )
    assert "trained without --cls-head" in capsys.readouterr().out
    lad = json.loads((tmp_path / "ladder.json").read_text())
    assert [g["stage"].split(":")[0] for g in lad["rungs"]] == [
        "linear probe",
        "linear probe",
        "Phase-2 cls head",
        "Phase-2 generated answer",
    ]
    assert lad["rungs"][2]["top1"] is None and lad["chance_top1"] == pytest.approx(1 / 21)
    # the imported segments differ in what they show: a probe on the frozen features beats the majority class
    assert lad["rungs"][0]["top1"] > lad["majority_top1"]  # measured: 1.0 against 0.25 (4 test segments)
    # the answer rung runs the best checkpoint on the split: the run's own test score (RUN works as well as RUN/best)
    assert (
        lad["rungs"][3]["top1"]
        == json.loads((tmp_path / "p2" / "metrics.json").read_text())["top1_accuracy_single_label"]
    )
    assert run("video", "ladder", tmp_path / "ds", "--phase2", tmp_path / "p2", "--cache", cache, "--frames", 4) == 2
    assert "do not match the checkpoint" in capsys.readouterr().err


def test_segment_features_are_cached_per_segment(annotated, tmp_path):
    """Two segments of one file get different features; the same segment read again is not re-encoded."""
    d = annotated
    (tmp_path / "a.csv").write_text(
        "video,start,end,label,split\ncam0,0,2,Feeding,train\ncam0,2,4,Resting,train\ncam1,0,2,Resting,val\n"
    )
    assert (
        run(
            "video", "import", tmp_path / "a.csv", "--format", "csv", "--videos", d / "videos", "--out", tmp_path / "ds"
        )
        == 0
    )
    from vtreetrm.video.config import FeatureSpec
    from vtreetrm.video.labels import load_dataset as ld
    from vtreetrm.video.phase1 import open_cache

    spec = FeatureSpec(tmp_path / "cache", "tiny", 8, 4)
    cache = open_cache(spec)
    feats, rep = cache.features_for(ld(tmp_path / "ds").clips, progress=False)
    assert rep["encoded"] == 3 and not np.allclose(*[feats[c.id] for c in ld(tmp_path / "ds").clips[:2]])
    _, rep2 = open_cache(spec).features_for(ld(tmp_path / "ds").clips, progress=False)
    assert rep2 == {**rep2, "encoded": 0, "cached": 3}


def test_a_hub_shaped_dinov2_encodes_through_its_processor(annotated, tmp_path, capsys):
    """A DINOv2 folder with the hub's preprocessor_config.json (random weights): 224 crops by default, --image-size
    changes the crop and the cache folder, so nothing stale is reused."""
    import transformers
    from transformers import Dinov2Config, Dinov2Model

    hub = tmp_path / "dinov2"
    Dinov2Model(
        Dinov2Config(
            hidden_size=32, num_hidden_layers=1, num_attention_heads=2, mlp_ratio=2, patch_size=14, image_size=518
        )
    ).save_pretrained(hub)
    transformers.BitImageProcessorPil(
        size={"shortest_edge": 256},
        crop_size={"height": 224, "width": 224},
        resample=3,
        image_mean=[0.485, 0.456, 0.406],
        image_std=[0.229, 0.224, 0.225],
    ).save_pretrained(hub)
    (tmp_path / "a.csv").write_text("video,start,end,label,split\ncam0,0,2,Feeding,train\ncam1,2,4,Resting,val\n")
    assert (
        run(
            "video",
            "import",
            tmp_path / "a.csv",
            "--format",
            "csv",
            "--videos",
            annotated / "videos",
            "--out",
            tmp_path / "ds",
        )
        == 0
    )
    for size, encoded in ((None, 2), (None, 0), (112, 2)):
        extra = ["--image-size", size] if size else []
        assert (
            run(
                "video",
                "features",
                tmp_path / "ds",
                "--cache",
                tmp_path / "cache",
                "--vision",
                hub,
                *extra,
                "--report",
                tmp_path / "r.json",
            )
            == 0
        )
        rep = json.loads((tmp_path / "r.json").read_text())
        assert rep["datasets"][str(tmp_path / "ds")]["encoded"] == encoded, (size, rep["datasets"])
    samplings = sorted(
        json.loads(p.read_text())["processor"]["crop_size"]["height"]
        for p in (tmp_path / "cache").rglob("sampling.json")
    )
    assert samplings == [112, 224]
