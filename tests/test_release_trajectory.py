"""Native-tool trajectories through the CLI: collect, export (mock and file think), validate, stats, mixture, and bad input."""

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vtreetrm.cli import main
from vtreetrm.release.assets import write_grading_manifest
from vtreetrm.release.cli import chain_commands
from vtreetrm.release.trajectory import TRAJECTORY_CLASSES, mock_think
from vtreetrm.utils import read_json

MF = ["--metadata-fields", "field_name", "table_name", "field_description", "table_description"]


def run(capsys, *argv):
    rc = main(["release", *map(str, argv), "--no-progress"])
    return rc, capsys.readouterr().err


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    t = tmp_path_factory.mktemp("traj")
    cmds = chain_commands(t / "syn", t / "run", records=160)
    steps = [cmds[k] for k in ("make-synthetic", "preprocess", "canonical", "split")]
    for st in steps:
        assert main(["release", *map(str, st), "--no-progress"]) == 0
    return t


def assets(t, grading=True):
    s = t / "syn"
    a = [
        "--registry",
        s / "ASSETS/registries/shougang.registry.json",
        "--corpus",
        s / "ASSETS/corpora/shougang.corpus.json",
        *MF,
        "--task-config",
        s / "CFG/shougang.task.json",
    ]
    return a + (["--grading-config", s / "STANDARDS/shougang.grading.json"] if grading else [])


def collect(t, capsys, out, shard=16):
    return run(
        capsys,
        "trajectory-collect",
        "--dataset",
        "shougang",
        "--canonical",
        t / "run/canonical/shougang/all.json",
        *assets(t),
        "--collect-dir",
        out,
        "--shard-size",
        shard,
    )


def export(t, capsys, out, think="mock", root=None, failed=None):
    argv = [
        "trajectory-export",
        "--dataset",
        "shougang",
        "--canonical",
        t / "run/canonical/shougang/all.json",
        *assets(t),
        "--think-source",
        think,
        "--output-dir",
        out,
    ]
    if root:
        argv += ["--think-root", root]
    if failed:
        argv += ["--failed-audit", failed]
    return run(capsys, *argv)


def lines_of(d):
    return [
        json.loads(l) for f in sorted(Path(d).glob("think-*.jsonl")) for l in f.read_text(encoding="utf-8").splitlines()
    ]


def fill(t, src, dst, edit=None):
    rows = []
    for l in lines_of(src):
        th, tt = mock_think(l)
        rows.append({**l, "think": "审阅后：" + th, "tool_think": tt})
    if edit:
        rows = edit(rows)
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    Path(dst).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture(scope="module")
def collected(base):
    class C:
        err = ""

    class Cap:
        def readouterr(self):
            return C()

    rc, err = collect(base, Cap(), base / "run/collect")
    assert rc == 0, err
    return base / "run/collect"


def test_collect_shards_classes_and_stable_ids(base, collected, capsys):
    rep = read_json(collected / "collect_report.json")
    assert rep["samples"] == 160 and rep["mode"] == "collect"
    names = sorted(p.name for p in collected.glob("think-*.jsonl"))
    assert "think-train-000.jsonl" in names and all(n.startswith("think-") for n in names)
    assert all(len(Path(collected / n).read_text().splitlines()) <= 16 for n in names)
    ls = lines_of(collected)
    assert {l["trajectory_class"] for l in ls} == set(TRAJECTORY_CLASSES)
    for l in ls:
        calls = [m for m in l["messages"] if m.get("tool_calls")]
        assert len(calls) == len(l["tool_think"]) == TRAJECTORY_CLASSES[l["trajectory_class"]] and l["think"] is None
        assert not any("reasoning_content" in m for m in l["messages"])
        assert all(isinstance(m["tool_calls"][0]["function"]["arguments"], str) for m in calls)
    assert not list(collected.glob("*.parquet"))
    rc, _ = collect(base, capsys, base / "run/collect2", shard=50)
    assert rc == 0 and sorted(l["sample_id"] for l in lines_of(base / "run/collect2")) == sorted(
        l["sample_id"] for l in ls
    )
    assert {l["sample_id"]: l["messages"] for l in lines_of(base / "run/collect2")} == {
        l["sample_id"]: l["messages"] for l in ls
    }


