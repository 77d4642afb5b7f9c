"""Stored XSS in `report build`: a script in any value of params.json or metrics.json must never run in the report."""

import html
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import CHROMIUM, chromium_cmd

from vtreetrm.cli import main

PAYLOAD = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'
PARAM_FIELDS = ["llm_name", "dataset", "train_dataset", "answer_order", "label_mode", "variant"]
METRIC_FIELDS = ["trained_on", "evaluated_on"]


@pytest.fixture
def runs(synthetic_eval):
    return synthetic_eval[0]


def _payload(field: str) -> str:
    return f'<img src=x onerror="document.title=\'pwned-{field}\'"><script>document.title="pwned-{field}"</script>'


def _poison(src: Path, dst: Path, fields: list):
    """Copy the runs with a distinct payload in one (where, field) of params.json / metrics.json of each scored run, the
    fields taken in turn: a run keeps its other values, so none hides another (metrics' evaluated_on wins over params')."""
    shutil.copytree(src, dst)
    scored = [f.parent for f in sorted(dst.rglob("metrics.json")) if "macro_f1" in json.loads(f.read_text())]
    assert len(scored) >= len(fields)
    for i, run in enumerate(scored):
        where, field = fields[i % len(fields)]
        f = run / f"{where}.json"
        obj = json.loads(f.read_text())
        obj[field] = _payload(field)
        f.write_text(json.dumps(obj))


FIELDS = [("params", f) for f in PARAM_FIELDS] + [("metrics", f) for f in METRIC_FIELDS]


@pytest.mark.parametrize(
    "fields",
    [FIELDS, *[pytest.param([f], marks=pytest.mark.slow, id=f[1]) for f in FIELDS]],
    ids=lambda v: "every-field" if len(v) > 1 else v[0][1],
)
def test_no_script_from_data_runs(runs, tmp_path, fields):
    """Every field at once in the fast tier (each payload distinct, each in runs of its own), each field alone in the slow
    tier: each payload reaches the report, and only as text, escaped whole."""
    _poison(runs / "runs", tmp_path / "runs", fields)
    out = tmp_path / "report.html"
    assert main(["report", "build", str(tmp_path / "runs"), "--out", str(out)]) == 0
    page = out.read_text()
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    for where, f in fields:  # pwned-F appears twice in F's payload, and nowhere else but in that payload escaped
        escaped = page.count(html.escape(_payload(f), quote=False)) + page.count(html.escape(_payload(f)))
        outside = page.count(f"pwned-{f}") - 2 * escaped
        assert outside == 0, f"{where}.json field {f!r}: {outside} times outside its escaped payload (as HTML)"
        assert escaped > 0, f"{where}.json field {f!r}: its value never reached the report"
    assert "<img src=x" not in page and "<script>document.title" not in page
    if CHROMIUM is None:
        pytest.skip("no chromium: the page was checked as text only")
    flags = chromium_cmd(tmp_path / "profile", "--virtual-time-budget=3000")
    dom = subprocess.run(
        flags + ["--dump-dom", out.resolve().as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    assert "<table" in dom and "pwned" not in dom.split("</title>")[0]


def test_no_script_runs_in_any_notebook_report(tmp_path):
    """Every run's HTML (`vtreetrm run`, sweeps, the demo's experiment pages) goes through render_html: a value from data
    that reaches an output as raw HTML, or as a table index or cell, is escaped or blocked by the page's CSP."""
    import nbformat
    import pandas as pd

    from vtreetrm.runs.papermill import render_html

    poisoned = pd.DataFrame({"n": [1]}, index=pd.Index([_payload("index")], name=_payload("axis")))
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("display(...)")
    cell.outputs = [
        nbformat.v4.new_output("display_data", {"text/html": _payload("raw-html"), "text/plain": "x"}),
        nbformat.v4.new_output("display_data", {"text/html": poisoned._repr_html_(), "text/plain": "x"}),
        nbformat.v4.new_output("stream", name="stdout", text=_payload("stdout")),
    ]
    nb.cells = [nbformat.v4.new_markdown_cell("# run"), cell]
    nbformat.write(nb, tmp_path / "run.ipynb")
    out = render_html(
        tmp_path / "run.ipynb", tmp_path / "run.html", title="run"
    )  # run names are sanitized (_safe_name)
    page = out.read_text()
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    for f in ("index", "axis", "stdout"):
        assert f"<img src=x onerror=\"document.title='pwned-{f}" not in page, f
    if CHROMIUM is None:
        pytest.skip("no chromium: the page was checked as text only")
    flags = chromium_cmd(tmp_path / "profile", "--virtual-time-budget=3000")
    dom = subprocess.run(
        flags + ["--dump-dom", out.resolve().as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    assert "<h1" in dom and "pwned" not in dom.split("</title>")[0]


BAD_VALUES = [
    ("metrics", "macro_f1", "abc"),
    ("metrics", "macro_f1", {"a": 1}),
    ("metrics", "top1_accuracy_single_label", [1]),
    ("metrics", "macro_f1", 7.5),
    ("params", "num_queries", "abc"),
    ("params", "num_queries", 6.5),
]


@pytest.mark.parametrize(
    "cases",
    [BAD_VALUES, *[pytest.param([c], marks=pytest.mark.slow, id=str(c)) for c in BAD_VALUES]],
    ids=lambda v: "every-kind" if len(v) > 1 else str(v[0]),
)
def test_report_inputs_of_the_wrong_kind_are_flagged_not_tabled(runs, tmp_path, capsys, cases):
    """Each run with a value of the wrong kind is left out of every table and listed with its file and field; the other
    runs are reported as before. Every kind at once (each in a run of its own) in the fast tier, each alone in the slow."""
    shutil.copytree(runs / "runs", tmp_path / "runs")
    scored = [f for f in sorted((tmp_path / "runs").rglob("metrics.json")) if "macro_f1" in json.loads(f.read_text())]
    bad = {}  # run folder -> (the file made bad, its field)
    for (where, field, value), m in zip(cases, scored):
        f = m.parent / f"{where}.json"
        obj = json.loads(f.read_text())
        obj[field] = value
        f.write_text(json.dumps(obj))
        bad[str(m.parent)] = (f, field)
    capsys.readouterr()
    assert main(["report", "build", str(tmp_path / "runs"), "--out", str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == len(cases), err
    for f, field in bad.values():
        assert sum(f.name in line and f.parent.name in line and f"field '{field}'" in line for line in err) == 1, (
            f,
            err,
        )
    html = (tmp_path / "r.html").read_text()
    left = html[html.index("Runs left out") :]
    for _, field in bad.values():
        assert f"field &#x27;{field}&#x27;" in left or f"field '{field}'" in left
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["num_runs"] == len(scored) - len(cases)
    assert sorted(next(r for r in bad if r in lo["run"]) for lo in rep["left_out"]) == sorted(bad)
