"""The prompt-conflict audit, run in this process on canonical files edited by hand: which records it audits (the
split, a record without one), the conflicts it names (within a dataset, across datasets only as a bundle), the
unknown labels it lists and why, the caps on both lists, and where a bad record is."""

import json
from pathlib import Path

import pytest

import vtreetrm.release.audit as audit
from vtreetrm.release.audit import AuditInputs, _key_digest, audit_prompt_conflicts
from vtreetrm.release.canonical import synthetic_chain
from vtreetrm.utils import UserError, read_json


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    t = tmp_path_factory.mktemp("audit")
    c = synthetic_chain(t, records=40, split_seed=42)
    recs = [json.loads(line.rstrip(",\n")) for line in (c.run / "canonical/shougang/all.json").read_text().splitlines()
            if line.startswith("{")]  # fmt: skip
    return c, recs


def write(path: Path, recs: list) -> str:
    path.write_text("[\n" + ",\n".join(json.dumps(r, ensure_ascii=False) for r in recs) + "\n]\n", encoding="utf-8")
    return str(path)


def run(c, tmp_path, sets: dict, **kw) -> dict:
    "The audit of {name: records} (each against the chain's standards): its report."
    std = c.syn / "STANDARDS"
    inputs = AuditInputs(
        [f"{n}={write(tmp_path / f'{n}.json', r)}" for n, r in sets.items()],
        [f"{n}={std}/shougang.classification.json" for n in sets],
        [f"{n}={std}/shougang.grading.json" for n in sets],
    )
    rc = audit_prompt_conflicts(inputs, str(tmp_path / "audit.json"), **{"progress": False, **kw})
    rep = read_json(tmp_path / "audit.json")
    assert rc == (0 if rep["status"] == "passed" else 1)
    return rep


def train(recs: list) -> list:
    return [r for r in recs if r["split"] == "train"]


def test_a_clean_set_passes_and_only_its_split_is_audited(chain, tmp_path, capsys):
    c, recs = chain
    rep = run(c, tmp_path, {"a": recs})
    assert "audit a" not in capsys.readouterr().err  # no bar unless asked
    run(c, tmp_path, {"a": recs}, progress=True)
    assert "audit a" in capsys.readouterr().err
    assert rep["status"] == "passed" and rep["conflict_keys"] == 0 and rep["unknown_labels"] == 0
    assert rep["records_audited"] == rep["datasets"]["a"]["records_audited"] == len(train(recs)) < len(recs)
    assert run(c, tmp_path, {"a": recs}, split="all")["records_audited"] == len(recs)
    test = sum(r["split"] == "test" for r in recs)
    assert test and run(c, tmp_path, {"a": recs}, split="test")["records_audited"] == test


def test_a_key_with_two_labels_is_named_with_every_id(chain, tmp_path):
    c, recs = chain
    tr = train(recs)
    a = [dict(r) for r in recs]
    i, j = [k for k, r in enumerate(a) if r["split"] == "train"][:2]
    a[j] = {**a[j], "metadata": a[i]["metadata"], "target": {**a[i]["target"], "data_level": "L3"}}
    rep = run(c, tmp_path, {"a": a})
    assert rep["status"] == "failed" and rep["conflict_keys"] == 1 and len(tr) == rep["records_audited"]
    (conf,) = rep["conflicts"]
    cid = a[i]["target"]["category_id"]
    assert conf["labels"] == [
        {"category_id": cid, "data_level": a[i]["target"]["data_level"], "ids": [f"a:{a[i]['id']}"]},
        {"category_id": cid, "data_level": "L3", "ids": [f"a:{a[j]['id']}"]},
    ]
    assert a[i]["metadata"]["field_name"] in conf["key"]


