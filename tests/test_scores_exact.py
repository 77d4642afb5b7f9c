"""The scores of `metrics.json`, computed in this process on random label sets, against scikit-learn's: every
per-class, macro and sample-level figure, Top1 over the single-label rows, and the counts of unparseable and empty
answers (the gold and predicted lists as the parser gives them: repeats, an order, None for no answer tag)."""

import numpy as np
import pytest
from sklearn.metrics import f1_score, precision_recall_fscore_support
from sklearn.preprocessing import MultiLabelBinarizer

from vtreetrm.eval.metrics import compute_metrics, first_predictions, metrics_from_pairs
from vtreetrm.utils import UserError

LABELS = ["eat", "groom", "run", "sleep", "swim", "walk", "yawn"]


def _labels(rng, most: int) -> list:
    return [str(x) for x in rng.choice(LABELS, size=int(rng.integers(1, most + 1)), replace=False)]


def _case(rng, n: int, most: int, answered=LABELS) -> tuple[list, list]:
    """`n` rows of gold lists (1 to `most` labels) and answers: None (no tag), [] (a tag, nothing in it), or labels
    drawn from `answered` (fewer labels than the gold's: classes never predicted)."""
    gold = [_labels(rng, most) for _ in range(n)]
    pred = []
    for _ in range(n):
        r = rng.random()
        pred.append(None if r < 0.1 else [] if r < 0.2 else [x for x in _labels(rng, most) if x in answered])
    if most > 1:  # a label given twice counts once, on both sides
        gold[0], pred[1] = gold[0] + gold[0][:1], (pred[1] or ["eat"]) * 2
    return gold, pred


def _sklearn(gold: list, pred: list) -> dict:
    classes = sorted({x for g in gold for x in g} | {x for p in pred if p for x in p})
    mlb = MultiLabelBinarizer(classes=classes)
    Y, P = mlb.fit_transform(gold), mlb.transform([p or [] for p in pred])
    supported = [k for k in range(len(classes)) if Y[:, k].any()]
    prec, rec, f1, sup = precision_recall_fscore_support(Y, P, average=None, zero_division=0)
    sp, sr, sf, _ = precision_recall_fscore_support(Y, P, average="samples", zero_division=0)
    single = [i for i, g in enumerate(gold) if len(set(g)) == 1]
    top1 = np.mean([bool(pred[i]) and pred[i][0] == gold[i][0] for i in single]) if single else None
    return {
        "per_class": {
            c: {"precision": prec[k], "recall": rec[k], "f1": f1[k], "support": sup[k]} for k, c in enumerate(classes)
        },  # fmt: skip
        "macro_f1": f1_score(Y, P, average="macro", labels=supported, zero_division=0),
        "samples": (sp, sr, sf),
        "top1": top1,
        "single": len(single),
    }


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("most", [1, 3])
def test_every_score_is_scikit_learns(seed, most):
    rng = np.random.default_rng(seed)
    # small sets too (a class predicted once), and half the seeds never answer two of the labels
    n = int(rng.integers(2, 8) if seed % 2 else rng.integers(8, 60))
    gold, pred = _case(rng, n, most, LABELS[:-2] if seed % 4 < 2 else LABELS)
    m, want = compute_metrics(gold, pred), _sklearn(gold, pred)
    assert m["macro_f1"] == pytest.approx(want["macro_f1"], abs=1e-12)
    assert (m["sample_precision"], m["sample_recall"], m["sample_f1"]) == pytest.approx(want["samples"], abs=1e-12)
    assert m["num_single_label"] == want["single"] and m["num_samples"] == len(gold)
    if want["top1"] is None:
        assert m["top1_accuracy_single_label"] is None
    else:
        assert m["top1_accuracy_single_label"] == pytest.approx(want["top1"], abs=1e-12)
    assert m["per_class"].keys() == want["per_class"].keys() and list(m["per_class"]) == sorted(m["per_class"])
    for c, w in want["per_class"].items():
        got = m["per_class"][c]
        assert got["support"] == w["support"] and isinstance(got["support"], int), c
        assert (got["precision"], got["recall"], got["f1"]) == pytest.approx(
            (w["precision"], w["recall"], w["f1"]), abs=1e-12
        ), c
        for k in ("precision", "recall", "f1"):  # a class never predicted (or never gold) scores 0 exactly
            assert w[k] != 0 or got[k] == 0.0, (c, k, got)
    assert m["num_unparseable"] == sum(p is None for p in pred)
    assert m["num_empty_prediction"] == sum(p == [] for p in pred)
    assert m["label_space"] == sorted(want["per_class"])


