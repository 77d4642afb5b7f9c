"""End-to-end checks of the classification release chain, driven through `vtreetrm release ...` like a user."""

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import openpyxl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vtreetrm.cli import main
from vtreetrm.release.assets import iter_records, write_grading_manifest, write_records
from vtreetrm.release.cli import chain_commands
from vtreetrm.utils import read_json, sha256_file

MF = ["--metadata-fields", "field_name", "table_name", "field_description", "table_description"]


def run(capsys, *argv):
    "Run `vtreetrm release ...`; returns (exit code, stderr)."
    rc = main(["release", *map(str, argv), "--no-progress"])
    return rc, capsys.readouterr().err


class Chain:
    def __init__(self, root: Path, records=400, conflicts=0):
        self.root, self.syn, self.run = root, root / "syn", root / "run"
        self.records, self.conflicts = records, conflicts
        s = self.syn
        self.xlsx, self.mapping = s / "RAW/shougang.xlsx", s / "ASSETS/mappings/shougang.mapping.json"
        self.registry, self.corpus = (
            s / "ASSETS/registries/shougang.registry.json",
            s / "ASSETS/corpora/shougang.corpus.json",
        )
        self.task, self.grading = s / "CFG/shougang.task.json", s / "STANDARDS/shougang.grading.json"
        self.cls = s / "STANDARDS/shougang.classification.json"
        self.can = self.run / "canonical/shougang/all.json"

    def assets(self, grading=True):
        a = ["--registry", self.registry, "--corpus", self.corpus, *MF, "--task-config", self.task]
        return a + (["--grading-config", self.grading] if grading else [])

    def steps(self):
        "The chain up to the RL cascade's validation (the trajectory steps have their own tests)."
        cmds = chain_commands(self.syn, self.run, self.records, self.conflicts)
        return {k: v for k, v in cmds.items() if not k.startswith("trajectory-")}

    def manifest(self):
        self.run.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.grading, self.run / "grading.json")
        write_grading_manifest(self.run / "grading-manifest.json", {"shougang": "grading.json"})

    def go(self, capsys, upto=None):
        for name, argv in self.steps().items():
            if name == "mixture-sft":
                self.manifest()
            rc, err = run(capsys, *argv)
            assert rc == 0, (name, err)
            if name == upto:
                break


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    c = Chain(tmp_path_factory.mktemp("chain"))
    c.go(_Cap())
    return c


class _Cap:
    "capsys stand-in for the module fixture."

    def readouterr(self):
        class R:
            err = ""

        return R()


def fresh(tmp_path, capsys, upto, records=120, conflicts=0):
    c = Chain(tmp_path, records, conflicts)
    c.go(capsys, upto)
    return c


# ---------------------------------------------------------------- the happy path


def test_chain_outputs_and_reports(chain):
    r = chain.run
    pre = read_json(r / "processed/shougang/preprocess_report.json")
    assert pre["records"] == 400 and pre["formal"] is True and pre["blank_rows"] > 0 and pre["merged_filled"] > 0
    assert str(chain.xlsx) in pre["provenance"]["inputs"] and pre["provenance"]["inputs"][
        str(chain.xlsx)
    ] == sha256_file(chain.xlsx)
    assert (
        pre["provenance"]["command"][:3] == ["vtreetrm", "release", "preprocess"]
        and "pyarrow" in pre["provenance"]["versions"]
    )
    can = read_json(r / "canonical/shougang/canonical_report.json")
    assert (can["records"], can["unresolved_count"]) == (400, 0)
    sp = read_json(r / "canonical/shougang/split_report.json")
    assert sum(sp["counts"].values()) == 400 and sp["seed"] == 42
    recs = [d for _, d in iter_records(chain.can)]
    assert len(recs) == 400 and all(d["split"] in ("train", "val", "test") for d in recs)
    assert not any(
        "\uff3f" in d["metadata"]["field_name"] or d["metadata"]["field_name"] != d["metadata"]["field_name"].strip()
        for d in recs
    )
    au = read_json(r / "audits/shougang.prompt.json")
    assert (au["status"], au["conflict_keys"]) == ("passed", 0)
    ex = read_json(r / "releases/sft-legacy/shougang/export_report.json")
    assert sum(ex["rows"].values()) == 800 and ex["validation"]["valid"]
    v = read_json(r / "releases/sft-legacy/shougang/validation.json")
    assert v["status"] == "passed" and v["sources"] == 400
    assert {s: v["counts"][s].get("stage1") for s in v["counts"]} == {s: sp["counts"][s] for s in sp["counts"]}
    mx = read_json(r / "releases/rl/shougang/mixture_report.json")
    assert sum(mx["rows"].values()) == 400
    assert (r / "releases/rl/shougang/grading/grading-manifest.json").is_file()
    assert read_json(r / "releases/rl/shougang/validation.json")["status"] == "passed"
    assert read_json(r / "releases/sft-legacy/standardized/mixture_report.json")["validation"]["valid"]


