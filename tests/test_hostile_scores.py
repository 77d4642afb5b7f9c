"""Numbers are never silently wrong: a sample id scored twice is refused, labels and answers match across Unicode
forms, a metrics.json is trusted only while it matches the predictions it was scored from and its own per-class
table, and a harness run's stored `correct` column is scored again from its answers on resume."""

import json
import sqlite3
import unicodedata

import pytest
from conftest import harness_infer, one_line

from vtreetrm.cli import main
from vtreetrm.runs.report import collect_runs

NFC, NFD = unicodedata.normalize("NFC", "éat"), unicodedata.normalize("NFD", "éat")


def run(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    o = capsys.readouterr()
    return rc, o.out, o.err


def _row(i, gold, answer):
    return {"id": i, "gold": [gold], "output": f"<predicted_actions>{answer}</predicted_actions>"}


def _write(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_prediction_id_repeated_is_refused_naming_both_lines(tmp_path, capsys):
    p = _write(
        tmp_path / "predictions.jsonl", [_row("v1", "a", "a")] * 5 + [_row("v2", "a", "b"), _row("v3", "b", "a")]
    )
    rc, _, err = run(capsys, "eval", "metrics", tmp_path, "--quiet")
    one_line(err, rc, p, "field 'id'", "'v1'", "lines 1 and 2")
    assert not (tmp_path / "metrics.json").exists()


def test_answers_match_gold_in_another_unicode_form(tmp_path, capsys):
    _write(tmp_path / "predictions.jsonl", [_row(1, NFD, NFC), _row(2, "run", "run"), _row(3, NFD, NFD)])
    rc, _, err = run(capsys, "eval", "metrics", tmp_path, "--quiet")
    assert rc == 0, err
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["top1_accuracy_single_label"] == 1.0 and len(m["per_class"]) == 2, m


def test_import_refuses_labels_that_differ_only_by_unicode_form(tmp_path, capsys):
    import numpy as np

    from vtreetrm.video.synthetic import LOTE_MOTION, render_frames, write_mp4

    frames = render_frames(
        [("circle", (240, 240, 240), LOTE_MOTION["Walking"])], "forest", 16, 32, np.random.default_rng(0)
    )
    write_mp4(tmp_path / "videos" / "a.mp4", frames, fps=8)
    ann = tmp_path / "a.csv"
    ann.write_text(f"video,start,end,label,split\na,0,1,{NFC},train\na,1,2,{NFD},train\n", encoding="utf-8")
    rc, _, err = run(
        capsys, "video", "import", ann, "--format", "csv", "--videos", tmp_path / "videos", "--out", tmp_path / "ds"
    )
    one_line(err, rc, ann, "Unicode form")
    assert not (tmp_path / "ds").exists()


def _scored(tmp_path, capsys):
    d = tmp_path / "run"
    d.mkdir()
    _write(d / "predictions.jsonl", [_row(1, "a", "a"), _row(2, "a", "b"), _row(3, "b", "b")])
    rc, _, err = run(capsys, "eval", "metrics", d, "--quiet")
    assert rc == 0, err
    return d


def test_stale_metrics_are_rescored_and_never_reported(tmp_path, capsys):
    d = _scored(tmp_path, capsys)
    df, _, bad = collect_runs([tmp_path])
    assert list(df["top1"]) == [pytest.approx(2 / 3)] and not bad
    p = d / "predictions.jsonl"
    p.write_text(p.read_text().replace("a</predicted_actions>", "b</predicted_actions>", 1))  # the predictions change
    df, _, bad = collect_runs([tmp_path])
    assert df.empty and "stale" in bad[0]["error"] and "predictions_sha256" in bad[0]["error"], bad
    rc, out, err = run(capsys, "eval", "metrics", d, "--only-missing")
    assert rc == 0 and "scored 1 file(s)" in out, out + err  # stale: scored again, not skipped
    assert json.loads((d / "metrics.json").read_text())["top1_accuracy_single_label"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("field,value", [("top1_accuracy_single_label", 0.999), ("macro_f1", 0.999)])
def test_a_metrics_file_contradicting_its_own_counts_is_left_out(tmp_path, capsys, field, value):
    d = _scored(tmp_path, capsys)
    m = json.loads((d / "metrics.json").read_text())
    (d / "metrics.json").write_text(json.dumps({**m, field: value}))
    df, _, bad = collect_runs([tmp_path])
    assert df.empty and f"field '{field}'" in bad[0]["error"] and str(d / "metrics.json") in bad[0]["error"], bad


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    from vtreetrm.harness.synthetic import make_synthetic

    d = tmp_path_factory.mktemp("hs") / "syn"
    make_synthetic(d, n_train_videos=4, n_test_videos=4, per_task=4, test_ar=4, test_other=1)
    return d


def test_harness_resume_scores_the_stored_answers_again(syn, tmp_path, capsys):
    ws = tmp_path / "ws"
    assert harness_infer(syn / "store", ws, "--run-id", "r", "--backend", "simulated") == 0
    first = json.loads(capsys.readouterr().out)
    con = sqlite3.connect(ws / "harness.db")
    right = con.execute("SELECT AVG(answer = gold) FROM answers").fetchone()[0]
    con.execute("UPDATE answers SET correct = 7")  # edited by hand: every answer marked right
    con.commit()
    con.close()
    assert harness_infer(syn / "store", ws, "--run-id", "r", "--backend", "simulated") == 0
    again = json.loads(capsys.readouterr().out)
    assert again["accuracy"] == pytest.approx(right) == pytest.approx(first["accuracy"]), (first, again)
    assert right < 1.0  # the edit would have shown
