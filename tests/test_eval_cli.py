"""`vtreetrm eval metrics` end to end: numbers equal scikit-learn's, bad input is refused cleanly."""

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score, precision_recall_fscore_support
from sklearn.preprocessing import MultiLabelBinarizer

LABELS = ["Feeding", "DrinkWater", "Smelling", "Urinating", "UrineSigning"]
SIMPLE = {
    "Feeding": "eating",
    "DrinkWater": "drinking",
    "Smelling": "sniffing",
    "Urinating": "peeing",
    "UrineSigning": "urine marking",
}


def write_run(d: Path, rows):
    d.mkdir(parents=True, exist_ok=True)
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def random_rows(rng, n, multi=0.0, order="actions_first", simple=False):
    rows = []
    for i in range(n):
        g = [LABELS[int(rng.integers(5))]]
        if rng.random() < multi:
            g.append(rng.choice([l for l in LABELS if l != g[0]]))
        p = g[0] if rng.random() < 0.6 else LABELS[int(rng.integers(5))]
        name = SIMPLE[p] if simple else p
        tag = f"<predicted_actions>{name.upper() if rng.random() < 0.2 else name}</predicted_actions>"
        out = f"{tag} It bends down." if order == "actions_first" else f"It bends down.\n{tag}"
        rows.append({"id": i, "gold": g, "output": out, "candidates": [SIMPLE[l] if simple else l for l in LABELS]})
    return rows


def test_single_label_equals_sklearn(tmp_path, cli):
    rng = np.random.default_rng(0)
    rows = random_rows(rng, 500, order="analysis_first")
    d = write_run(tmp_path / "eval_outputs" / "run1", rows)
    r = cli("eval", "metrics", tmp_path / "eval_outputs", check=0)
    assert "scored 1 file(s)" in r.stdout
    m = json.loads((d / "metrics.json").read_text())
    y = [r["gold"][0] for r in rows]
    yhat = [r["output"].split(">")[1].split("<")[0] for r in rows]
    yhat = [next(l for l in LABELS if l.lower() == p.lower()) for p in yhat]
    assert m["top1_accuracy_single_label"] == pytest.approx(accuracy_score(y, yhat))
    assert m["macro_f1"] == pytest.approx(f1_score(y, yhat, labels=sorted(set(y)), average="macro", zero_division=0))
    assert m["num_samples"] == 500 and m["num_unparseable"] == 0
    assert m["provenance"]["predictions_sha256"]


def test_multilabel_and_label_map(tmp_path, cli):
    rng = np.random.default_rng(1)
    rows = random_rows(rng, 400, multi=0.3, simple=True)
    rows[3]["output"] = "no tag at all"
    rows[4]["output"] = "I think <predicted_actions>eating; Drinking"  # cut off, two actions
    d = write_run(tmp_path / "run", rows)
    (tmp_path / "map.json").write_text(json.dumps(SIMPLE))
    cli("eval", "metrics", d / "predictions.jsonl", "--label-map", tmp_path / "map.json", check=0)
    m = json.loads((d / "metrics.json").read_text())
    gold = [[SIMPLE[g] for g in r["gold"]] for r in rows]
    pred = []
    for r in rows:
        body = (
            r["output"].split("<predicted_actions>")[1].split("</predicted_actions>")[0]
            if "<predicted_actions>" in r["output"]
            else ""
        )
        pred.append([p.strip().lower() for p in body.replace(";", ",").split(",") if p.strip()])
    mlb = MultiLabelBinarizer(classes=sorted(SIMPLE.values())).fit([])
    Y, P = mlb.transform(gold), mlb.transform(pred)
    assert m["macro_f1"] == pytest.approx(f1_score(Y, P, average="macro", zero_division=0))
    sp, sr, sf, _ = precision_recall_fscore_support(Y, P, average="samples", zero_division=0)
    assert (m["sample_precision"], m["sample_recall"], m["sample_f1"]) == pytest.approx((sp, sr, sf))
    single = [i for i, g in enumerate(gold) if len(g) == 1]
    assert m["top1_accuracy_single_label"] == pytest.approx(
        np.mean([bool(pred[i]) and pred[i][0] == gold[i][0] for i in single])
    )
    assert m["num_unparseable"] == 1 and m["num_single_label"] == len(single)


