"""Numbers under attack: `eval metrics` on files that once scored wrong equals scikit-learn on the deduplicated,
snapped labels; mistakes that once scored silently are refused in one line; `analyze queries` keeps float64."""

import json

import numpy as np
import pytest
from safetensors.numpy import save_file
from sklearn.metrics import accuracy_score, f1_score
from sklearn.preprocessing import MultiLabelBinarizer

from vtreetrm.cli import main

TAG = "<predicted_actions>{}</predicted_actions>"
CANDS = ["Walking", "Sitting", "Eating"]
CASES = {  # name -> (rows of (gold, output), candidates, the labels scikit-learn scores: gold sets, predicted sets)
    "duplicate gold": (
        [(["Walking", "Walking"], TAG.format("Walking")), (["Sitting"], TAG.format("Walking"))],
        CANDS,
        [{"Walking"}, {"Sitting"}],
        [{"Walking"}, {"Walking"}],
    ),
    "gold case": (
        [(["Walking"], TAG.format("Walking")), (["walking"], TAG.format("walking"))],
        CANDS,
        [{"Walking"}, {"Walking"}],
        [{"Walking"}, {"Walking"}],
    ),
    "gold spacing": (
        [(["Walking "], TAG.format("Walking")), ([" sitting"], TAG.format("Sitting"))],
        CANDS,
        [{"Walking"}, {"Sitting"}],
        [{"Walking"}, {"Sitting"}],
    ),
    "nbsp in tag": (
        [
            (["Walking"], "<predicted_actions\u00a0>Walking</predicted_actions>"),
            (["Sitting"], "<predicted_actions\u3000>\u00a0Sitting\u2003,\u00a0</predicted_actions>"),
        ],
        CANDS,
        [{"Walking"}, {"Sitting"}],
        [{"Walking"}, {"Sitting"}],
    ),
    "repeated action": (
        [(["Walking"], TAG.format("walking, WALKING,\u00a0walking")), (["Sitting"], TAG.format("Eating"))],
        CANDS,
        [{"Walking"}, {"Sitting"}],
        [{"Walking"}, {"Eating"}],
    ),
}


def _write(d, rows, cands):
    d.mkdir(parents=True, exist_ok=True)
    (d / "predictions.jsonl").write_text(
        "".join(
            json.dumps({"id": i, "gold": g, "output": o, "candidates": cands}) + "\n" for i, (g, o) in enumerate(rows)
        )
    )
    return d


@pytest.mark.parametrize("name", list(CASES))
def test_metrics_equal_scikit_learn_on_deduplicated_snapped_labels(tmp_path, name):
    rows, cands, gold, pred = CASES[name]
    d = _write(tmp_path / "p", rows, cands)
    assert main(["eval", "metrics", str(d), "--quiet"]) == 0
    m = json.loads((d / "metrics.json").read_text())
    mlb = MultiLabelBinarizer(classes=sorted(set(cands))).fit([cands])
    Y, P = mlb.transform(gold), mlb.transform(pred)
    sup = Y.sum(0) > 0
    assert m["macro_f1"] == pytest.approx(f1_score(Y[:, sup], P[:, sup], average="macro", zero_division=0))
    single = [i for i, g in enumerate(gold) if len(g) == 1]
    assert m["top1_accuracy_single_label"] == pytest.approx(
        accuracy_score([next(iter(gold[i])) for i in single], [next(iter(pred[i])) for i in single])
    )
    assert sorted(m["label_space"]) == sorted(set(cands))


REFUSED = {
    "string candidates": ([(["Walking"], TAG.format("Walking"))], "Walking", "field 'candidates': expected a list"),
    "object candidates": (
        [(["Walking"], TAG.format("Walking"))],
        {"Walking": 1},
        "field 'candidates': expected a list",
    ),
    "two gold spellings": (
        [(["Walking"], TAG.format("Walking")), (["walking"], TAG.format("walking"))],
        None,
        "gold labels 'Walking' (line 1) and 'walking' differ only in case",
    ),
    "two candidate spellings": (
        [(["Walking"], TAG.format("Walking"))],
        ["Walking", "walking"],
        "candidates 'Walking' and 'walking'",
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_ambiguous_labels_are_refused_in_one_line(tmp_path, capsys, name):
    rows, cands, says = REFUSED[name]
    d = tmp_path / "p"
    d.mkdir()
    (d / "predictions.jsonl").write_text(
        "".join(
            json.dumps({"id": i, "gold": g, "output": o, **({} if cands is None else {"candidates": cands})}) + "\n"
            for i, (g, o) in enumerate(rows)
        )
    )
    assert main(["eval", "metrics", str(d), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert says in err and "predictions.jsonl" in err and len(err.splitlines()) == 1, err
    assert not (d / "metrics.json").exists()


def test_a_second_file_that_cannot_be_written_leaves_the_first_untouched(tmp_path, capsys):
    a = _write(tmp_path / "a", [(["Walking"], TAG.format("Walking"))], CANDS)
    b = _write(tmp_path / "b", [(["Walking"], TAG.format("Walking"))], CANDS)
    (b / "metrics.json").mkdir()
    assert main(["eval", "metrics", str(a), str(b), "--quiet"]) == 2
    assert "metrics.json" in capsys.readouterr().err and not (a / "metrics.json").exists()


@pytest.mark.parametrize("scale", [1e200, 1e-310])
def test_query_analysis_keeps_float64(tmp_path, scale):
    rng = np.random.default_rng(0)
    U, V = np.linalg.qr(rng.normal(size=(4, 4)))[0], np.linalg.qr(rng.normal(size=(6, 6)))[0][:4]
    q = U @ np.diag([4.0, 2, 1, 1]) @ V
    for name, k in (("ref", 1.0), ("scaled", scale)):
        save_file({"query_tokens": (q * k)[None]}, str(tmp_path / f"{name}.safetensors"))
        assert (
            main(
                [
                    "analyze",
                    "queries",
                    str(tmp_path / f"{name}.safetensors"),
                    "--out",
                    str(tmp_path / name),
                    "--no-plots",
                ]
            )
            == 0
        )
    ref, got = (json.loads((tmp_path / n / "summary.json").read_text())["checkpoints"][0] for n in ("ref", "scaled"))
    for key in ("effective_rank", "gini", "energy90_fraction", "mean_abs_cos"):
        assert got[key] == pytest.approx(ref[key], abs=1e-9), key
    assert got["effective_rank"] > 3
