"""Sweeps, reports, the query analysis and the demo under hostile input: a tampered sweep folder runs nothing it did
not record, a user's files are never replaced, a grid or a query matrix too big is refused or computed in bounded
memory, and every refusal is one line naming what the command really accepts."""

import json
import time
import tracemalloc

import numpy as np
import pytest
from conftest import refused_cli
from test_runs_cli import BODY, make_notebook

FAILING = {"lr": 0.1, "steps": -1, "name": "x", "run_dir": "."}  # the notebook raises on steps < 0


def _sweep(tmp_path, cli, yaml_text, name="s", check=None, *flags):
    "Write `name`.yaml and run it into tmp_path/runs; returns the CompletedProcess."
    (tmp_path / f"{name}.yaml").write_text(yaml_text)
    return cli("sweep", tmp_path / f"{name}.yaml", "--runs-dir", tmp_path / "runs", *flags, check=check)


def _failed_sweep(tmp_path, cli):
    "A sweep of one point that failed (steps=-1): resume has it to run again."
    nb = make_notebook(tmp_path / "exp.ipynb", BODY)
    _sweep(tmp_path, cli, f"notebook: {nb}\ngrid: {{steps: [-1]}}\n", check=1)
    return nb, tmp_path / "runs"


# --- resume runs only the notebook the sweep was submitted with


def test_resume_refuses_a_notebook_edited_since_submission(tmp_path, cli):
    nb, runs = _failed_sweep(tmp_path, cli)
    marker = tmp_path / "ran.txt"
    text = json.loads(nb.read_text())
    text["cells"][2]["source"] = f"open({str(marker)!r}, 'w').write('ran')"
    nb.write_text(json.dumps(text))
    r = cli("sweep", "resume", runs)
    refused_cli(r, "exp.ipynb", "sha256", "changed since the sweep")
    assert not marker.exists()


def test_resume_refuses_a_manifest_naming_another_notebook(tmp_path, cli):
    nb, runs = _failed_sweep(tmp_path, cli)
    marker = tmp_path / "ran.txt"
    other = make_notebook(tmp_path / "other.ipynb", f"open({str(marker)!r}, 'w').write('ran')")
    man = json.loads((runs / "sweep.json").read_text())
    man["notebook"] = str(other)
    (runs / "sweep.json").write_text(json.dumps(man))
    r = cli("sweep", "resume", runs)
    refused_cli(r, "other.ipynb", "not the notebook the sweep was submitted with")
    assert not marker.exists()


# --- a sweep folder is one sweep's: another version of it is refused unless --force


def test_another_sweep_of_the_same_name_is_refused(tmp_path, cli):
    nb = make_notebook(tmp_path / "exp.ipynb", BODY)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "s.yaml").write_text(f"notebook: {nb}\ngrid: {{steps: [-1, -2]}}\n")
    cli("sweep", tmp_path / "a" / "s.yaml", "--runs-dir", tmp_path / "runs", check=1)
    before = (tmp_path / "runs" / "sweep.json").read_text()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "s.yaml").write_text(f"notebook: {nb}\ngrid: {{steps: [-3]}}\n")
    r = cli("sweep", tmp_path / "b" / "s.yaml", "--runs-dir", tmp_path / "runs")
    refused_cli(r, "another version of the sweep 's'", "--force")
    assert (tmp_path / "runs" / "sweep.json").read_text() == before
    assert not (tmp_path / "runs" / "s-steps=-3").exists()
    rows = cli("sweep", "status", tmp_path / "runs", check=0).stdout
    assert "s-steps=-1" in rows and "s-steps=-2" in rows


def test_a_sweep_that_grows_keeps_its_folder_and_force_replaces(tmp_path, cli):
    """The refusal is no wider than it must be: adding points keeps every recorded one, and --force lets a changed sweep
    replace the recorded one."""
    nb = make_notebook(tmp_path / "exp.ipynb", BODY)
    _sweep(tmp_path, cli, f"notebook: {nb}\ngrid: {{steps: [-1]}}\n", check=1)
    _sweep(tmp_path, cli, f"notebook: {nb}\ngrid: {{steps: [-1, -2]}}\n", check=1)
    man = json.loads((tmp_path / "runs" / "sweep.json").read_text())
    assert sorted(man["points"]) == ["s-steps=-1", "s-steps=-2"]
    _sweep(tmp_path, cli, f"notebook: {nb}\ngrid: {{steps: [-3]}}\n", "s", 1, "--force")
    assert list(json.loads((tmp_path / "runs" / "sweep.json").read_text())["points"]) == ["s-steps=-3"]


