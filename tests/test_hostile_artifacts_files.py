"""Every JSON file the project writes and later reads back, damaged the ways disks, kills and people damage files
(emptied, cut short, binary, the wrong kind of JSON, a folder in its place, a link to nowhere), read by the command
or report step that reads it: a command ends in one line naming the file (exit 2, no traceback, nothing written);
the report leaves the run or section out and says why. The commands run in this process (the same entry point as the
console script, which tests/test_hostile_artifacts*.py run as a subprocess)."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import once
from test_hostile_artifacts_video import trained  # noqa: F401  (the shared tiny Phase-1 + Phase-2 run)
from test_hostile_release import dump, make_model
from test_runs_cli import BODY, make_notebook

from vtreetrm.cli import main
from vtreetrm.runs import report
from vtreetrm.utils import UserError


def _cut(b: bytes) -> bytes:
    return b[: max(1, len(b) // 2)]


DAMAGES = {  # name -> what it makes of the file (bytes in, bytes out; None: the damage is not a content)
    "empty": lambda b: b"",
    "cut short": _cut,
    "binary": lambda b: b"\xff\xfe\x00\x9c" + b[:8],
    "a JSON list": lambda b: b"[1, 2]",
    "a JSON string": lambda b: b'"x"',
    "a folder": None,
    "a link to nowhere": None,
}


def damage(f: Path, how: str):
    "Damage file `f` the way `how` names."
    if how == "a folder":
        f.unlink()
        f.mkdir()
        (f / "x").write_text("{}")
    elif how == "a link to nowhere":
        f.unlink()
        f.symlink_to(f.parent / "no-such-file.json")
    else:
        f.write_bytes(DAMAGES[how](f.read_bytes()))


def run(capsys, *argv):
    "`vtreetrm ARGV` in this process: (exit code, stderr)."
    rc = main([str(a) for a in argv])
    return rc, capsys.readouterr().err


def refused(rc: int, err: str, f: Path):
    "Exit 2, no traceback, one `error:` line under 1 KiB naming file `f` (whole, or as its folder and its name there)."
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert rc == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and len(lines[0].encode()) < 1024, err
    named = str(f) in lines[0] or any(f"{a}: " in lines[0] and str(f.relative_to(a)) in lines[0] for a in f.parents)
    assert named, (str(f), lines[0])


def tree(d: Path) -> dict:
    "{relative path: bytes} of every file under `d` (links and folders by name)."
    return {str(p.relative_to(d)): p.read_bytes() if p.is_file() else "" for p in sorted(d.rglob("*"))}


# ---------------------------------------------------------------- sweeps: sweep.json and a point's run.json


def _sweep(d: Path):
    nb = make_notebook(d / "exp.ipynb", BODY)
    (d / "s.yaml").write_text(f"notebook: {nb}\ngrid: {{steps: [1]}}\n")
    assert main(["sweep", str(d / "s.yaml"), "--runs-dir", str(d / "runs")]) == 0


@pytest.fixture(scope="session")
def swept(tmp_path_factory, worker_id):
    "A finished one-point sweep of a tiny notebook (copy it before changing it)."
    return once(tmp_path_factory, worker_id, "hostile-files-sweep", _sweep)


@pytest.mark.parametrize("file", ["sweep.json", "s-steps=1/run.json"])
@pytest.mark.parametrize("how", list(DAMAGES))
def test_sweep_files(swept, tmp_path, capsys, file, how):
    runs = tmp_path / "runs"
    shutil.copytree(swept / "runs", runs, symlinks=True)
    damage(runs / file, how)
    before = tree(runs)
    for command in ("status", "resume"):
        refused(*run(capsys, "sweep", command, runs), runs / file)
    assert tree(runs) == before


# ---------------------------------------------------------------- release: the rollout gate report and the audit


@pytest.mark.parametrize("file", ["gate.json", "audit.json"])
@pytest.mark.parametrize("how", list(DAMAGES))
def test_launch_reports(tmp_path, capsys, file, how):
    m = make_model(tmp_path / "model")
    gate = tmp_path / "gate.json"
    rc, err = run(capsys, "release", "rollout-gate", "--from-dump", dump(tmp_path / "d.jsonl", 2, 10),
                  "--model", m, "--report", gate)  # fmt: skip
    assert rc == 0, err
    (tmp_path / "audit.json").write_text(json.dumps({"status": "passed", "conflict_keys": 0}))
    damage(tmp_path / file, how)
    rc, err = run(capsys, "release", "verl-rl", "--release", tmp_path / "rel", "--sft-model", m,
                  "--registry", tmp_path / "r.json", "--corpus", tmp_path / "c.json", "--task-config",
                  tmp_path / "t.json", "--rollout-gate", gate, "--audit", tmp_path / "audit.json", "--reference", m,
                  "--output-dir", tmp_path / "launch")  # fmt: skip
    refused(rc, err, tmp_path / file)
    assert not (tmp_path / "launch").exists()


# ---------------------------------------------------------------- video: checkpoints and the feature cache


VIDEO_FILES = {  # file under the copied run (p2/), the command reading it
    "best/checkpoint.json": "predict",
    "best/adapter/adapter_config.json": "predict",
    "p1/best/checkpoint.json": "phase2",
    "cache/clip_hashes.json": "features",
}


def _video_command(command: str, run: Path, d: Path) -> list:
    data = run / "syn" / "lote"
    if command == "predict":
        return ["video", "predict", d / "best", "--dataset", data, "--out", d / "out", "--cache", d / "cache"]
    if command == "phase2":
        return ["video", "phase2", data, "--out", d / "out", "--phase1", d / "p1" / "best", "--cache", d / "cache",
                "--epochs", 1, "--max-steps", 1, "--num-queries", 4, "--llm-pretrain-steps", 0]  # fmt: skip
    return ["video", "features", data, "--cache", d / "cache"]


@pytest.mark.parametrize("file", list(VIDEO_FILES))
@pytest.mark.parametrize("how", list(DAMAGES))
def test_video_files(trained, tmp_path, capsys, file, how):  # noqa: F811
    d = tmp_path / "run"
    shutil.copytree(trained / "p2", d)
    shutil.copytree(trained / "p1", d / "p1")
    shutil.copytree(trained / "cache", d / "cache")
    damage(d / file, how)
    before = tree(d)
    refused(*run(capsys, *_video_command(VIDEO_FILES[file], trained, d)), d / file)
    assert not (d / "out").exists() and tree(d) == before


def test_cached_feature_sidecar(trained, tmp_path, capsys):  # noqa: F811
    "A cached feature's .json sidecar that is not an object: the clip is encoded again, never a traceback."
    shutil.copytree(trained / "cache", tmp_path / "cache")
    metas = sorted((tmp_path / "cache").rglob("??/*.json"))
    assert metas
    for f in metas:
        f.write_text("[1]")
    rc, err = run(capsys, "video", "features", trained / "syn" / "lote", "--cache", tmp_path / "cache")
    assert rc == 0 and "Traceback" not in err, err


# ---------------------------------------------------------------- the report's inputs


@pytest.fixture
def scored(tmp_path) -> Path:
    "runs/a: a scored evaluation with params.json, provenance.json, history.jsonl, ladder.json and an analysis folder."
    d = tmp_path / "runs" / "a"
    d.mkdir(parents=True)
    rows = [{"gold": ["sit"], "output": "<predicted_actions>sit</predicted_actions>"},
            {"gold": ["walk"], "output": "<predicted_actions>sit</predicted_actions>"}]  # fmt: skip
    (d / "predictions.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    assert main(["eval", "metrics", str(d), "--quiet"]) == 0
    (d / "params.json").write_text(json.dumps({"dataset": "lote", "model": "tiny"}))
    (d / "provenance.json").write_text(json.dumps({"params": {"ckpt": "x"}}))
    (d / "history.jsonl").write_text(json.dumps({"epoch": 1, "train_loss": 1.0, "val_top1": 0.5}) + "\n")
    rung = {"stage": "phase2", "top1": 0.5, "macro_f1": 0.4, "note": None}
    (d / "ladder.json").write_text(json.dumps({"rungs": [rung], "dataset": "lote", "split": "test"}))
    b = {"num_checkpoints": 1, "effective_rank_ratio": 0.5, "gini": 0.1, "energy90_fraction": 0.5, "mean_abs_cos": 0.1}
    (tmp_path / "an").mkdir()
    (tmp_path / "an" / "summary.json").write_text(json.dumps({"by_M": {"16": b}}))
    return d


def test_report_inputs_control(scored):
    "The undamaged run is one row, one ladder and one summary: what the damaged cases lose is theirs only."
    runs, _, bad = report.collect_runs([scored.parent])
    assert len(runs) == 1 and not bad
    assert len(report.collect_ladders([scored.parent], left_out := [])) == 1 and not left_out
    assert report.read_summary(scored.parent.parent / "an")["by_M"]["16"]["num_checkpoints"] == 1


@pytest.mark.parametrize("file", ["metrics.json", "params.json"])
@pytest.mark.parametrize("how", list(DAMAGES))
def test_report_run_files(scored, file, how):
    if file == "params.json":
        (scored / "provenance.json").unlink()
    damage(scored / file, how)
    runs, _, bad = report.collect_runs([scored.parent])
    if file == "metrics.json" and how in ("a folder", "a link to nowhere"):
        assert runs.empty  # no metrics.json: no evaluation to show (the predictions are listed as unscored)
        return
    assert runs.empty and len(bad) == 1 and str(scored / file) in bad[0]["error"], (runs, bad)


@pytest.mark.parametrize("how", list(DAMAGES))
def test_report_provenance(scored, how):
    "A prediction run's provenance.json (read when it has no params.json): left out with the reason."
    (scored / "params.json").unlink()
    damage(scored / "provenance.json", how)
    runs, _, bad = report.collect_runs([scored.parent])
    assert runs.empty and len(bad) == 1 and str(scored / "provenance.json") in bad[0]["error"], (runs, bad)


@pytest.mark.parametrize("how", list(DAMAGES))
def test_report_ladder(scored, how):
    damage(scored / "ladder.json", how)
    left_out = []
    assert report.collect_ladders([scored.parent], left_out) == []
    if how != "a link to nowhere":  # a dead link is not listed by rglob: no ladder to show, nothing to say
        assert len(left_out) == 1 and str(scored / "ladder.json") in left_out[0], left_out


@pytest.mark.parametrize("how", list(DAMAGES))
def test_report_summary(scored, how):
    f = scored.parent.parent / "an" / "summary.json"
    damage(f, how)
    with pytest.raises(UserError) as e:
        report.read_summary(f.parent)
    assert str(f) in str(e.value)


@pytest.mark.parametrize("how", list(DAMAGES))
def test_report_history(scored, how):
    "A run's history.jsonl: its curve is left out with the reason, the run's scores stay."
    damage(scored / "history.jsonl", how)
    runs, _, bad = report.collect_runs([scored.parent])
    assert len(runs) == 1 and not bad
    curves, problems = report.training_curves(runs)
    if how in ("empty", "a folder", "a link to nowhere"):
        assert curves.empty
    else:
        assert curves.empty and len(problems) == 1 and str(scored / "history.jsonl") in problems[0], problems