def test_keys_collide_across_datasets_only_in_a_bundle(chain, tmp_path):
    c, recs = chain
    r0 = train(recs)[0]
    other = [{**r0, "id": "b-1", "dataset": "b", "target": {**r0["target"], "data_level": "L4"}}]
    apart = run(c, tmp_path, {"a": recs, "b": other})
    together = run(c, tmp_path, {"a": recs, "b": other}, bundle=True)
    assert apart["status"] == "passed" and apart["conflict_keys"] == 0
    assert together["status"] == "failed" and together["conflict_keys"] == 1
    ids = [x["ids"] for x in together["conflicts"][0]["labels"]]
    assert ids == [[f"a:{r0['id']}"], ["b:b-1"]]
    assert _key_digest("a", "k", True) == _key_digest("b", "k", True) != _key_digest("a", "k", False)
    assert len(_key_digest("a", "k", False)) == 12


def test_unknown_labels_are_listed_with_their_reason_up_to_the_cap(chain, tmp_path, monkeypatch):
    c, recs = chain
    a = [dict(r) for r in recs]
    tr = [k for k, r in enumerate(a) if r["split"] == "train"]
    a[tr[0]] = {**a[tr[0]], "target": {**a[tr[0]]["target"], "category_id": "C01.01"}}  # a parent, not a leaf
    a[tr[1]] = {**a[tr[1]], "target": {**a[tr[1]]["target"], "data_level": "L9"}}
    rep = run(c, tmp_path, {"a": a})
    assert rep["status"] == "failed" and rep["unknown_labels"] == 2 and rep["conflict_keys"] == 0
    assert rep["unknown"] == [
        {"dataset": "a", "id": a[tr[0]]["id"], "category_id": "C01.01", "data_level": a[tr[0]]["target"]["data_level"],
         "reason": "category not a leaf of the classification standard"},
        {"dataset": "a", "id": a[tr[1]]["id"], "category_id": a[tr[1]]["target"]["category_id"], "data_level": "L9",
         "reason": "level not approved"},
    ]  # fmt: skip
    monkeypatch.setattr(audit, "MAX_CONFLICTS_LISTED", 1)
    rep = run(c, tmp_path, {"a": a})
    assert rep["unknown_labels"] == 1 and len(rep["unknown"]) == 1  # the list stops at the cap


def test_conflicts_listed_stop_at_the_cap(chain, tmp_path, monkeypatch):
    c, recs = chain
    a, tr = [dict(r) for r in recs], [k for k, r in enumerate(recs) if r["split"] == "train"]
    for i, j in ((tr[0], tr[1]), (tr[2], tr[3])):
        lvl = "L3" if a[i]["target"]["data_level"] != "L3" else "L2"
        a[j] = {**a[j], "metadata": a[i]["metadata"], "target": {**a[i]["target"], "data_level": lvl}}
    monkeypatch.setattr(audit, "MAX_CONFLICTS_LISTED", 1)
    rep = run(c, tmp_path, {"a": a})
    assert rep["conflict_keys"] == 2 and len(rep["conflicts"]) == 1


def test_records_without_a_split_are_counted_and_refused(chain, tmp_path):
    c, recs = chain
    a = [dict(r) for r in recs]
    for k in (0, 5):
        a[k] = {x: v for x, v in a[k].items() if x != "split"}
    with pytest.raises(UserError, match=r"^.*a\.json: field 'split': 2 record\(s\) have no embedded split"):
        run(c, tmp_path, {"a": a}, split="all")
    i, j = 1, 2  # and with a conflict for pass 2 to read, past the records without a split
    a[j] = {**a[j], "metadata": a[i]["metadata"], "target": {**a[i]["target"], "data_level": "L9"}}
    with pytest.raises(UserError, match=r"2 record\(s\) have no embedded split"):
        run(c, tmp_path, {"a": a}, split="all")


def test_a_bad_record_is_named_by_file_and_line(chain, tmp_path):
    c, recs = chain
    a = [dict(r) for r in recs]
    a[3] = {x: v for x, v in a[3].items() if x != "target"}
    with pytest.raises(UserError) as e:
        run(c, tmp_path, {"a": a}, split="all")
    assert (Path(e.value.path).name, e.value.line, e.value.field) == (
        "a.json",
        5,
        "target",
    )  # the file's line: the 4th record, after the "["