# --- the state of a point comes from one folder at a time


def _hand_made_sweep(tmp_path, points: dict):
    "A sweep folder as `vtreetrm sweep` writes it, without running anything: points {name: {folder: run.json}}."
    d = tmp_path / "runs"
    d.mkdir()
    man = {"sweep": "s", "notebook": "nb.ipynb", "points": {n: {"lr": 0.1} for n in points}, "jobs": {}}
    (d / "sweep.json").write_text(json.dumps(man))
    for folders in points.values():
        for folder, run in folders.items():
            (d / folder).mkdir()
            (d / folder / ".vtreetrm-published").write_text("")
            (d / folder / "run.json").write_text(json.dumps(run))
    return d


def _status_rows(r) -> dict:
    return {line.split()[0]: line for line in r.stdout.splitlines()[1:-1]}


def test_a_finished_running_folder_is_not_taken_for_the_point(tmp_path, cli):
    "a (published, failed) with a.running saying done: a run folder is done only once published; reported, not trusted."
    d = _hand_made_sweep(tmp_path, {"a": {"a": {"status": "failed", "error": "E"}, "a.running": {"status": "done"}}})
    rows = _status_rows(cli("sweep", "status", d, check=0))
    assert " failed " in rows["a"] and "a.running" in rows["a"] and " done " not in rows["a"]
    from vtreetrm.runs.sweep import point_run

    assert point_run(d, "a")["status"] == "failed"  # resume runs it again: it is not skipped as done


def test_resume_runs_a_point_whose_running_folder_claims_done(tmp_path, cli):
    nb, runs = _failed_sweep(tmp_path, cli)
    work = runs / "s-steps=-1.running"  # beside the published point, which failed
    work.mkdir()
    (work / ".vtreetrm-published").write_text("")
    (work / "run.json").write_text(json.dumps({"status": "done"}))
    (work / "params.json").write_text(json.dumps(FAILING))
    assert "s-steps=-1.running says 'done'" in cli("sweep", "status", runs, check=0).stdout
    r = cli("sweep", "resume", runs, check=1)
    assert "this pass: 1 failed" in r.stdout  # run again (and it fails again), not skipped as done


@pytest.mark.parametrize(
    "text,why",
    [
        ('{"top1": true}', "field 'top1': must be a number between 0 and 1, got True"),
        ('{"top1": "0.9"}', "field 'top1': must be a number between 0 and 1, got '0.9'"),
        ('{"top1": 7}', "field 'top1': must be a number between 0 and 1, got 7"),
        ('{"top1": NaN}', "invalid JSON"),
    ],
)
def test_a_top1_that_is_no_fraction_is_not_shown(tmp_path, cli, text, why):
    "A metrics.json whose Top-1 is no number from 0 to 1: the column stays empty and the note says why."
    d = _hand_made_sweep(tmp_path, {"a": {"a": {"status": "done"}}})
    (d / "a" / "metrics.json").write_text(text)
    row = _status_rows(cli("sweep", "status", d, check=0))["a"]
    assert row.split()[1] == "done", row
    assert "1.000" not in row and "7.000" not in row and "0.900" not in row and why in row, row


# --- a grid is bounded before it is expanded


def test_a_huge_grid_is_refused_before_anything_is_written(tmp_path, cli):
    nb = make_notebook(tmp_path / "exp.ipynb", BODY)
    axes = "\n".join(f"  {k}: [{', '.join(map(str, range(32)))}]" for k in ("lr", "steps", "name", "run_dir"))
    (tmp_path / "big.yaml").write_text(f"notebook: {nb}\ngrid:\n{axes}\n")  # 32^4 points from 500 bytes
    t0 = time.time()
    r = cli("sweep", tmp_path / "big.yaml", "--runs-dir", tmp_path / "runs", timeout=60)
    refused_cli(r, "1,048,576 points", "10,000")
    assert time.time() - t0 < 30 and not (tmp_path / "runs").exists()
    assert "10,000" in cli("sweep", "--help", check=0).stdout