BAD = {
    "empty_line": ('{"gold": ["a"], "output": "x"}\n\n{"gold": ["a"], "output": "x"}\n', ":2: empty line"),
    "truncated": ('{"gold": ["a"], "output": "x"}\n{"gold": ["a"], "outp\n', ":2: invalid JSON"),
    "not_object": ('["a", "b"]\n', ":1: expected a JSON object, got list"),
    "missing_gold": ('{"gold": ["a"], "output": "x"}\n{"output": "x"}\n', ":2: field 'gold': missing"),
    "empty_gold": ('{"gold": [], "output": "x"}\n', ":1: field 'gold': empty label list"),
    "output_not_str": ('{"gold": ["a"], "output": 3}\n', ":1: field 'output': expected a string"),
    "empty_file": ("", "no predictions in file"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input(tmp_path, cli, case):
    text, msg = BAD[case]
    good = write_run(tmp_path / "a_good", [{"gold": ["a"], "output": "<predicted_actions>a"}])
    bad = tmp_path / "b_bad"
    bad.mkdir()
    (bad / "predictions.jsonl").write_text(text)
    r = cli("eval", "metrics", tmp_path)
    assert r.returncode == 2, r.stderr
    assert msg in r.stderr and str(bad / "predictions.jsonl") in r.stderr
    assert "Traceback" not in r.stderr
    errors = [l for l in r.stderr.splitlines() if "error:" in l]
    assert len(errors) == 1 and errors[0].startswith("error: "), r.stderr
    assert not (good / "metrics.json").exists() and not (bad / "metrics.json").exists()  # nothing written at all


def test_label_not_in_mapping(tmp_path, cli):
    d = write_run(tmp_path / "r", [{"gold": ["Feeding"], "output": "x"}, {"gold": ["Flying"], "output": "x"}])
    (tmp_path / "map.json").write_text(json.dumps(SIMPLE))
    r = cli("eval", "metrics", d, "--label-map", tmp_path / "map.json", check=2)
    assert ":2: field 'gold': label 'Flying' is not in the label mapping" in r.stderr
    assert not (d / "metrics.json").exists()


def test_empty_folder_and_missing_path(tmp_path, cli):
    (tmp_path / "empty").mkdir()
    assert "no predictions.jsonl found" in cli("eval", "metrics", tmp_path / "empty", check=2).stderr
    assert "no such file or folder" in cli("eval", "metrics", tmp_path / "nope", check=2).stderr


def test_only_missing_does_not_rescore(tmp_path, cli):
    rows = [{"gold": ["a"], "output": "<predicted_actions>a</predicted_actions>"}]
    for i in range(300):
        write_run(tmp_path / "eval_outputs" / f"run{i:03d}", rows)
    cli("eval", "metrics", tmp_path / "eval_outputs", "--quiet", check=0)
    target = tmp_path / "eval_outputs" / "run123"
    (target / "metrics.json").unlink()
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "eval_outputs").rglob("metrics.json")}
    r = cli("eval", "metrics", tmp_path / "eval_outputs", "--only-missing", check=0)
    assert "scored 1 file(s), skipped 299" in r.stdout
    assert (target / "metrics.json").exists()
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())


def test_prediction_files_written_by_other_code(tmp_path, capsys):
    """`--field OURS=THEIRS` reads other key names (dotted keys read nested objects); the metrics equal those of the
    same predictions under our names."""
    from vtreetrm.cli import main

    rows = [
        {
            "sample": i,
            "labels": [g],
            "response": {"text": f"<predicted_actions>{p}</predicted_actions>"},
            "choices": ["a", "b", "c"],
        }
        for i, (g, p) in enumerate([("a", "a"), ("b", "a"), ("c", "c"), ("a", "b")])
    ]
    (tmp_path / "theirs").mkdir()
    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs" / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "ours" / "predictions.jsonl").write_text(
        "".join(
            json.dumps(
                {"id": r["sample"], "gold": r["labels"], "output": r["response"]["text"], "candidates": r["choices"]}
            )
            + "\n"
            for r in rows
        )
    )
    assert (
        main(
            [
                "eval",
                "metrics",
                str(tmp_path / "theirs"),
                "--field",
                "gold=labels",
                "--field",
                "output=response.text",
                "--field",
                "candidates=choices",
                "--quiet",
            ]
        )
        == 0
    )
    assert main(["eval", "metrics", str(tmp_path / "ours"), "--quiet"]) == 0
    a, b = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("theirs", "ours"))
    assert {k: v for k, v in a.items() if k != "provenance"} == {k: v for k, v in b.items() if k != "provenance"}
    assert a["top1_accuracy_single_label"] == 0.5 and a["provenance"]["fields"] == {
        "gold": "labels",
        "output": "response.text",
        "candidates": "choices",
    }
    assert main(["eval", "metrics", str(tmp_path / "theirs"), "--quiet"]) == 2
    assert "field 'gold': missing (--field gold=KEY" in capsys.readouterr().err
