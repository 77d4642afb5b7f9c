"""Every file the project writes and reads back (run.json, sweep.json, sweep YAMLs, run parameters, report inputs, gate
and audit reports) is read as hostile: a tampered one ends the command in one line naming the file and the field, with
exit code 2 and no traceback, and changes nothing."""

import json
import shutil

import pytest
from test_runs_cli import BODY, make_notebook


def _one_error(r, *needles):
    "Exit 2, no traceback, exactly one `error:` line under 1 KiB holding every needle; returns that line."
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "Traceback" not in out, out
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and len(lines[0].encode()) < 1024, out
    assert all(n in lines[0] for n in needles), lines[0]
    return lines[0]


def _tree(d):
    "{relative path: bytes} of every file under `d`."
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


# --- run parameters and sweep YAMLs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    "A tiny notebook and a sweep of it (two done points), made once; tests copy the sweep folder."
    from conftest import vtreetrm

    d = tmp_path_factory.mktemp("tiny")
    nb = make_notebook(d / "exp.ipynb", BODY)
    (d / "s.yaml").write_text(f"notebook: {nb}\ngrid: {{steps: [1, 2]}}\n")
    r = vtreetrm("sweep", d / "s.yaml", "--runs-dir", d / "runs", check=0)
    return d, nb, r


@pytest.mark.parametrize(
    "flags,needles",
    [
        (["-y", "x: !!python/object/apply:os.system [touch PWNED]"], ["-y:1", "not plain data"]),
        (["-p", "lr", "nan"], ["-p", "field 'lr'", "not a finite number"]),
        (["-p", "lr", "inf"], ["-p", "field 'lr'", "not a finite number"]),
        (["-p", "lr", "1e999"], ["-p", "field 'lr'", "not a finite number"]),
    ],
)
def test_run_parameters(tmp_path, cli, tiny, flags, needles):
    _, nb, _ = tiny
    r = cli("run", nb, "--name", "a", "--runs-dir", tmp_path / "runs", *flags, cwd=tmp_path)
    _one_error(r, *needles)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize(
    "yaml_text,needles",
    [
        ("grid: {steps: !!python/object/apply:os.system [touch PWNED]}\n", ["s.yaml:", "not plain data"]),
        ("grid: {steps: [1]}\nname: '{steps.__class__.__init__.__globals__}'\n", ["field 'name'", "reads into"]),
        ("grid: {steps: [1]}\nname: '{steps[0]}'\n", ["field 'name'", "reads into"]),
        ("grid: {steps: [1]}\nname: 'r{steps:>999999999}'\n", ["field 'name'", "not allowed"]),
    ],
)
def test_sweep_yaml(tmp_path, cli, tiny, yaml_text, needles):
    _, nb, _ = tiny
    (tmp_path / "s.yaml").write_text(f"notebook: {nb}\n{yaml_text}")
    r = cli("sweep", tmp_path / "s.yaml", "--runs-dir", tmp_path / "runs", cwd=tmp_path)
    _one_error(r, *needles)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "PWNED").exists()


# --- sweep.json and a point's run.json, read back by `sweep status` and `sweep resume`


def _set(**kw):
    return lambda m: m.update(kw)


def _running(**kw):
    "run.json of a point still running (so `started` is read), with `kw`."
    return lambda m: (m.update(status="running", **kw), m.pop("seconds", None))


SWEEP_TAMPERS = [
    ("sweep.json", _set(executor="slurmx"), "field 'executor'"),
    ("sweep.json", _set(executor=["local"]), "field 'executor'"),
    ("sweep.json", _set(driver=[1]), "field 'driver'"),
    ("sweep.json", _set(driver={"pid": "me"}), "field 'driver.pid'"),
    ("sweep.json", _set(jobs="x"), "field 'jobs'"),
    ("sweep.json", _set(jobs={"s-steps=1": "x"}), "field 'jobs.s-steps=1'"),
    ("sweep.json", lambda m: m.pop("notebook"), "field 'notebook'"),
    ("s-steps=1/run.json", _set(status=["done"]), "field 'status'"),
    ("s-steps=1/run.json", _running(started=5), "field 'started'"),
    ("s-steps=1/run.json", _running(started="yesterday"), "field 'started'"),
    ("s-steps=1/run.json", _set(seconds="x"), "field 'seconds'"),
    ("s-steps=1/run.json", _running(executor=["local"]), "field 'executor'"),
    ("s-steps=1/run.json", _running(pid="me"), "field 'pid'"),
]