# --- the report replaces only its own files


def _runs_folder(tmp_path):
    run = tmp_path / "eval" / "run1"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"top1_accuracy_single_label": 0.5, "macro_f1": 0.4}))
    return tmp_path / "eval"


@pytest.mark.parametrize("users", ["notes.html", "notes.json"])
def test_report_never_replaces_a_users_file(tmp_path, cli, users):
    runs = _runs_folder(tmp_path)
    (tmp_path / users).write_text("my notes")
    r = cli("report", "build", runs, "--out", tmp_path / "notes.html")
    refused_cli(r, users, "did not write")
    assert (tmp_path / users).read_text() == "my notes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval", users]


def test_report_replaces_its_own_files(tmp_path):
    import nbformat
    from nbformat.v4 import new_notebook

    from vtreetrm.runs.papermill import render_html
    from vtreetrm.runs.report import check_report_replaceable

    nbformat.write(new_notebook(), tmp_path / "r.ipynb")
    render_html(tmp_path / "r.ipynb", tmp_path / "r.html")
    (tmp_path / "r.json").write_text(json.dumps({"report": "r.html", "num_runs": 0, "left_out": []}))
    check_report_replaceable(tmp_path / "r.html")  # ours: no refusal


# --- the query analysis never builds the M x M matrix


def _reference(q):
    "The analysis's |cos| figures as the full M x M computation gives them."
    from vtreetrm.analysis.queries import COS_BINS

    norms = np.linalg.norm(q, axis=1, keepdims=True)
    qn = np.divide(q, norms, out=np.zeros_like(q), where=norms > 0)
    cos = np.abs(qn @ qn.T)[np.triu_indices(len(q), k=1)]
    return float(cos.mean()), np.histogram(cos, bins=COS_BINS, density=True)[0].tolist()


def test_abs_cos_figures_equal_the_full_computation():
    from vtreetrm.analysis.queries import abs_cos_summary, query_diversity

    rng = np.random.default_rng(0)
    for M, d in [(2, 3), (8, 16), (64, 4), (300, 8)]:
        q = rng.normal(size=(M, d))
        q[1] = 0  # a zero row counts as orthogonal to everything
        mean, hist = _reference(q / np.abs(q).max())
        e = query_diversity(q)
        assert (e["mean_abs_cos"], e["abs_cos_hist"]) == (mean, hist)  # identical at the sizes the project uses
        bm, bh = abs_cos_summary(q / np.abs(q).max(), block_values=M * 7)  # many blocks: equal up to rounding
        assert bm == pytest.approx(mean, rel=1e-12) and bh == pytest.approx(hist, rel=1e-12)


def test_abs_cos_memory_is_bounded():
    "(20000, 4): the M x M matrix alone would take 3.2 GB; the analysis stays far below it."
    from vtreetrm.analysis.queries import abs_cos_summary

    q = np.random.default_rng(0).normal(size=(20000, 4))
    tracemalloc.start()
    try:
        mean, hist = abs_cos_summary(q)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 300e6, peak
    assert 0 < mean < 1 and len(hist) == 50


# --- the demo's refusals name the demo's own options


def test_demo_names_its_own_options(tmp_path, cli):
    "An earlier demo run of other parameters: the refusal says --fresh / --runs-dir, options demo has."
    runs = tmp_path / "runs"
    old = runs / "demo-eval-seed0"
    old.mkdir(parents=True)
    (old / ".vtreetrm-published").write_text("")
    (old / "run.json").write_text(json.dumps({"status": "done"}))
    (old / "params.json").write_text(json.dumps({"eval_dir": "elsewhere"}))
    r = cli("demo", "--synthetic-eval", "--runs-dir", runs, "--out", tmp_path / "r.html")
    refused_cli(r, "--fresh", "--runs-dir")
    assert "--name" not in r.stderr and "--force" not in r.stderr