def test_candidates_widen_the_label_space_but_no_score():
    gold, pred = [["eat"], ["run"]], [["eat"], ["walk"]]
    a, b = compute_metrics(gold, pred), compute_metrics(gold, pred, candidates=[["eat", "yawn"], ["run", "swim"]])
    assert b["label_space"] == ["eat", "run", "swim", "walk", "yawn"] and a["label_space"] == ["eat", "run", "walk"]
    assert b["per_class"]["yawn"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}
    assert (
        (a["macro_f1"], a["top1_accuracy_single_label"])
        == (b["macro_f1"], b["top1_accuracy_single_label"])
        == (
            0.5,
            0.5,
        )
    )


def test_the_first_answer_decides_top1_and_later_ones_only_the_set_scores():
    m = compute_metrics([["eat"], ["eat"]], [["run", "eat"], ["eat", "run"]])
    assert m["top1_accuracy_single_label"] == 0.5 and m["sample_recall"] == 1.0 and m["sample_precision"] == 0.5
    # rows with two gold labels are no Top1 rows; none at all: no Top1
    m = compute_metrics([["eat", "run"]], [["eat"]])
    assert m["top1_accuracy_single_label"] is None and m["num_single_label"] == 0
    assert m["sample_recall"] == 0.5 and m["sample_precision"] == 1.0 and m["sample_f1"] == pytest.approx(2 / 3)


def test_first_predictions_take_each_rows_first_pair():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 12))
        rows = np.sort(rng.integers(0, n, size=int(rng.integers(0, 20))))
        cols = rng.integers(0, 5, size=len(rows))
        want = np.full(n, -1)
        for r, c in zip(rows[::-1], cols[::-1]):  # the first pair of a row is written last
            want[r] = c
        assert first_predictions(n, rows, cols).tolist() == want.tolist()


def test_pairs_score_as_their_lists_and_no_rows_are_refused():
    gold, pred = [["eat"], ["run", "walk"], ["walk"]], [["eat", "run"], None, []]
    labels = ["eat", "run", "walk"]
    m = metrics_from_pairs(3, labels, [0, 1, 1, 2], [0, 1, 2, 2], [0, 0], [0, 1], [False, True, False])
    assert m == compute_metrics(gold, pred)
    with pytest.raises(UserError, match="no samples to score"):
        metrics_from_pairs(0, labels, [], [], [], [])
    with pytest.raises(ValueError, match="2 predictions for 3 gold rows"):
        compute_metrics(gold, pred[:2])


def test_no_answer_at_all_scores_zero_on_every_path():
    m = compute_metrics([["eat", "run"], ["walk"]], [None, None])  # the general path, with no predicted pair
    assert (m["macro_f1"], m["sample_f1"], m["num_unparseable"]) == (0.0, 0.0, 2)
    m = compute_metrics([["eat"], ["walk"]], [[], None])  # the single-label path
    assert (m["macro_f1"], m["top1_accuracy_single_label"], m["num_empty_prediction"]) == (0.0, 0.0, 1)
    assert first_predictions(3, [], []).tolist() == [-1, -1, -1]
    assert first_predictions(3, [0, 0, 2], [4, 1, 0]).tolist() == [4, -1, 0]


def _verify(tmp_path, **m) -> dict:
    "verify_metrics on `m` as the metrics.json of tmp_path."
    from vtreetrm.eval.metrics import verify_metrics

    return verify_metrics(tmp_path / "metrics.json", m)


