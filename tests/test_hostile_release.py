"""Hostile inputs to the release and eval lines: a rollout gate report that contradicts itself or names another
model, labels the answer parser would rewrite, repeated episodes, malformed ground truths, a byte-order mark, and a
spreadsheet with one huge cell. Each is refused in one line (or read as the user meant), never scored silently."""

import csv as csv_module
import json
import re
from pathlib import Path

import pytest

from vtreetrm.cli import main

GT = json.dumps({"choice_id": "K12345678", "data_level": "L2"})
WRONG = json.dumps({"choice_id": "K00000000", "data_level": "L2"})


def run(capsys, *argv):
    "`vtreetrm ARGV` in-process: (exit code, stdout, stderr)."
    rc = main([*map(str, argv)])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def one_line(rc, err, *needles):
    "A refusal: exit 2, one `error:` line naming every needle, no traceback."
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and all(n in lines[0] for n in needles), err


def make_model(d: Path) -> Path:
    "A model folder as far as its identity goes: config, weights, tokenizer with a chat template, generation config."
    d.mkdir(parents=True)
    (d / "config.json").write_text('{"model_type": "qwen2"}')
    (d / "model.safetensors").write_bytes(b"weights")
    (d / "tokenizer.json").write_text('{"version": "1.0"}')
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "chat_template": "{{ x }}"}))
    (d / "generation_config.json").write_text('{"eos_token_id": 2}')
    return d