def test_export_from_file_validate_stats_and_mixture(base, collected, capsys, tmp_path):
    fill(base, collected, base / "run/filled/all.jsonl")
    rc, err = export(base, capsys, base / "run/releases/traj", think="file:filled", root=base / "run")
    assert rc == 0, err
    rep = read_json(base / "run/releases/traj/export_report.json")
    assert (
        rep["stage"] == "tool_trajectory"
        and rep["trajectory_format"] == "qwen3.5-native-tools-v2"
        and rep["validation"]["valid"]
    )
    assert sum(rep["rows"].values()) == 160
    row = pq.read_table(base / "run/releases/traj/train.parquet").to_pylist()[0]
    assert all(
        m["reasoning_content"].startswith("审阅后") or m.get("tool_calls")
        for m in row["messages"]
        if m["role"] == "assistant"
    )
    rc, err = run(capsys, "trajectory-validate", "--dataset-dir", base / "run/releases/traj", *assets(base))
    assert rc == 0 and read_json(base / "run/releases/traj/validation.json")["status"] == "passed"
    # token statistics with a local tokenizer that has a chat template
    from vtreetrm.release.chat import build_chat_tokenizer

    tok = build_chat_tokenizer([json.dumps(row["messages"], ensure_ascii=False)] * 5, vocab_size=600)
    tok.save_pretrained(tmp_path / "tok")
    rc, err = run(
        capsys,
        "trajectory-stats",
        "--dataset-dir",
        base / "run/releases/traj",
        "--report",
        tmp_path / "stats.json",
        "--model",
        tmp_path / "tok",
    )
    st = read_json(tmp_path / "stats.json")
    assert (
        rc == 0
        and st["tokens"]["all/all"]["n"] == 160
        and st["tokens"]["all/multi_tool"]["p50"] > st["tokens"]["all/direct"]["p50"]
    )
    assert (
        set(st["characters"]) >= {"train/all", "all/no_result"}
        and st["suggested_max_length"] >= st["tokens"]["all/all"]["max"]
    )
    # mixture: trajectory family works, legacy family refuses
    shutil.copy(base / "syn/STANDARDS/shougang.grading.json", base / "run/grading.json")
    write_grading_manifest(base / "run/grading-manifest.json", {"shougang": "grading.json"})
    rc, err = run(
        capsys,
        "mixture",
        "--family",
        "sft-trajectory",
        "--input",
        f"a={base}/run/releases/traj",
        "--grading-manifest",
        base / "run/grading-manifest.json",
        *assets(base, False),
        "--output-dir",
        base / "run/releases/traj-mix",
        "--weights",
        "a=1.5",
        "--seed",
        9,
    )
    assert rc == 0, err
    mix = read_json(base / "run/releases/traj-mix/mixture_report.json")
    assert (
        mix["validation"]["valid"]
        and mix["family"] == "sft-trajectory"
        and mix["sources"]["a"]["val"] == rep["rows"]["val"]
    )
    assert (
        mix["think_sources"] == {"a": rep["think_source"]} and mix["think_source"] == rep["think_source"]
    )  # formal only if every source is
    rc, err = run(
        capsys,
        "mixture",
        "--family",
        "sft",
        "--input",
        f"a={base}/run/releases/traj",
        "--grading-manifest",
        base / "run/grading-manifest.json",
        *assets(base, False),
        "--output-dir",
        base / "run/releases/bad-mix",
    )
    assert rc == 2 and "cannot consume a native-tool trajectory release" in err
    # the legacy validator refuses the real trajectory parquet
    rc, err = run(
        capsys,
        "sft-validate",
        "--dataset-dir",
        base / "run/releases/traj",
        *assets(base),
        "--report",
        tmp_path / "v.json",
    )
    assert rc == 2 and "trajectory-validate" in err


# ---------------------------------------------------------------- bad think files