def test_a_metrics_file_is_held_against_its_own_per_class_table(tmp_path):
    row = {"f1": 0.5, "recall": 0.5, "support": 2}
    ok = {"per_class": {"a": row, "b": {"f1": 0.0, "recall": 0.0, "support": 0}}, "macro_f1": 0.5,
          "top1_accuracy_single_label": 0.5, "num_single_label": 2}  # fmt: skip
    assert _verify(tmp_path, **ok)["macro_f1"] == 0.5  # no provenance: nothing to compare the predictions with
    for other in ({"per_class": [row]}, {"per_class": {"a": {"f1": 0.5}}}, {"per_class": {"a": {**row, "f1": "x"}}},
                  {"per_class": {}}):  # fmt: skip
        m = {**ok, **other, "macro_f1": 0.9}
        assert _verify(tmp_path, **m) == m  # no table to hold it against: as it is
    with pytest.raises(UserError, match="0.9 is not the mean F1 of the supported classes"):
        _verify(tmp_path, **{**ok, "macro_f1": 0.9})
    edge = {"per_class": {"a": {"f1": 0.0, "recall": 0.0, "support": 1}}, "macro_f1": 1e-6,
            "top1_accuracy_single_label": 1e-6, "num_single_label": 1}  # fmt: skip
    assert _verify(tmp_path, **edge) == edge  # within 1e-6 of the table, both ways: accepted
    with pytest.raises(UserError, match="means 2 right answers of 2, but per_class counts 1 true positives"):
        _verify(tmp_path, **{**ok, "top1_accuracy_single_label": 1.0})


def test_a_metrics_file_is_stale_once_its_predictions_change(tmp_path):
    from vtreetrm.utils import sha256_file

    (tmp_path / "predictions.jsonl").write_text('{"id": 1}\n')
    m = {"provenance": {"predictions_sha256": sha256_file(tmp_path / "predictions.jsonl")}}
    assert _verify(tmp_path, **m) == m
    (tmp_path / "predictions.jsonl").write_text('{"id": 2}\n')
    with pytest.raises(UserError, match="stale: predictions.jsonl changed after it was scored") as e:
        _verify(tmp_path, **m)
    assert e.value.field == "provenance.predictions_sha256"


def test_rows_without_gold_and_sets_without_a_supported_class():
    m = compute_metrics([["eat"], []], [["eat"], ["run"]])  # the second row has no gold label
    assert m["sample_recall"] == 0.5 and m["sample_f1"] == 0.5 and m["sample_precision"] == 0.5
    m = metrics_from_pairs(3, ["eat", "run"], [0], [0], [0, 1], [0, 1])  # the last row has neither
    assert m["sample_recall"] == pytest.approx(1 / 3) and m["num_unparseable"] == 0 and m["num_empty_prediction"] == 1
    assert m["sample_f1"] == m["sample_precision"] == pytest.approx(1 / 3)  # 0, not 0/0, for the row with neither
    m = metrics_from_pairs(2, ["eat"], [], [], [0], [0], [False, True])  # no gold at all: no class is supported
    assert m["macro_f1"] == 0.0 and m["top1_accuracy_single_label"] is None and m["num_unparseable"] == 1
    m = metrics_from_pairs(2, ["eat"], [0, 1], [0, 0], [], [])  # no predicted pair, given as lists
    assert m["macro_f1"] == 0.0 and m["num_empty_prediction"] == 2


def test_the_single_label_path_reads_empty_and_missing_answers():
    m = compute_metrics([["eat"], ["walk"]], [[], ["walk"]])  # a tag with nothing in it, on the single-label path
    assert m["top1_accuracy_single_label"] == 0.5 and m["num_empty_prediction"] == 1 and m["num_unparseable"] == 0
    assert m["per_class"]["walk"]["precision"] == 1.0 and m["per_class"]["eat"]["recall"] == 0.0
    m = compute_metrics([["eat"]], [None])
    assert m["top1_accuracy_single_label"] == 0.0 and m["num_unparseable"] == 1 and m["num_empty_prediction"] == 0
