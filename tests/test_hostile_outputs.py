"""Outputs under attack on every command that writes one: a folder or file this tool did not write is never replaced,
a path through a file is one clear error, canonical metadata that is not one line of text is refused where it is read,
and a release published by sft-export survives a kill at every rename."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_release_chain import Chain, _Cap

from vtreetrm.cli import main

EXE = Path(sys.executable).parent / "vtreetrm"
STRACE = shutil.which("strace")
CALLS = "rename,renameat,renameat2,unlink,unlinkat,rmdir"  # strace counts each call on its own: when=K hits the K-th of each


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    c = Chain(tmp_path_factory.mktemp("outputs"), records=40)
    c.go(_Cap())
    return c


def release(capsys, argv):
    rc = main(["release", *map(str, argv), "--no-progress"])
    return rc, capsys.readouterr().err


def one_line(err: str, path):
    errors = [l for l in err.splitlines() if l.startswith("error: ")]
    assert len(errors) == 1 and str(path) in errors[0] and "Traceback" not in err, err


FOLDER_OUT = {
    "sft-export": "--output-dir",
    "rl-export": "--output-dir",
    "mixture-sft": "--output-dir",
    "trajectory-collect": "--collect-dir",
    "trajectory-export": "--output-dir",
}
FILE_OUT = {
    "preprocess": "--output",
    "audit": "--report",
    "sft-validate": "--report",
    "rl-validate-cascade": "--report",
}


def steps(chain):
    "The chain's commands and the native-tool trajectory ones on the same canonical records."
    st = chain.steps()
    common = ["--dataset", "shougang", "--canonical", chain.can, *chain.assets()]
    st["trajectory-collect"] = ["trajectory-collect", *common, "--collect-dir", chain.run / "collect"]
    st["trajectory-export"] = [
        "trajectory-export",
        *common,
        "--think-source",
        "mock",
        "--output-dir",
        chain.run / "traj",
    ]
    return st


def _target(tmp, kind):
    t = tmp / "out"
    if kind == "user folder":
        t.mkdir()
        (t / "notes.txt").write_text("keep me")
    elif kind == "file":
        t.write_text("keep me")
    elif kind == "symlink":
        (tmp / "elsewhere").mkdir()
        t.symlink_to(tmp / "elsewhere")
    elif kind == "under a file":
        t.write_text("keep me")
        return t, t / "sub"
    return t, t


def _unchanged(tmp, t, kind):
    if kind in ("user folder",):
        assert sorted(os.listdir(t)) == ["notes.txt"] and (t / "notes.txt").read_text() == "keep me"
    elif kind in ("file", "under a file"):
        assert t.read_text() == "keep me"
    else:
        assert t.is_symlink() and list((tmp / "elsewhere").iterdir()) == []


# a file output replaces a file or a link (never writing through the link: see the test after this one)
CASES = [(n, k) for n in FOLDER_OUT for k in ("user folder", "file", "symlink", "under a file")] + [
    (n, k) for n in FILE_OUT for k in ("user folder", "under a file")
]


@pytest.mark.parametrize("name,kind", CASES)
def test_release_outputs_replace_only_what_this_tool_wrote(chain, tmp_path, capsys, name, kind):
    argv = list(steps(chain)[name])
    flag = (FOLDER_OUT | FILE_OUT)[name]
    t, arg = _target(tmp_path, kind)
    argv[argv.index(flag) + 1] = arg
    rc, err = release(capsys, argv)
    assert rc == 2, err
    one_line(err, t)
    _unchanged(tmp_path, t, kind)


def test_a_file_output_replaces_a_link_not_its_target(chain, tmp_path, capsys):
    (tmp_path / "target.json").write_text("keep me")
    (tmp_path / "report.json").symlink_to(tmp_path / "target.json")
    argv = list(chain.steps()["audit"])
    argv[argv.index("--report") + 1] = tmp_path / "report.json"
    assert release(capsys, argv)[0] == 0
    assert (tmp_path / "target.json").read_text() == "keep me" and not (tmp_path / "report.json").is_symlink()
    assert json.loads((tmp_path / "report.json").read_text())["status"] == "passed"


@pytest.mark.parametrize("kind", ["user folder", "file", "under a file"])
@pytest.mark.parametrize("cmd", ["phase1", "phase2"])
def test_run_folders_are_never_mixed_with_other_files(tmp_path, capsys, cmd, kind):
    """A training run starts only in a new, empty or earlier run folder, and says so before it reads any data."""
    t, arg = _target(tmp_path, kind)
    rc = main(["video", cmd, str(tmp_path / "no-such-dataset"), "--out", str(arg)])
    assert rc == 2
    one_line(capsys.readouterr().err, t)
    _unchanged(tmp_path, t, kind)


BAD_METADATA = {"list": ["a", "b"], "null": None, "number": 3, "object": {"x": 1}, "line break": "a\nb"}


@pytest.mark.parametrize("bad", list(BAD_METADATA))
def test_canonical_metadata_must_be_one_line_of_text(chain, tmp_path, capsys, bad):
    """Every reader of canonical records refuses, naming the file, the line and the field; nothing is published."""
    recs = json.loads(chain.can.read_text())
    recs[3]["metadata"]["table_description"] = BAD_METADATA[bad]
    can = tmp_path / "all.json"
    can.write_text(json.dumps(recs, ensure_ascii=False))
    steps = chain.steps()
    for name, out_flag in [("sft-export", "--output-dir"), ("rl-export", "--output-dir"), ("audit", "--report")]:
        argv = [str(a) for a in steps[name]]
        if name == "audit":
            argv[argv.index(f"shougang={chain.can}")] = f"shougang={can}"
        else:
            argv[argv.index("--canonical") + 1] = str(can)
        argv[argv.index(out_flag) + 1] = str(tmp_path / name)
        rc, err = release(capsys, argv)
        assert rc == 2, (name, err)
        assert f"{can}:" in err and "field 'metadata.table_description'" in err and "Traceback" not in err, (name, err)
        assert not (tmp_path / name).exists(), name


@pytest.mark.parametrize("value", [None, ["a", "b"], "edited"])
def test_validators_refuse_prompts_from_missing_or_non_text_metadata(chain, tmp_path, capsys, value):
    """A release whose metadata column is not the text its prompts show fails sft-validate, naming the field."""
    rel = tmp_path / "rel"
    shutil.copytree(chain.run / "releases/sft-legacy/shougang", rel)
    t = pq.read_table(rel / "train.parquet")
    rows = t.to_pylist()
    md = json.loads(rows[0]["metadata"])
    md["table_description"] = value
    rows[0]["metadata"] = json.dumps(md, ensure_ascii=False)
    pq.write_table(type(t).from_pylist(rows, schema=t.schema), rel / "train.parquet")
    argv = list(chain.steps()["sft-validate"])
    argv[argv.index("--dataset-dir") + 1] = rel
    argv[argv.index("--report") + 1] = tmp_path / "v.json"
    rc, err = release(capsys, argv)
    assert rc == 2 and "metadata" in err, err
    first = json.loads((tmp_path / "v.json").read_text())["errors"][0]
    assert first["field"] == "metadata" and first["row"] == 1 and "train.parquet" in first["file"], first


@pytest.mark.skipif(STRACE is None, reason="strace is not installed")
@pytest.mark.slow
def test_sft_export_survives_a_kill_at_every_rename(chain, tmp_path):
    argv = [str(a) for a in chain.steps()["sft-export"]]
    out = tmp_path / "rel"
    argv[argv.index("--output-dir") + 1] = str(out)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [str(EXE), "release", *argv, "--no-progress"]
    assert subprocess.run(cmd, capture_output=True, env=env, timeout=300).returncode == 0
    killed = 0
    for k in range(1, 400):
        trap = [
            STRACE,
            "-f",
            "-qq",
            "-o",
            "/dev/null",
            "-e",
            f"trace={CALLS}",
            "-e",
            f"inject={CALLS}:signal=SIGKILL:when={k}",
        ]
        r = subprocess.run(trap + cmd, capture_output=True, env=env, timeout=300)
        assert (out / ".vtreetrm-published").is_file() and json.loads((out / "export_report.json").read_text())[
            "status"
        ] == "ok"
        assert pq.read_table(out / "train.parquet").num_rows > 0
        if r.returncode == 0:
            break
        killed += 1
    assert killed >= 2
    assert subprocess.run(cmd, capture_output=True, env=env, timeout=300).returncode == 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".rel.")] == []


MALFORMED = {
    "label not JSON": ("label", "{not json"),
    "label a number": ("label", "3"),
    "label without choice_id": ("label", "{}"),
    "message null": ("messages", None),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_validators_report_malformed_rows_and_empty_releases(chain, tmp_path, capsys, case):
    rel = tmp_path / "rel"
    shutil.copytree(chain.run / "releases/sft-legacy/shougang", rel)
    t = pq.read_table(rel / "val.parquet")
    rows = t.to_pylist()
    col, value = MALFORMED[case]
    if col == "messages":
        rows[0]["messages"] = [rows[0]["messages"][0], None, rows[0]["messages"][2]]
    else:
        rows[0][col] = value
    pq.write_table(type(t).from_pylist(rows, schema=t.schema), rel / "val.parquet")
    argv = list(chain.steps()["sft-validate"])
    argv[argv.index("--dataset-dir") + 1] = rel
    argv[argv.index("--report") + 1] = tmp_path / "v.json"
    rc, err = release(capsys, argv)
    assert rc == 2 and "Traceback" not in err, err
    first = json.loads((tmp_path / "v.json").read_text())["errors"][0]
    assert "val.parquet" in first["file"] and first["row"] == 1 and first["field"] in (col, "row"), first


def test_an_empty_release_never_validates(chain, tmp_path, capsys):
    rel = tmp_path / "rel"
    shutil.copytree(chain.run / "releases/sft-legacy/shougang", rel)
    for s in ("train", "val", "test"):
        t = pq.read_table(rel / f"{s}.parquet")
        pq.write_table(t.slice(0, 0), rel / f"{s}.parquet")
    argv = list(chain.steps()["sft-validate"])
    argv[argv.index("--dataset-dir") + 1] = rel
    argv[argv.index("--report") + 1] = tmp_path / "v.json"
    rc, err = release(capsys, argv)
    assert rc == 2 and "no rows" in err, err