@pytest.mark.parametrize("command", ["status", "resume"])
@pytest.mark.parametrize("file,tamper,field", SWEEP_TAMPERS, ids=[f"{f}-{x}" for f, _, x in SWEEP_TAMPERS])
def test_sweep_folder(tmp_path, cli, tiny, command, file, tamper, field):
    d, _, r = tiny
    assert r.returncode == 0, r.stderr
    runs = tmp_path / "runs"
    shutil.copytree(d / "runs", runs)
    data = json.loads((runs / file).read_text())
    tamper(data)
    (runs / file).write_text(json.dumps(data))
    before = _tree(runs)
    _one_error(cli("sweep", command, runs), file, field)
    assert _tree(runs) == before


def test_no_kernel_warning(tiny):
    "A notebook run (here each sweep point) prints no warning of the kernel about unencrypted TCP."
    _, _, r = tiny
    assert "without encryption" not in r.stdout + r.stderr, r.stderr


# --- report build: data that reaches a chart, a ladder.json and an analysis summary.json


def _report(tmp_path, cli, *flags):
    "`report build` of tmp_path/runs (and `flags`); returns (CompletedProcess, the page's text)."
    out = tmp_path / "r.html"
    r = cli("report", "build", tmp_path / "runs", "--out", out, *flags)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return r, out.read_text()