def test_the_chain_runs_again_over_its_own_outputs(tmp_path, capsys):
    "Every step run a second time replaces its own output, the validators' reports inside the releases included."
    c = fresh(tmp_path, capsys, None)
    before = read_json(c.run / "releases/sft-legacy/shougang/validation.json")
    c.go(capsys)
    assert read_json(c.run / "releases/sft-legacy/shougang/validation.json")["counts"] == before["counts"]
    (c.run / "releases/sft-legacy/shougang/my_notes.txt").write_text("keep")
    rc, err = run(capsys, *c.steps()["sft-export"])
    assert rc == 2 and "my_notes.txt were added" in err  # what a user added is still never deleted


def test_sft_rows_follow_the_truth_table(chain):
    for s in ("train", "val", "test"):
        t = pq.read_table(chain.run / f"releases/sft-legacy/shougang/{s}.parquet").to_pylist()
        by = {}
        for row in t:
            assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant"]
            assert row["answer"] == row["messages"][2]["content"]
            by.setdefault(row["source_id"], []).append(row["stage"])
        assert all(sorted(v) == ["stage1", "stage2"] for v in by.values())
    # the canonical category id never appears in a prompt
    ids = {d["target"]["category_id"] for _, d in iter_records(chain.can)}
    text = "".join(m["content"] for row in t for m in row["messages"])
    assert not any(i in text for i in ids)


def test_rl_release_has_exactly_five_fields(chain):
    for d in ("releases/rl/source/shougang", "releases/rl/shougang"):
        t = pq.read_table(chain.run / d / "train.parquet")
        assert t.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    row = pq.read_table(chain.run / "releases/rl/shougang/train.parquet").slice(0, 1).to_pylist()[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"] and set(
        json.loads(row["reward_model"]["ground_truth"])
    ) == {"choice_id", "data_level"}


def test_split_is_stable_when_records_are_added(tmp_path, capsys):
    a = fresh(tmp_path / "a", capsys, "split", records=150)
    b = fresh(tmp_path / "b", capsys, "split", records=300)
    sa = {d["id"]: d["split"] for _, d in iter_records(a.can)}
    sb = {d["id"]: d["split"] for _, d in iter_records(b.can)}
    common = set(sa) & set(sb)
    assert len(common) > 100 and all(sa[i] == sb[i] for i in common)
    # re-running split keeps existing assignments even with another seed
    rc, _ = run(capsys, "split", "--canonical-dir", a.run / "canonical", "--seed", 7)
    assert rc == 0 and {d["id"]: d["split"] for _, d in iter_records(a.can)} == sa