def dump(path: Path, rights: int, n: int, ids=None) -> Path:
    "A rollout dump of `n` episodes, the first `rights` of them right."
    ids = ids or [f"s{i}" for i in range(n)]
    lines = [{"sample_id": s, "ground_truth": GT, "response": GT if i < rights else WRONG} for i, s in enumerate(ids)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture
def gated(tmp_path, capsys):
    "A model and the rollout gate report that passed for it (2/10 nonzero)."
    m = make_model(tmp_path / "model")
    gate = tmp_path / "gate.json"
    rc, _, err = run(capsys, "release", "rollout-gate", "--from-dump", dump(tmp_path / "d.jsonl", 2, 10),
                     "--model", m, "--report", gate)  # fmt: skip
    assert rc == 0, err
    return m, gate


def verl_rl(capsys, tmp_path, model, gate):
    "`release verl-rl` up to its gates (the audit and release do not exist: the rollout gate is checked first)."
    return run(capsys, "release", "verl-rl", "--release", tmp_path / "rel", "--sft-model", model,
               "--registry", tmp_path / "r.json", "--corpus", tmp_path / "c.json", "--task-config", tmp_path / "t.json",
               "--rollout-gate", gate, "--audit", tmp_path / "audit.json", "--reference", model,
               "--output-dir", tmp_path / "launch")  # fmt: skip


def test_gate_that_passes_reaches_the_audit(tmp_path, capsys, gated):
    "The control: an untouched gate report is accepted and the launch goes on to the audit."
    m, gate = gated
    rc, _, err = verl_rl(capsys, tmp_path, m, gate)
    one_line(rc, err, "audit.json")


@pytest.mark.parametrize("edit", [{"passed": True}, {"passed": True, "status": "passed"}])
def test_verl_rl_refuses_a_failed_gate_marked_passed(tmp_path, capsys, edit):
    "A gate that failed at 95% nonzero, edited to say `passed: true`: verl-rl re-derives the verdict and refuses."
    m = make_model(tmp_path / "model")
    gate = tmp_path / "gate.json"
    rc, _, _ = run(capsys, "release", "rollout-gate", "--from-dump", dump(tmp_path / "d.jsonl", 19, 20),
                   "--model", m, "--report", gate)  # fmt: skip
    assert rc == 1
    gate.write_text(json.dumps({**json.loads(gate.read_text()), **edit}))
    rc, _, err = verl_rl(capsys, tmp_path, m, gate)
    one_line(rc, err, "gate.json", "rollout gate did not pass", "19/20 nonzero = 95.00%", "status ")
    assert not (tmp_path / "launch").exists()


@pytest.mark.parametrize(
    "edit, says",
    [
        ({"status": "failed"}, "says status 'failed', passed True"),
        ({"passed": False}, "passed False"),
        ({"nonzero_reward_rate": 0.1}, "nonzero_reward_rate 0.1 is not 2/10"),
        ({"gate_range": [0.0, 1.0]}, "gate_range [0.0, 1.0]"),
        ({"denominator": 0}, "denominator is 0"),
        ({"nonzero_reward_numerator": "2"}, "nonzero_reward_numerator is '2'"),
        ({"episodes": []}, "lists 0 episodes"),
        ({"nonzero_reward_numerator": 3, "nonzero_reward_rate": 0.3}, "episodes have 2 nonzero rewards: not 3/10"),
    ],
)
def test_verl_rl_refuses_a_gate_report_that_does_not_add_up(tmp_path, capsys, gated, edit, says):
    "A gate report whose verdict, rate, band, denominator or episodes disagree with each other is refused in one line."
    m, gate = gated
    gate.write_text(json.dumps({**json.loads(gate.read_text()), **edit}))
    rc, _, err = verl_rl(capsys, tmp_path, m, gate)
    one_line(rc, err, "gate.json", "rollout gate", says)
    assert not (tmp_path / "launch").exists()


@pytest.mark.parametrize(
    "name, text",
    [
        ("tokenizer_config.json", json.dumps({"eos_token": "<|endoftext|>", "chat_template": "{{ x }}"})),
        ("tokenizer_config.json", json.dumps({"eos_token": "<|im_end|>", "chat_template": "{{ y }}"})),
        ("chat_template.jinja", "{{ other }}"),
        ("generation_config.json", '{"eos_token_id": 3}'),
        ("tokenizer.json", '{"version": "2.0"}'),
    ],
)
def test_verl_rl_refuses_a_model_changed_after_its_gate(tmp_path, capsys, gated, name, text):
    "The gate's model identity covers the tokenizer, chat template and generation config, not the weights alone."
    m, gate = gated
    (m / name).write_text(text)
    rc, _, err = verl_rl(capsys, tmp_path, m, gate)
    one_line(rc, err, "gate.json", "run on another model", f"files changed: {name}")


def test_model_identity_covers_what_generation_reads(tmp_path):
    "`model_identity` hashes every file that decides what the model generates; other files do not count."
    from vtreetrm.utils import model_identity

    m = make_model(tmp_path / "m")
    a = model_identity(m)
    assert a["files"][0] == "config.json" and set(a["file_sha256"]) == set(a["files"])
    assert {"model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"} <= set(a["files"])
    (m / "README.md").write_text("notes")
    assert model_identity(m)["sha256"] == a["sha256"]
    (m / "special_tokens_map.json").write_text("{}")
    assert model_identity(m)["sha256"] != a["sha256"]


# labels the answer parser would rewrite: separators, list markers, edge punctuation (case and spacing do not count)
REWRITTEN = ["eat; drink", "eat, drink", "run | jump", "eat，drink", "eat；drink", "eat、drink", "eat\ndrink",
             "walk.", "walk。", "A. walk", "1. walk", "2) walk", "'walk'", "*walk*", "- walk", "• walk"]  # fmt: skip


def predictions(path: Path, gold, output_label, candidates=None) -> Path:
    "A one-line predictions.jsonl whose output names `output_label` exactly."
    line = {"id": "a", "gold": gold, "output": f"<predicted_actions>{output_label}</predicted_actions>"}
    if candidates is not None:
        line["candidates"] = candidates
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(line, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("label", REWRITTEN)
def test_every_label_check_refuses_a_label_the_parser_rewrites(tmp_path, capsys, label):
    "An exact prediction of such a label would score 0.5 or 0: label maps, gold, candidates and imports refuse it."
    shown = repr(label)[1:-1]
    p = predictions(tmp_path / "gold/predictions.jsonl", [label], label)
    one_line(*run(capsys, "eval", "metrics", p)[::2], "predictions.jsonl:1", shown, "answer parser")
    p = predictions(tmp_path / "cand/predictions.jsonl", ["walking"], "walking", ["walking", label])
    one_line(*run(capsys, "eval", "metrics", p)[::2], "predictions.jsonl:1", "candidates", shown)
    lm = tmp_path / "map.json"
    for mapping in ({label: "walking"}, {"walking": label}):
        lm.write_text(json.dumps(mapping, ensure_ascii=False), encoding="utf-8")
        p = predictions(tmp_path / "map/predictions.jsonl", ["walking"], "walking")
        one_line(*run(capsys, "eval", "metrics", p, "--label-map", lm)[::2], "map.json", shown)
    (tmp_path / "videos").mkdir()
    csv = tmp_path / "a.csv"
    with open(csv, "w", newline="", encoding="utf-8") as f:
        csv_module.writer(f).writerows([["video", "start", "end", "label"], ["v1", "0", "1", label]])
    one_line(*run(capsys, "video", "import", csv, "--format", "csv", "--videos", tmp_path / "videos",
                  "--out", tmp_path / "ds")[::2], "a.csv", shown)  # fmt: skip
    one_line(*run(capsys, "video", "import", csv, "--format", "csv", "--videos", tmp_path / "videos",
                  "--out", tmp_path / "ds", "--label-map", lm)[::2], "map.json", shown)  # fmt: skip


def test_compute_metrics_refuses_a_label_the_parser_rewrites():
    "The Python entry point of the metrics checks its label space by the same rule."
    from vtreetrm.eval.metrics import compute_metrics
    from vtreetrm.utils import UserError

    with pytest.raises(UserError, match="answer parser"):
        compute_metrics([["walk."]], [["walk"]])
    with pytest.raises(UserError, match="answer parser"):
        compute_metrics([["walk"]], [["walk"]], [["walk", "A. run"]])


def test_every_accepted_label_parses_back_to_itself_and_scores_one(tmp_path):
    "Property: for random labels over a hostile alphabet, a label the check accepts is read back as itself (snapped"
    " to the candidates as the scorer does) and its exact prediction is its gold label in both readers."
    import random

    from vtreetrm.eval.parse import check_label, label_survives_parsing, norm_label, parse_actions, read_predictions
    from vtreetrm.utils import UserError

    rng = random.Random(0)
    alphabet = list("aZ9 .,;|()-*'\"`•。，；、\n\t\u00a0\u3000Aé<>/") + ["1. ", "A. ", "a) ", "walk", "eat"]
    accepted = 0
    for _ in range(3000):
        label = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))
        read = parse_actions(f"<predicted_actions>{label}</predicted_actions>", [label])  # snapped, as scored
        if label_survives_parsing(label):
            accepted += 1
            assert read == [label] and check_label(label) == label, label
        else:
            assert read != [label], label
            with pytest.raises(UserError, match="answer parser"):
                check_label(label)
    assert accepted > 100
    labels = sorted({"".join(rng.choice(alphabet) for _ in range(4)) for _ in range(400)})
    labels = list({norm_label(x): x for x in labels if label_survives_parsing(x)}.values())  # one spelling each
    lines = [
        {"id": i, "gold": [x], "output": f"<predicted_actions>{x}</predicted_actions>"} for i, x in enumerate(labels)
    ]
    p = tmp_path / "predictions.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    for fast in (True, False):
        pr = read_predictions(p, fast=fast)
        assert (pr.pred_cols.tolist(), pr.pred_rows.tolist()) == (pr.gold_cols.tolist(), pr.gold_rows.tolist())