def _scored_run(tmp_path, cli, name, label):
    "runs/NAME: predictions of `label` and another label, scored, with a training history."
    d = tmp_path / "runs" / name
    d.mkdir(parents=True)
    rows = [{"gold": [g], "output": f"<predicted_actions>{p}</predicted_actions>"}
            for g, p in ((label, label), ("walk", "walk"), (label, "walk"))]  # fmt: skip
    (d / "predictions.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    (d / "history.jsonl").write_text(json.dumps({"epoch": 1, "train_loss": 1.0, "val_top1": 0.5}) + "\n")
    (d / "params.json").write_text(json.dumps({"dataset": "lote", "model": "tiny"}))
    cli("eval", "metrics", d, "--quiet", check=0)
    return d


def test_report_shows_mathtext_as_text(tmp_path, cli):
    "A label and a run folder name holding `$\\foo$` are plain text in the charts (matplotlib reads no formula)."
    _scored_run(tmp_path, cli, "run$\\foo$", "$\\foo$")
    _, page = _report(tmp_path, cli)
    assert "Best run of each dataset" in page and "Training curves" in page and "<img" in page


@pytest.mark.parametrize(
    "ladder,needles",
    [
        ({"rungs": {"stage": "x"}}, ["ladder.json", "field 'rungs'"]),
        ({"rungs": [{"stage": ["x"], "top1": 0.5}]}, ["ladder.json", "field 'rungs[0].stage'"]),
        ({"rungs": [], "dataset": 3}, ["ladder.json", "field 'dataset'"]),
        ([1], ["ladder.json", "expected a JSON object"]),
    ],
)
def test_report_leaves_out_a_bad_ladder(tmp_path, cli, ladder, needles):
    d = _scored_run(tmp_path, cli, "run1", "sit")
    (d / "ladder.json").write_text(json.dumps(ladder))
    _, page = _report(tmp_path, cli)
    sec = page[page.index("Learnability ladder") :]
    assert "left out" in sec and all(n in sec.replace("&#x27;", "'") for n in needles), sec[:2000]


@pytest.mark.parametrize(
    "summary,field",
    [
        ({"by_M": {"16": {"num_checkpoints": 1}}}, "by_M.16.effective_rank_ratio"),
        ({"by_M": [16]}, "by_M"),
        (
            {
                "by_M": {
                    "16": {
                        "num_checkpoints": 1,
                        "effective_rank_ratio": "hi",
                        "gini": 0.1,
                        "energy90_fraction": 0.5,
                        "mean_abs_cos": 0.1,
                    }
                }
            },
            "by_M.16.effective_rank_ratio",
        ),  # fmt: skip
    ],
)
def test_report_leaves_out_a_bad_analysis(tmp_path, cli, summary, field):
    _scored_run(tmp_path, cli, "run1", "sit")
    (tmp_path / "an").mkdir()
    (tmp_path / "an" / "summary.json").write_text(json.dumps(summary))
    _, page = _report(tmp_path, cli, "--analysis", tmp_path / "an")
    sec = page[page.index("Q-former query diversity") :]
    sec = sec.replace("&#x27;", "'")
    assert "Left out: <code>an/summary.json: " in sec and f"field '{field}'" in sec, sec[:2000]
    assert str(tmp_path) not in page


# --- release gates: the rollout dump, the gate report and the audit report


def _gate_error(rc, err, *needles):
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert rc == 2 and "Traceback" not in err and len(lines) == 1 and len(lines[0].encode()) < 1024, err
    assert all(n in lines[0] for n in needles), lines[0]


GOOD = {"sample_id": "s0", "ground_truth": '{"choice_id": "K12345678", "data_level": "L2"}', "response": "x"}


@pytest.mark.parametrize(
    "text,needles",
    [
        ("{oops\n", ["d.jsonl:1", "invalid JSON"]),
        ("[1, 2]\n", ["d.jsonl:1", "expected a JSON object"]),
        (json.dumps({**GOOD, "tool_calls": [{"name": "search"}]}) + "\n", ["d.jsonl:1", "field 'tool_calls'"]),
        (json.dumps({**GOOD, "tool_calls": "two"}) + "\n", ["d.jsonl:1", "field 'tool_calls'"]),
    ],
)
def test_rollout_gate_dump(tmp_path, capsys, text, needles):
    from test_hostile_release import make_model, run

    (tmp_path / "d.jsonl").write_text(text)
    m = make_model(tmp_path / "model")
    rc, _, err = run(capsys, "release", "rollout-gate", "--from-dump", tmp_path / "d.jsonl", "--model", m,
                     "--report", tmp_path / "g.json")  # fmt: skip
    _gate_error(rc, err, *needles)
    assert not (tmp_path / "g.json").exists()


@pytest.mark.parametrize(
    "file,edit,field",
    [
        ("gate.json", {"model": "the sft model"}, "field 'model'"),
        ("gate.json", {"model": {"sha256": 7}}, "field 'model.sha256'"),
        ("gate.json", {"model": {"sha256": "0", "file_sha256": ["a"]}}, "field 'model.file_sha256'"),
        ("audit.json", {"provenance": "x"}, "field 'provenance'"),
        ("audit.json", {"provenance": {"inputs": ["a"]}}, "field 'provenance.inputs'"),
        ("audit.json", {"provenance": {"params": []}}, "field 'provenance.params'"),
        ("audit.json", {"provenance": {"params": {"canonical": "s=a.json"}}}, "field 'provenance.params.canonical'"),
    ],
)
def test_verl_rl_gate_and_audit(tmp_path, capsys, file, edit, field):
    from test_hostile_release import dump, make_model, run, verl_rl

    m = make_model(tmp_path / "model")
    gate = tmp_path / "gate.json"
    rc, _, err = run(capsys, "release", "rollout-gate", "--from-dump", dump(tmp_path / "d.jsonl", 2, 10),
                     "--model", m, "--report", gate)  # fmt: skip
    assert rc == 0, err
    (tmp_path / "audit.json").write_text(json.dumps({"status": "passed", "conflict_keys": 0}))
    f = tmp_path / file
    f.write_text(json.dumps({**json.loads(f.read_text()), **edit}))
    rc, _, err = verl_rl(capsys, tmp_path, m, gate)
    _gate_error(rc, err, file, field)
    assert not (tmp_path / "launch").exists()


# --- re-scoring keeps what the scorer does not compute


def test_rescoring_keeps_a_prediction_runs_fields(tmp_path, cli):
    "`eval metrics` over a prediction run's metrics.json keeps its baselines, datasets and split (the report reads them)."
    d = _scored_run(tmp_path, cli, "pred", "sit")
    m = json.loads((d / "metrics.json").read_text())
    extra = {"chance_top1": 0.5, "majority_top1": 0.66, "split": "test", "trained_on": "lote", "evaluated_on": "mammalnet",
             "short_clips": 0, "skipped": []}  # fmt: skip
    m = {**m, **extra, "provenance": {**m["provenance"], "predictions": "pred/predictions.jsonl"}}
    (d / "metrics.json").write_text(json.dumps(m))
    cli("eval", "metrics", d, "--quiet", check=0)
    after = json.loads((d / "metrics.json").read_text())
    assert after.keys() == m.keys() and after["provenance"].keys() == m["provenance"].keys()
    assert {k: after[k] for k in extra} == extra and after["provenance"]["predictions"] == "pred/predictions.jsonl"