def test_audit_reports_conflicts_and_exits_nonzero(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "split", records=200, conflicts=3)
    argv = c.steps()["audit"]
    argv[argv.index("train")] = "all"
    rc, _ = run(capsys, *argv)
    rep = read_json(c.run / "audits/shougang.prompt.json")
    assert rc == 1 and rep["status"] == "failed" and rep["conflict_keys"] == 3
    assert len(rep["conflicts"][0]["labels"]) == 2


# ---------------------------------------------------------------- bad input: workbook


def _edit_xlsx(path, fn):
    wb = openpyxl.load_workbook(path)
    fn(wb)
    wb.save(path)


def _data_rows(ws):
    return [r for r in range(4, ws.max_row + 1) if ws.cell(r, 3).value]


def test_missing_sheet(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "make-synthetic")
    _edit_xlsx(c.xlsx, lambda wb: wb.remove(wb["财务"]))
    rc, err = run(capsys, *c.steps()["preprocess"])
    assert rc == 2 and "missing sheet '财务'" in err and "shougang.xlsx" in err
    assert not (c.run / "processed/shougang/all.json").exists()


def test_missing_column(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "make-synthetic")
    _edit_xlsx(c.xlsx, lambda wb: wb["人力资源"].delete_cols(4))
    rc, err = run(capsys, *c.steps()["preprocess"])
    assert rc == 2 and "[人力资源]:3" in err and "missing column '字段描述(中文)'" in err and "field_description" in err


def test_empty_key(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "make-synthetic")
    row = {}

    def blank(wb):
        ws = wb["生产制造"]
        r = _data_rows(ws)[5]
        row["r"] = r
        ws.cell(r, 3).value = "   "

    _edit_xlsx(c.xlsx, blank)
    rc, err = run(capsys, *c.steps()["preprocess"])
    assert rc == 2 and f"[生产制造]:{row['r']}: field 'field_name': empty field_name" in err


def test_duplicated_key(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "make-synthetic")
    row = {}

    def dup(wb):
        ws = wb["财务"]
        r = next(r for r in _data_rows(ws) if ws.cell(r, 1).value)
        vals = [ws.cell(r, j).value for j in range(1, 7)]
        vals[2] = "  " + vals[2] + "\u3000"  # same key after normalization
        ws.append(vals)
        row["r"] = ws.max_row

    _edit_xlsx(c.xlsx, dup)
    rc, err = run(capsys, *c.steps()["preprocess"])
    assert rc == 2 and f"[财务]:{row['r']}: field 'field_name': duplicated key" in err


def test_unknown_category_and_unapproved_level(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "make-synthetic")
    rows = {}

    def bad(wb):
        ws = wb["销售与客户"]
        rs = _data_rows(ws)
        ws.cell(rs[2], 5).value = "销售与客户/不存在的类/某叶子"
        ws.cell(rs[4], 6).value = "L9"
        rows.update(cat=rs[2], lvl=rs[4])

    _edit_xlsx(c.xlsx, bad)
    assert run(capsys, *c.steps()["preprocess"])[0] == 0
    rc, err = run(capsys, *c.steps()["canonical"])
    assert rc == 2 and f"[销售与客户]:{rows['cat']}: field 'target.category'" in err and "not in the registry" in err
    assert not (c.run / "canonical/shougang").exists()
    failed = read_json(c.run / "canonical/shougang.canonical_report.failed.json")
    assert failed["unresolved_count"] == 2 and {u["field"] for u in failed["unresolved"]} == {
        "target.category",
        "target.data_level",
    }
    assert any("'L9' is not approved" in u["reason"] for u in failed["unresolved"])
    rc, _ = run(capsys, *c.steps()["canonical"], "--allow-unresolved")
    assert rc == 0 and read_json(c.run / "canonical/shougang/canonical_report.json")["records"] == c.records - 2


# ---------------------------------------------------------------- bad input: release steps