def test_rollout_gate_refuses_a_repeated_episode(tmp_path, capsys):
    "One right episode written 19 times would lift a 0% model into the band: a repeated sample_id is refused."
    m = make_model(tmp_path / "model")
    d = dump(tmp_path / "d.jsonl", 3, 20, ids=["s0"] * 3 + [f"s{i}" for i in range(3, 20)])
    rc, _, err = run(capsys, "release", "rollout-gate", "--from-dump", d, "--model", m, "--report", tmp_path / "g.json")
    one_line(rc, err, "d.jsonl:2", "sample_id", "'s0'", "line 1")
    assert not (tmp_path / "g.json").exists()


def test_live_rollout_gate_refuses_a_repeated_episode(tmp_path):
    "The live gate draws its episodes from a release split: a split repeating a sample_id is refused before rollout."
    from vtreetrm.release.rollout import _first_rows
    from vtreetrm.utils import UserError

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [{"extra_info": {"sample_id": s}, "x": i} for i, s in enumerate(["a", "b", "a"])]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "val.parquet")
    with pytest.raises(UserError, match=r"val.parquet:3: field 'extra_info.sample_id': sample_id 'a' repeats row 1"):
        _first_rows(tmp_path / "val.parquet", 3, "val")


@pytest.mark.parametrize(
    "gt, says",
    [
        ("{}", "empty"),
        ({}, "empty"),
        ('["K12345678", "L2"]', "list"),
        (["K12345678"], "list"),
        ('{"choice": "K12345678"}', "'choice'"),
        ('{"choice_id": "K12345678", "level": "L2"}', "'level'"),
        ('{"choice_id": ""}', "choice_id"),
        ('{"choice_id": null, "data_level": "L2"}', "choice_id"),
        ("not json", "JSON"),
        (None, "NoneType"),
    ],
)
def test_reward_refuses_a_malformed_ground_truth(gt, says):
    "An empty or malformed ground truth is an error, never a full reward for any answer."
    from vtreetrm.release.reward import compute_score

    with pytest.raises(ValueError, match="ground truth") as e:
        compute_score("shougang", GT, gt)
    assert says in str(e.value)
    assert compute_score("shougang", GT, GT) == 1.0 and compute_score("shougang", GT, {"choice_id": "K12345678"}) == 1.0


