"""Outputs under attack on every command that writes one: a folder or file this tool did not write is never replaced,
a path through a file is one clear error, canonical metadata that is not one line of text is refused where it is read,
and a release published by sft-export survives a kill at every call that publishes it or removes the old one."""

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

STRACE = shutil.which("strace")


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


# a process that has imported the tool forks one child per run: a kill costs one export, not a Python start-up.
# The child waits until a tracer holds it, so strace counts (and kills at) its calls from its first one.
FORK_SERVER = """
import ctypes, json, os, sys, time
from vtreetrm.cli import main
import vtreetrm.release.cli
for line in sys.stdin:
    argv, err = json.loads(line)
    pid = os.fork()
    if pid == 0:
        ctypes.CDLL(None).prctl(0x59616D61, ctypes.c_ulong(-1), 0, 0, 0)  # PR_SET_PTRACER_ANY (Yama): strace -p may attach
        fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1), os.dup2(fd, 2)
        t0 = time.time()
        while "TracerPid:\\t0\\n" in open("/proc/self/status").read():
            if time.time() - t0 > 60:
                os._exit(99)
            time.sleep(0.001)
        time.sleep(0.05)  # a moment for strace to take hold (attached, it stops the child at its next call)
        os._exit(main(argv))
    print(pid, flush=True)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""
CALLS = (
    "rename,renameat,renameat2,link,linkat,unlink,unlinkat,rmdir"  # how a folder is published and its old one removed
)


def _whole(out: Path, files: dict):
    "`out` is a whole published release: the same files, every parquet readable with its rows, the report ok."
    assert sorted(p.name for p in out.iterdir()) == sorted(files), sorted(p.name for p in out.iterdir())
    assert json.loads((out / "export_report.json").read_text())["status"] == "ok"
    assert {n: pq.read_table(out / n).num_rows for n in files if n.endswith(".parquet")} == {
        n: r for n, r in files.items() if n.endswith(".parquet")
    }


@pytest.mark.skipif(STRACE is None, reason="strace is not installed")
def test_sft_export_survives_a_kill_at_every_rename(chain, tmp_path, capsys):
    argv = [str(a) for a in chain.steps()["sft-export"]]
    out = tmp_path / "rel"
    argv[argv.index("--output-dir") + 1] = str(out)
    argv = ["release", *argv, "--no-progress"]
    assert main(argv) == 0  # the old release, which every run below replaces
    files = {p.name: pq.read_table(p).num_rows if p.suffix == ".parquet" else None for p in out.iterdir()}
    assert {"train.parquet", "val.parquet", "test.parquet", "export_report.json", ".vtreetrm-published"} <= set(files)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    server = subprocess.Popen([sys.executable, "-c", FORK_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env)  # fmt: skip
    err = tmp_path / "child.err"

    def traced(*strace_args) -> int:
        "Run the export in a forked child under `strace -p`; its exit code (-9: killed)."
        server.stdin.write(json.dumps([argv, str(err)]) + "\n")
        server.stdin.flush()
        pid = server.stdout.readline().strip()
        s = subprocess.run([STRACE, "-f", "-qq", "-p", pid, *strace_args], capture_output=True, text=True, timeout=120)
        rc = int(server.stdout.readline())
        assert rc != 99, f"strace did not attach: {s.stderr}"
        return rc

    try:
        log = tmp_path / "calls.log"
        assert traced("-o", str(log), "-e", f"trace={CALLS}") == 0, err.read_text()
        lines = [
            l.split(maxsplit=1) for l in log.read_text().splitlines() if not l.split()[1].startswith(("---", "+++"))
        ]
        calls = [call.split("(")[0] for _, call in lines]
        assert len({pid for pid, _ in lines}) == 1, lines  # all on one thread: strace counts calls per thread
        assert "renameat2" in calls and calls.count("unlinkat") >= 4, calls  # the swap, then the old one removed
        for i, call in enumerate(calls):  # kill on entering each call: the ones before it ran, this one did not
            n = calls[: i + 1].count(call)
            rc = traced("-o", "/dev/null", "-e", f"trace={call}", "-e", f"inject={call}:signal=SIGKILL:when={n}")
            assert rc == -9, (i, call, rc, err.read_text())
            _whole(out, files)  # the old release or the new one, never neither
    finally:
        server.stdin.close()
        server.wait(timeout=60)
    assert main(argv) == 0, capsys.readouterr().err  # a rerun over what the kills left completes
    _whole(out, files)
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