def test_level_not_approved_at_export(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "audit")
    recs = [d for _, d in iter_records(c.can)]
    recs[7]["target"]["data_level"] = "L7"
    write_records(c.can, recs)
    rc, err = run(capsys, *c.steps()["sft-export"])
    assert rc == 2 and "all.json:9: field 'data_level'" in err and "'L7' is not approved" in err
    assert not (c.run / "releases/sft-legacy/shougang").exists()


def test_metadata_fields_must_match_task_config(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "sft-export")
    before = {p.name: sha256_file(p) for p in (c.run / "releases/sft-legacy/shougang").iterdir()}
    argv = c.steps()["sft-export"]
    i = argv.index("table_name")
    argv[i : i + 1] = []
    rc, err = run(capsys, *argv)
    assert rc == 2 and "differs from the task config" in err and "metadata_fields" in err
    # the failed command left the previous release intact and nothing partial visible
    assert {p.name: sha256_file(p) for p in (c.run / "releases/sft-legacy/shougang").iterdir()} == before
    assert [p.name for p in (c.run / "releases/sft-legacy").iterdir() if not p.name.startswith(".")] == ["shougang"]


def test_grading_manifest_sha_mismatch(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "rl-export")
    c.manifest()
    with open(c.run / "grading.json", "a") as f:
        f.write("\n")
    rc, err = run(capsys, *c.steps()["mixture-rl"])
    want = read_json(c.run / "grading-manifest.json")["datasets"]["shougang"]["sha256"]
    assert rc == 2 and "sha256 mismatch" in err and want in err and sha256_file(c.run / "grading.json") in err
    assert not (c.run / "releases/rl/shougang").exists()


def _sft_dir(c):
    return c.run / "releases/sft-legacy/shougang"


def test_corrupted_parquet(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "sft-export")
    p = _sft_dir(c) / "val.parquet"
    p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
    rc, err = run(capsys, *c.steps()["sft-validate"])
    assert rc == 2 and "val.parquet" in err and "not a readable parquet" in err


def test_fourth_message(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "sft-export")
    p = _sft_dir(c) / "train.parquet"
    rows = pq.read_table(p).to_pylist()
    rows[3]["messages"].append({"role": "assistant", "content": '{"choice_id": "K00000000"}'})
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(p)), p)
    rc, err = run(capsys, *c.steps()["sft-validate"])
    assert rc == 2 and "train.parquet:4: field 'messages': expected exactly 3 messages" in err
    assert read_json(_sft_dir(c) / "validation.json")["status"] == "failed"


def test_stage1_without_stage2_twin(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "sft-export")
    p = _sft_dir(c) / "test.parquet"
    t = pq.read_table(p)
    keep = [i for i, s in enumerate(t.column("stage").to_pylist()) if not (s == "stage2" and i == 1)]
    pq.write_table(t.take(keep), p)
    rc, err = run(capsys, *c.steps()["sft-validate"])
    assert rc == 2 and "stage1 row of source" in err and "has no stage2 twin" in err


def test_edited_answer_inconsistent_with_assets(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "sft-export")
    p = _sft_dir(c) / "train.parquet"
    rows = pq.read_table(p).to_pylist()
    r = next(r for r in rows if r["stage"] == "stage2")
    r["messages"][2]["content"] = r["answer"] = '{"data_level": "L9"}'
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(p)), p)
    rc, err = run(capsys, *c.steps()["sft-validate"])
    assert rc == 2 and "'L9' is not approved" in err


def test_sft_validate_and_mixture_refuse_trajectory_parquet(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "sft-export")
    d = tmp_path / "traj"
    d.mkdir()
    for s in ("train", "val", "test"):
        pq.write_table(
            pa.table(
                {
                    "stage": ["tool_trajectory"],
                    "trajectory_format": ["qwen3.5-native-tools-v2"],
                    "messages": [[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]],
                    "tools": ["[]"],
                }
            ),
            d / f"{s}.parquet",
        )
    argv = c.steps()["sft-validate"]
    argv[argv.index(_sft_dir(c))] = d
    rc, err = run(capsys, *argv)
    assert rc == 2 and "trajectory release" in err and "trajectory-validate" in err
    c.manifest()
    argv = c.steps()["mixture-sft"]
    argv[argv.index(f"shougang={c.run}/releases/sft-legacy/shougang")] = f"shougang={d}"
    rc, err = run(capsys, *argv)
    assert rc == 2 and "--family sft cannot consume a native-tool trajectory release" in err