def test_rollout_gate_names_the_line_of_a_malformed_ground_truth(tmp_path, capsys):
    "In a dump, such a ground truth is refused in one line naming the line, before any rate is computed."
    m = make_model(tmp_path / "model")
    d = dump(tmp_path / "d.jsonl", 2, 10)
    lines = d.read_text().splitlines()
    lines[4] = json.dumps({"sample_id": "x", "ground_truth": "{}", "response": "anything"})
    d.write_text("\n".join(lines) + "\n")
    rc, _, err = run(capsys, "release", "rollout-gate", "--from-dump", d, "--model", m, "--report", tmp_path / "g.json")
    one_line(rc, err, "d.jsonl:5", "ground_truth", "empty")


BOM = b"\xef\xbb\xbf"


def test_a_byte_order_mark_at_the_start_is_read_by_every_jsonl_reader(tmp_path, capsys):
    "Editors on Windows write a BOM: `eval metrics` (its fast reader) scores the file as without it, like iter_jsonl."
    from vtreetrm.utils import iter_jsonl

    rows = [
        {"id": i, "gold": ["walking"], "output": "<predicted_actions>walking</predicted_actions>"} for i in range(3)
    ]
    text = "".join(json.dumps(r) + "\n" for r in rows).encode()
    for name, data in (("plain", text), ("bom", BOM + text)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "predictions.jsonl").write_bytes(data)
        rc, _, err = run(capsys, "eval", "metrics", tmp_path / name, "--quiet")
        assert rc == 0, err
        assert [o for _, o in iter_jsonl(tmp_path / name / "predictions.jsonl")] == rows
    plain, bom = (json.loads((tmp_path / n / "metrics.json").read_text()) for n in ("plain", "bom"))
    assert bom["top1_accuracy_single_label"] == plain["top1_accuracy_single_label"] == 1.0


def test_a_byte_order_mark_inside_the_file_is_refused_alike(tmp_path, capsys):
    "A BOM on a later line means files were joined: both readers refuse it in the same words, naming the line."
    from vtreetrm.utils import UserError, iter_jsonl

    line = json.dumps({"id": 0, "gold": ["walking"], "output": "<predicted_actions>walking</predicted_actions>"})
    p = tmp_path / "predictions.jsonl"
    p.write_bytes(line.encode() + b"\n" + BOM + line.encode() + b"\n")
    rc, _, err = run(capsys, "eval", "metrics", p)
    one_line(rc, err, "predictions.jsonl:2", "byte-order mark inside the file")
    with pytest.raises(UserError, match="predictions.jsonl:2: a UTF-8 byte-order mark inside the file"):
        list(iter_jsonl(p))


# ---------------------------------------------------------------- a spreadsheet with one huge cell
_CELL_REF = re.compile(rb"<(?:\w+:)?c\b((?:[^>/]|/(?!>))*)>(.*?)</(?:\w+:)?c>", re.S)


def _formula_refs_reference(xml: bytes) -> set:
    "The whole-file reading of which cells hold a formula without a stored value (one pass over the complete XML)."
    out = set()
    for m in _CELL_REF.finditer(xml):
        if re.search(rb"<(?:\w+:)?f\b", m.group(2)) and not re.search(rb"<(?:\w+:)?v>[^<]", m.group(2)):
            out.add(re.search(rb'\br="([A-Z]+[0-9]+)"', m.group(1)).group(1).decode())
    return out


def _sheet_xml(big: int) -> bytes:
    "A sheet's XML with formulas with and without cached values around an inline cell of `big` characters."
    cells = [
        b'<c r="A1"><f>1+1</f><v>2</v></c>',
        b'<c r="B1"><f>1+1</f></c>',
        b'<x:c r="C1" t="str"><x:f>A1</x:f><x:v></x:v></x:c>',
        b'<c r="D1" t="inlineStr"><is><t>' + b"y" * big + b"</t></is></c>",
        b'<c r="E1"><f t="shared" si="0"/><v>3</v></c>',
        b'<c r="F1"><f t="shared" si="0"/></c>',
        b'<c r="G1"/>',
        b'<c r="H1" s="1"><v>5</v></c>',
        b'<c r="I1"><f>SUM(A1:B1)</f><v/></c>',
    ]
    return b'<worksheet><sheetData><row r="1">' + b"".join(cells) + b"</row></sheetData></worksheet>"


