"""Sizes and odd-but-legal inputs: every size a user types is checked before work (and named), a sampling rate below
one frame per video still samples, segments under a millisecond apart keep their own ids, a dataset without a val
split is refused before any model loads, and what a run cannot learn from (one val clip, a class no train clip has)
is said, not hidden."""

import json

import pytest
from conftest import one_line

from vtreetrm.cli import main
from vtreetrm.video.synthetic import LOTE_MOTION, SyntheticConfig, make_synthetic, render_frames, write_mp4


def run(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    o = capsys.readouterr()
    return rc, o.out, o.err


def _video(path, seconds=2, fps=8):
    write_mp4(
        path, render_frames([("circle", (240, 240, 240), LOTE_MOTION["Walking"])], "forest", seconds * fps, 32), fps=fps
    )
    return path


def test_build_trees_samples_a_rate_below_one_frame_per_video(tmp_path, capsys):
    _video(tmp_path / "videos" / "v1.mp4")
    rc, _, err = run(capsys, "harness", "build-trees", "--videos", tmp_path / "videos", "--out", tmp_path / "trees",
                     "--captioner", "simulated", "--fps", "0.0001", "--quiet")  # fmt: skip
    assert rc == 0, err
    tree = json.loads((tmp_path / "trees" / "v1.json").read_text())
    assert "no decodable frame" not in err and tree, err


def test_segments_under_a_millisecond_apart_keep_their_own_ids(tmp_path, capsys):
    _video(tmp_path / "videos" / "a.mp4")
    db = {"a": {"duration": 2.0, "subset": "training", "annotations": [
        {"segment": [0.5, 1.5], "label": "Walking"}, {"segment": [0.5, 1.5004], "label": "Resting"},
        {"segment": [0.5, 1.5008], "label": "Feeding"}]}}  # fmt: skip
    (tmp_path / "anet.json").write_text(json.dumps({"database": db}))
    rc, _, err = run(capsys, "video", "import", tmp_path / "anet.json", "--videos", tmp_path / "videos",
                     "--out", tmp_path / "ds")  # fmt: skip
    assert rc == 0, err
    ids = [json.loads(l)["id"] for l in (tmp_path / "ds" / "manifest.jsonl").read_text().splitlines()]
    assert ids == ["a@0.500-1.500", "a@0.500-1.5004", "a@0.500-1.5008"], ids


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    d = tmp_path_factory.mktemp("bounds") / "syn"
    cfg = SyntheticConfig(head_count=6, min_count=4, mammalnet_count=2, multi_label=1, n_short=0)
    make_synthetic(d, cfg, datasets=("lote",), progress=False)
    return d / "lote"


def _with_splits(ds, tmp_path, change):
    "A copy of dataset `ds` whose manifest rows `change(rows)` rewrote."
    import shutil

    out = tmp_path / "ds"
    shutil.copytree(ds, out)
    rows = [json.loads(l) for l in (out / "manifest.jsonl").read_text().splitlines()]
    (out / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in change(rows)))
    return out


TINY = ["--epochs", 1, "--max-steps", 1, "--num-queries", 4, "--max-new-tokens", 4, "--threads", 1]


def test_phase2_without_a_val_split_is_refused_before_any_model_loads(syn, tmp_path, capsys):
    ds = _with_splits(
        syn, tmp_path, lambda rows: [{**r, "split": "train" if r["split"] == "val" else r["split"]} for r in rows]
    )
    # the tiny LLM's pretraining (200 steps by default) would come first; the refusal comes before it and the features
    rc, _, err = run(capsys, "video", "phase2", ds, "--out", tmp_path / "run", "--cache", tmp_path / "cache", *TINY)
    one_line(err, rc, "manifest.jsonl", "none in val")
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


def test_a_class_no_train_clip_has_is_noted(syn, tmp_path, capsys):
    def rename(rows):  # one test clip's label becomes a class of its own
        i = next(i for i, r in enumerate(rows) if r["split"] == "test")
        rows[i] = {**rows[i], "labels": ["Zebra-crossing"]}
        return rows

    ds = _with_splits(syn, tmp_path, rename)
    lm = json.loads((ds / "label_map.json").read_text())
    (ds / "label_map.json").write_text(json.dumps({**lm, "Zebra-crossing": "zebra crossing"}))
    rc, _, err = run(capsys, "video", "phase2", ds, "--out", tmp_path / "run", "--cache", tmp_path / "cache",
                     "--llm-pretrain-steps", 0, *TINY)  # fmt: skip
    assert rc == 0, err
    assert "note: 1 class(es) have no train clip ('Zebra-crossing')" in err, err


def test_one_val_clip_is_noted_in_phase1(syn, tmp_path, capsys):
    def one_val(rows):
        vals = [i for i, r in enumerate(rows) if r["split"] == "val"]
        return [{**r, "split": "train"} if i in vals[1:] else r for i, r in enumerate(rows)]

    ds = _with_splits(syn, tmp_path, one_val)
    rc, _, err = run(
        capsys, "video", "phase1", ds, "--out", tmp_path / "p1", "--epochs", 1, "--cache", tmp_path / "cache"
    )
    assert rc == 0, err
    assert "the val split holds 1 clip" in err, err


def test_features_report_never_writes_over_a_users_file(syn, tmp_path, capsys):
    mine = tmp_path / "notes.json"
    mine.write_text('{"mine": true}\n')
    rc, _, err = run(capsys, "video", "features", syn, "--cache", tmp_path / "cache", "--report", mine)
    one_line(err, rc, mine, "did not write")
    assert mine.read_text() == '{"mine": true}\n' and not (tmp_path / "cache").exists()