def test_split_file_reassigning_ids(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "split")
    recs = [d for _, d in iter_records(c.can)]
    flip = {"train": "test", "val": "train", "test": "val"}
    (tmp_path / "frozen.jsonl").write_text(
        json.dumps({"id": recs[0]["id"], "split": recs[0]["split"]})
        + "\n"
        + json.dumps({"id": recs[1]["id"], "split": flip[recs[1]["split"]]})
        + "\n"
    )
    before = sha256_file(c.can)
    rc, err = run(capsys, "split", "--canonical-dir", c.run / "canonical", "--split-file", tmp_path / "frozen.jsonl")
    assert rc == 2 and "frozen.jsonl:2" in err and f"reassigns existing id {recs[1]['id']}" in err
    assert sha256_file(c.can) == before


def test_rl_cascade_validation_catches_edits(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "rl-validate-cascade")
    p = c.run / "releases/rl/shougang/train.parquet"
    rows = pq.read_table(p).to_pylist()
    gt = json.loads(rows[0]["reward_model"]["ground_truth"])
    gt["data_level"] = "L8"
    rows[0]["reward_model"]["ground_truth"] = json.dumps(gt)
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(p)), p)
    rc, err = run(capsys, *c.steps()["rl-validate-cascade"])
    assert rc == 2 and "train.parquet:1: field 'reward_model'" in err and "'L8' is not approved" in err


def test_non_formal_dataset_is_flagged(tmp_path, capsys):
    c = Chain(tmp_path)
    rc, _ = run(capsys, "make-synthetic", "--out", c.syn, "--records", 30, "--dataset", "toy")
    rep = read_json(c.syn / "synthetic_report.json")
    assert rc == 0 and rep["formal"] is False and "test data" in rep["note"]


def test_killed_export_leaves_previous_release(tmp_path, capsys):
    c = fresh(tmp_path, capsys, "sft-export", records=3000)
    out = _sft_dir(c)
    before = {p.name: sha256_file(p) for p in out.iterdir()}
    argv = [
        sys.executable,
        "-c",
        "import sys; from vtreetrm.cli import main; sys.exit(main(sys.argv[1:]))",
        "release",
        *map(str, c.steps()["sft-export"]),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not any(
        p.name.startswith(".shougang.tmp-") and any(p.iterdir()) for p in out.parent.iterdir()
    ):
        time.sleep(0.05)
    # killed mid-export: its temporary folder holds files and the process has not finished
    assert proc.poll() is None, "the export finished before it could be killed: the test proves nothing"
    assert time.time() < deadline, "the export never started writing its temporary folder"
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert {p.name: sha256_file(p) for p in out.iterdir()} == before
    assert [p.name for p in out.parent.iterdir() if not p.name.startswith(".")] == ["shougang"]


def test_rl_cascade_release_is_self_contained(chain, capsys, tmp_path):
    # the release carries its grading copy and manifest: validation works without the original manifest
    argv = chain.steps()["rl-validate-cascade"]
    i = argv.index("--grading-manifest")
    del argv[i : i + 2]
    argv[argv.index("--report") + 1] = tmp_path / "v.json"
    rc, err = run(capsys, *argv)
    assert rc == 0, err
    rep = read_json(tmp_path / "v.json")
    assert rep["status"] == "passed" and rep["rows"] == 400
    assert any(k.endswith("grading/grading-manifest.json") for k in rep["provenance"]["inputs"])
