"""Every artifact a video run writes, read back as hostile: a Phase-2 checkpoint folder whose adapter config, adapter
tensors or Phase-1 reference was changed (and its sha256 in checkpoint.json updated, as a tamperer would), and a run's
history.jsonl or steps.jsonl cut short by a kill or damaged. Each is refused in one line naming the file and the
field (exit 2, nothing written), or, for a cut last line of a log, dropped with a note. An export without --merge
loads with peft's own `AutoPeftModelForCausalLM` from any working directory."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import once, one_line
from safetensors.torch import load_file, save_file

from vtreetrm.cli import main
from vtreetrm.utils import sha256_file
from vtreetrm.video.synthetic import SyntheticConfig, make_synthetic

torch.set_num_threads(1)

TINY = ["--epochs", 1, "--max-steps", 1, "--num-queries", 4, "--max-new-tokens", 4, "--llm-pretrain-steps", 0]


def run(*args):
    return main([str(a) for a in args])


def _train(d: Path):
    "A tiny synthetic dataset, a one-epoch Phase-1 run and a one-step Phase-2 run on it (its own tiny LLM in base_llm/)."
    make_synthetic(
        d / "syn",
        SyntheticConfig(head_count=6, min_count=4, mammalnet_count=2, multi_label=1, n_short=0),
        datasets=("lote",),
        progress=False,
    )
    cache = ["--cache", d / "cache"]
    assert run("video", "phase1", d / "syn" / "lote", "--out", d / "p1", "--epochs", 1, *cache) == 0
    p2 = ["video", "phase2", d / "syn" / "lote", "--out", d / "p2", "--phase1", d / "p1" / "best", "--threads", 1]
    assert run(*p2, *cache, *TINY) == 0


@pytest.fixture(scope="session")
def trained(tmp_path_factory, worker_id):
    "The folder of one tiny Phase-1 + Phase-2 training per test session (copy what you change)."
    return once(tmp_path_factory, worker_id, "hostile-artifacts-video", _train)


def _copy(trained: Path, tmp: Path) -> Path:
    "A copy of the Phase-2 run folder (its base_llm/ included) in `tmp`."
    shutil.copytree(trained / "p2", tmp / "run")
    return tmp / "run"


def _rehash(best: Path):
    "Update the sha256 of every file in checkpoint.json, as someone who changed them on purpose would."
    meta = json.loads((best / "checkpoint.json").read_text())
    meta["files"] = {rel: sha256_file(best / rel) for rel in meta["files"] if (best / rel).is_file()}
    (best / "checkpoint.json").write_text(json.dumps(meta))


def _edit_json(f: Path, change):
    "Rewrite JSON file `f` with `change(obj)` (which edits in place or returns the new object)."
    obj = json.loads(f.read_text())
    new = change(obj)
    f.write_text(json.dumps(obj if new is None else new))


def _adapter_config(best: Path, change):
    _edit_json(best / "adapter" / "adapter_config.json", change)
    _rehash(best)


def _adapter_tensors(best: Path, change):
    f = best / "adapter" / "adapter_model.safetensors"
    w = load_file(str(f))
    change(w)
    save_file(w, str(f))
    _rehash(best)


def _first(w: dict, part: str) -> str:
    return sorted(k for k in w if part in k)[0]


def _swap_shape(w: dict):
    k = _first(w, "q_proj.lora_A")
    w[k] = w[k].T.contiguous()


def _phase1_ref(best: Path, ref):
    "Set checkpoint.json's Phase-1 reference (checkpoint.json itself is not in its own file list)."
    _edit_json(best / "checkpoint.json", lambda m: m.update(phase1=ref))


def _broken_phase1(best: Path, tmp: Path, change):
    "Point the Phase-1 reference at a copy of the Phase-1 checkpoint whose checkpoint.json `change` breaks."
    meta = json.loads((best / "checkpoint.json").read_text())
    p1 = tmp / "p1"
    shutil.copytree(meta["phase1"]["path"], p1)
    if change == "gone":
        os.remove(p1 / "checkpoint.json")
    else:
        _edit_json(p1 / "checkpoint.json", change)
    _phase1_ref(best, {**meta["phase1"], "path": str(p1)})
    return p1


# tamper -> (what it does to a copied RUN/best, the file the error names ('' = RUN/best), the field it names)
TAMPERS = {
    "adapter r": (lambda b, t: _adapter_config(b, lambda c: c.update(r=4)), "adapter/adapter_config.json", "r"),
    "adapter r as text": (
        lambda b, t: _adapter_config(b, lambda c: c.update(r="8")),
        "adapter/adapter_config.json",
        "r",
    ),
    "adapter target_modules": (
        lambda b, t: _adapter_config(b, lambda c: c.update(target_modules=["q_proj", "no_such_proj"])),
        "adapter/adapter_config.json",
        "target_modules",
    ),
    "adapter peft_type": (
        lambda b, t: _adapter_config(b, lambda c: c.update(peft_type="NO_SUCH_TYPE")),
        "adapter/adapter_config.json",
        "peft_type",
    ),
    "adapter config a list": (lambda b, t: _adapter_config(b, lambda c: [c]), "adapter/adapter_config.json", None),
    "adapter modules_to_save": (
        lambda b, t: _adapter_config(b, lambda c: c.update(modules_to_save=["lm_head"])),
        "adapter/adapter_config.json",
        "modules_to_save",
    ),
    "adapter tensor transposed": (
        lambda b, t: _adapter_tensors(b, _swap_shape),
        "adapter/adapter_model.safetensors",
        "q_proj.lora_A.weight",
    ),
    "adapter tensor missing": (
        lambda b, t: _adapter_tensors(b, lambda w: w.pop(_first(w, "v_proj.lora_B"))),
        "adapter/adapter_model.safetensors",
        "v_proj.lora_B.weight",
    ),
    "adapter tensor foreign": (
        lambda b, t: _adapter_tensors(b, lambda w: w.update({"base_model.model.lm_head.weight": torch.zeros(2, 2)})),
        "adapter/adapter_model.safetensors",
        "lm_head.weight",
    ),
    "phase1 path a number": (
        lambda b, t: _phase1_ref(b, {"path": 5, "sha256": "0" * 64}),
        "checkpoint.json",
        "phase1.path",
    ),
    "phase1 without sha256": (
        lambda b, t: _phase1_ref(b, {"path": json.loads((b / "checkpoint.json").read_text())["phase1"]["path"]}),
        "checkpoint.json",
        "phase1.sha256",
    ),
    "phase1 folder without checkpoint.json": (
        lambda b, t: _broken_phase1(b, t, "gone"),
        "p1",
        None,
    ),
    "phase1 folder with a bad config": (
        lambda b, t: _broken_phase1(b, t, lambda m: m["config"].update(heads=0)),
        "p1/checkpoint.json",
        "config",
    ),
    "phase1 folder of another kind": (
        lambda b, t: _broken_phase1(b, t, lambda m: m.update(kind="phase2")),
        "p1/checkpoint.json",
        "kind",
    ),
}
COMMANDS = ["predict", "export", "export --merge", "ladder"]


def _command(command: str, trained: Path, best: Path, out: Path) -> list:
    "The argv of a video command reading checkpoint folder `best`."
    if command == "predict":
        return [
            "video",
            "predict",
            best,
            "--dataset",
            trained / "syn" / "lote",
            "--out",
            out,
            "--cache",
            trained / "cache",
        ]
    if command == "ladder":
        return [
            "video",
            "ladder",
            trained / "syn" / "lote",
            "--phase2",
            best,
            "--cache",
            trained / "cache",
            "--out",
            out,
        ]
    return ["video", "export", best, "--out", out, *(["--merge"] if command.endswith("--merge") else [])]


def _snapshot(*roots) -> dict:
    "path -> (size, mtime) of every file under `roots`: what a refused command must leave as it was."
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for r in roots for p in Path(r).rglob("*") if p.is_file()}


def _refused(err: str, rc: int, run_dir: Path, tmp: Path, file: str, field):
    "`one_line`, naming the file the tamper changed (under RUN/best, or the Phase-1 copy p1) and its field."
    line = one_line(err, rc, tmp / file if file.startswith("p1") else run_dir / "best" / file)
    if field:  # a tensor's field is its full name: the tamper gives its end
        assert re.search(rf"field '([^']*\.)?{re.escape(field)}'", line), (field, line)


# through the console script: one tamper of each kind (adapter config, adapter tensors, the Phase-1 reference, the
# Phase-1 folder), each on another command; every tamper meets every command in process below
CLI_CASES = {
    "adapter r": "predict",
    "adapter tensor transposed": "export",
    "phase1 without sha256": "export --merge",
    "phase1 folder of another kind": "ladder",
}


@pytest.mark.parametrize("tamper", list(CLI_CASES))
def test_tampered_checkpoint_is_refused_by_the_cli(trained, tmp_path, cli, tamper):
    "A tamper through the console script: one line on stderr, exit 2, nothing written."
    change, file, field = TAMPERS[tamper]
    command = CLI_CASES[tamper]
    run_dir = _copy(trained, tmp_path)
    change(run_dir / "best", tmp_path)
    before = _snapshot(tmp_path, trained)
    out = tmp_path / "out"
    r = cli(*_command(command, trained, run_dir / "best", out), cwd=tmp_path)
    _refused(r.stderr, r.returncode, run_dir, tmp_path, file, field)
    assert not out.exists() and _snapshot(tmp_path, trained) == before


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("tamper", list(TAMPERS))
def test_tampered_checkpoint_is_refused_by_every_command(trained, tmp_path, capsys, tamper, command):
    "Every tamper against every command reading a checkpoint folder (in this process: the same entry point, faster)."
    change, file, field = TAMPERS[tamper]
    run_dir = _copy(trained, tmp_path)
    change(run_dir / "best", tmp_path)
    out = tmp_path / "out"
    rc = run(*_command(command, trained, run_dir / "best", out))
    _refused(capsys.readouterr().err, rc, run_dir, tmp_path, file, field)
    assert not out.exists()


# ---------------------------------------------------------------- resuming from logs a kill cut short


def _resume(trained: Path, run_dir: Path):
    "`video phase2 --resume` of `run_dir` for one more epoch."
    flags = [*TINY[2:], "--epochs", 2, "--max-steps", 2]
    p2 = ["video", "phase2", trained / "syn" / "lote", "--out", run_dir, "--phase1", trained / "p1" / "best"]
    return [*p2, "--resume", "--threads", 1, "--cache", trained / "cache", *flags]


@pytest.mark.parametrize("log", ["history.jsonl", "steps.jsonl"])
def test_resume_drops_a_cut_last_line(trained, tmp_path, cli, log):
    "A kill mid-append leaves a last line without its end: resume drops it with a one-line note and goes on."
    run_dir = _copy(trained, tmp_path)
    f = run_dir / log
    row = json.dumps({"epoch": 1, "step": 1, "loss": 1.5})
    f.write_text(f.read_text() + row[: len(row) // 2])
    r = cli(*_resume(trained, run_dir), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stderr.splitlines() if ln.startswith("note: ")]
    assert len(notes) == 1 and str(f) in notes[0] and "cut" in notes[0], r.stderr
    rows = [json.loads(ln) for ln in f.read_text().splitlines()]
    assert rows and all(isinstance(x, dict) for x in rows)


# log, what is written into it, the line and field the error names
BAD_LOGS = {
    "history: bad line in the middle": ("history.jsonl", "{not json}\n", 1, None),
    "history: epoch as text": ("history.jsonl", '{"epoch": "one", "train_loss": 1.0}\n', 1, "epoch"),
    "history: a loss as text": ("history.jsonl", '{"epoch": 1, "train_loss": "low"}\n', 1, "train_loss"),
    "history: a list": ("history.jsonl", "[1, 2]\n", 1, None),
    "steps: bad line in the middle": ("steps.jsonl", '{"step": 1\n', 1, None),
    "steps: step as text": ("steps.jsonl", '{"step": "1", "loss": 1.0}\n', 1, "step"),
    "steps: step missing": ("steps.jsonl", '{"loss": 1.0}\n', 1, "step"),
}


@pytest.mark.parametrize("case", list(BAD_LOGS))
def test_resume_refuses_a_damaged_log(trained, tmp_path, capsys, case):
    """A bad line that is not a cut last line, or a field of the wrong type, is refused in one line naming file and line
    (in this process; the tamper tests above take the same error path through the console script)."""
    log, text, line, field = BAD_LOGS[case]
    run_dir = _copy(trained, tmp_path)
    f = run_dir / log
    f.write_text(text + f.read_text())
    before = _snapshot(run_dir)
    rc = run(*_resume(trained, run_dir))
    one_line(capsys.readouterr().err, rc, f"{f}:{line}", *([f"field '{field}'"] if field else []))
    assert _snapshot(run_dir) == before


# ---------------------------------------------------------------- an export other tools load


LOAD = """import sys
from peft import AutoPeftModelForCausalLM
m = AutoPeftModelForCausalLM.from_pretrained(sys.argv[1])
print(type(m).__name__, m.peft_config["default"].base_model_name_or_path)
"""


def _load_elsewhere(adapter: Path, cwd: Path) -> subprocess.CompletedProcess:
    "`LOAD` of `adapter` in a fresh Python whose working directory is `cwd`, offline."
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", LOAD, str(adapter)], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=600)  # fmt: skip


def test_export_loads_with_peft_from_another_folder(trained, tmp_path, cli):
    "An export without --merge given a relative --out loads with peft's AutoPeftModelForCausalLM from any folder."
    run_dir = _copy(trained, tmp_path)
    r = cli("video", "export", "run/best", "--out", "exported", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = _load_elsewhere(tmp_path / "exported" / "adapter", elsewhere)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("PeftModelForCausalLM"), p.stdout
    base = Path(p.stdout.split()[1])
    assert base.is_absolute() and (tmp_path / "exported") in base.parents, p.stdout  # the export holds its base
    shutil.rmtree(run_dir)  # the export does not need the run folder
    p = _load_elsewhere(tmp_path / "exported" / "adapter", elsewhere)
    assert p.returncode == 0, p.stderr