def test_formula_scan_reads_a_huge_cell_in_one_pass_with_the_whole_file_result():
    "Cut anywhere into pieces, the sheet XML gives the same formula cells as one pass over the whole file."
    import io

    from vtreetrm.release.preprocess import formula_refs_without_value, xml_pieces

    small = _sheet_xml(30)
    want = _formula_refs_reference(small)
    assert want == {"B1", "C1", "F1", "I1"}
    for chunk in (1, 2, 3, 5, 7, 11, 64, 1 << 20):
        assert formula_refs_without_value(xml_pieces(io.BytesIO(small), chunk)) == want, chunk
    big = _sheet_xml(8_000_000)  # 8 MB in one cell: eight 1 MiB pieces, each read once
    assert formula_refs_without_value(xml_pieces(io.BytesIO(big))) == _formula_refs_reference(big) == want


def _workbook(path: Path, description: str) -> Path:
    "A one-sheet workbook whose second record's field_description is `description` (written as an inline string)."
    import zipfile

    import openpyxl

    from vtreetrm.release.assets import LABEL_FIELDS, NATIVE_PROMPT_FIELDS

    fields = [*NATIVE_PROMPT_FIELDS, *LABEL_FIELDS]
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "S"
    ws.append(fields)
    ws.append(["f1", "t1", "small", "td", "K1", "L1"])
    ws.append(["f2", "t2", "BIGCELL", "td", "K1", "L1"])
    wb.save(path.with_suffix(".tmp"))
    with zipfile.ZipFile(path.with_suffix(".tmp")) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename.startswith("xl/worksheets/"):
                assert b"<t>BIGCELL</t>" in data
                data = data.replace(b"<t>BIGCELL</t>", b"<t>" + description.encode() + b"</t>")
            zout.writestr(item, data)
    mapping = path.parent / "mapping.json"
    mapping.write_text(json.dumps({"dataset": "shougang", "sheets": ["S"], "header_row": 1,
                                   "columns": {f: f for f in fields}}))  # fmt: skip
    return path


def test_preprocess_refuses_a_cell_over_the_spreadsheet_limit(tmp_path, capsys):
    "An 8 MB cell (no spreadsheet program writes one) is refused in one line naming sheet, row and column."
    x = _workbook(tmp_path / "w.xlsx", "z" * 8_000_000)
    rc, _, err = run(capsys, "release", "preprocess", "--input", x, "--mapping", tmp_path / "mapping.json",
                     "--output", tmp_path / "out/all.json", "--no-progress")  # fmt: skip
    one_line(rc, err, "w.xlsx[S]:3", "field 'field_description'", "cell C3", "8,000,000 characters", "32,767")
    assert not (tmp_path / "out/all.json").exists()


def test_preprocess_refuses_a_part_that_unpacks_past_the_bound(tmp_path, capsys, monkeypatch):
    "A sheet part that unpacks past the bound (a 300 MB cell packs into 400 KB) is refused before any XML is parsed."
    from vtreetrm.release import preprocess

    x = _workbook(tmp_path / "w.xlsx", "z" * 2_000_000)
    monkeypatch.setattr(preprocess, "MAX_PART_BYTES", 1_000_000)  # the real bound is 256 MiB: same rule, smaller file
    monkeypatch.setattr(preprocess.openpyxl, "load_workbook", None)  # parsing would fail loudly
    rc, _, err = run(capsys, "release", "preprocess", "--input", x, "--mapping", tmp_path / "mapping.json",
                     "--output", tmp_path / "out/all.json", "--no-progress")  # fmt: skip
    one_line(rc, err, "w.xlsx", "unpacks to", "1,000,000")
    assert not (tmp_path / "out/all.json").exists()


def test_preprocess_keeps_a_cell_at_the_limit(tmp_path, capsys):
    "A cell of exactly 32,767 characters (the spreadsheet limit) is read whole."
    from vtreetrm.release.assets import iter_records

    x = _workbook(tmp_path / "w.xlsx", "z" * 32_767)
    rc, _, err = run(capsys, "release", "preprocess", "--input", x, "--mapping", tmp_path / "mapping.json",
                     "--output", tmp_path / "out/all.json", "--no-progress")  # fmt: skip
    assert rc == 0, err
    recs = [r for _, r in iter_records(tmp_path / "out/all.json")]
    assert [len(r["metadata"]["field_description"]) for r in recs] == [5, 32_767]