def _bad_think(base, collected, capsys, tmp_path, edit, expect):
    fill(base, collected, tmp_path / "think/filled.jsonl", edit)
    out = tmp_path / "rel"
    rc, err = export(base, capsys, out, think="file:think/filled.jsonl", root=tmp_path, failed=tmp_path / "failed.json")
    assert rc == 2 and expect in err, err
    assert not out.exists()
    audit = read_json(tmp_path / "failed.json")
    assert audit["status"] == "failed" and any(expect in f["reason"] for f in audit["failed"])
    return audit


def test_tool_think_too_few(base, collected, capsys, tmp_path):
    def edit(rows):
        r = next(r for r in rows if r["trajectory_class"] == "multi_tool")
        r["tool_think"] = r["tool_think"][:-1]
        return rows

    a = _bad_think(base, collected, capsys, tmp_path, edit, "tool_think has 2 entries, the trajectory has 3")
    assert a["failed"][0]["line"] >= 1


def test_duplicated_sample_id(base, collected, capsys, tmp_path):
    _bad_think(base, collected, capsys, tmp_path, lambda rows: rows + [rows[3]], "duplicated sample_id")


def test_missing_and_extra_sample_id(base, collected, capsys, tmp_path):
    def edit(rows):
        rows[0] = {**rows[0], "sample_id": "shougang-ffffffffffffffff:traj"}
        return rows

    a = _bad_think(base, collected, capsys, tmp_path, edit, "missing from the think source")
    assert any("extra sample_id" in f["reason"] for f in a["failed"])


def test_file_outside_allowed_folder(base, collected, capsys, tmp_path):
    fill(base, collected, tmp_path / "outside.jsonl")
    (tmp_path / "root").mkdir()
    rc, err = export(base, capsys, tmp_path / "rel", think="file:../outside.jsonl", root=tmp_path / "root")
    assert rc == 2 and "outside the allowed folder" in err and not (tmp_path / "rel").exists()


# ---------------------------------------------------------------- bad rows in a published release


@pytest.fixture(scope="module")
def mock_release(base):
    assert (
        main(
            [
                "release",
                "trajectory-export",
                "--dataset",
                "shougang",
                "--canonical",
                str(base / "run/canonical/shougang/all.json"),
                *map(str, assets(base)),
                "--think-source",
                "mock",
                "--output-dir",
                str(base / "run/releases/mock"),
                "--no-progress",
            ]
        )
        == 0
    )
    return base / "run/releases/mock"


def _edit_and_validate(base, mock_release, capsys, tmp_path, edit, expect):
    d = tmp_path / "rel"
    shutil.copytree(mock_release, d)
    p = d / "train.parquet"
    rows = pq.read_table(p).to_pylist()
    i = edit(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(p)), p)
    rc, err = run(capsys, "trajectory-validate", "--dataset-dir", d, *assets(base))
    assert rc == 2 and expect in err and f"train.parquet:{i + 1}" in err, err


def _first(rows, klass):
    return next(i for i, r in enumerate(rows) if r["trajectory_class"] == klass)


def test_tool_result_differs_from_reexecution(base, mock_release, capsys, tmp_path):
    def edit(rows):
        i = _first(rows, "single_tool")
        tool = rows[i]["messages"][3]
        tool["content"] = tool["content"].replace('"path": "', '"path": "伪造/')
        return i

    _edit_and_validate(base, mock_release, capsys, tmp_path, edit, "differs from re-execution of read_category")


def test_final_answer_outside_candidates(base, mock_release, capsys, tmp_path):
    def edit(rows):
        i = _first(rows, "direct")
        last = rows[i]["messages"][-1]
        last["content"] = json.dumps({"choice_id": "K00000000", "data_level": "L1"})
        return i

    _edit_and_validate(base, mock_release, capsys, tmp_path, edit, "outside the candidates")


def test_assistant_turn_without_reasoning(base, mock_release, capsys, tmp_path):
    def edit(rows):
        i = _first(rows, "multi_tool")
        rows[i]["messages"][4]["reasoning_content"] = None
        return i

    _edit_and_validate(base, mock_release, capsys, tmp_path, edit, "has no reasoning_content")
