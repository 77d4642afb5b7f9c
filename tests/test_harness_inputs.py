"Harness inputs: question files, configs and pools, including every kind of bad input, through the CLI where a user would hit them."

import json
from pathlib import Path

import pytest

from vtreetrm.harness.config import RunConfig, load_config
from vtreetrm.harness.pools import GlobalPoolStrategy, PerCategoryPoolStrategy, PoolConfig, make_batches
from vtreetrm.harness.questions import GeneratedQuestion, load_benchmark
from vtreetrm.harness.synthetic import make_synthetic
from vtreetrm.utils import UserError


def _q(qid, tt="Action Recognition", **kw):
    return {
        "question_id": qid,
        "video_id": "v1",
        "task_type": tt,
        "question": f"Q {qid}?",
        "options": ["A. a", "B. b", "C. c", "D. d"],
        "answer": "A",
        **kw,
    }


def _make_question(qid, tt):
    return GeneratedQuestion(qid, "v1", tt, f"Q {qid}?", ("A. a", "B. b", "C. c", "D. d"), "A")


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    d = tmp_path_factory.mktemp("syn") / "syn"
    make_synthetic(d, n_train_videos=12, n_test_videos=10, per_task=12, test_ar=20, test_other=3)
    return d


# ---------- questions ----------


@pytest.mark.parametrize(
    "bad,msg",
    [
        ({"answer": None}, "field 'answer': missing"),
        ({"answer": "E"}, "answer 'E' is not among the options"),
        ({"options": ["a", "B. b"]}, "not lettered"),
        ({"options": ["A. a", "C. c"]}, "has letter C, expected B"),
        ({"task_type": ""}, "field 'task_type': missing"),
    ],
)
def test_malformed_question_names_file_line_field(tmp_path, bad, msg):
    items = [_q("q0"), {**_q("q1"), **bad}]
    (tmp_path / "qs.json").write_text(json.dumps(items))
    with pytest.raises(UserError) as e:
        load_benchmark(tmp_path)
    assert msg in str(e.value) and f"{tmp_path / 'qs.json'}:2" in str(e.value)


def test_duplicate_ids_across_files(tmp_path, capsys):
    (tmp_path / "accepted.json").write_text(json.dumps([_q(f"q{i}") for i in range(5)]))
    (tmp_path / "accepted_questions_backup_220.json").write_text(json.dumps([_q("q1"), _q("q9")]))
    with pytest.raises(UserError) as e:
        load_benchmark(tmp_path)
    s = str(e.value)
    assert "accepted.json" in s and "accepted_questions_backup_220.json" in s and "'q1'" in s
    rep = []
    qs = load_benchmark(tmp_path, allow_duplicates=True, report=rep)
    assert [q.question_id for q in qs] == ["q0", "q1", "q2", "q3", "q4", "q9"] and len(rep) == 1
    # renaming the backup (the reference's Task 0) fixes it
    (tmp_path / "accepted_questions_backup_220.json").rename(tmp_path / "accepted_questions_backup_220.json.bak")
    assert len(load_benchmark(tmp_path)) == 5


def test_official_layouts_json_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    videos = [
        {
            "video_id": "001",
            "duration": "short",
            "domain": "Knowledge",
            "questions": [
                {
                    "question_id": "001-1",
                    "task_type": "Counting Problem",
                    "question": "How many?",
                    "options": ["A. 1", "B. 2", "C. 3", "D. 4"],
                    "answer": "B",
                },
                {
                    "question_id": "001-2",
                    "task_type": "OCR Problems",
                    "question": "What text?",
                    "choices": {"A": "x", "B": "y", "C": "z", "D": "w"},
                    "answer": "D",
                },
            ],
        }
    ]
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "videomme.json").write_text(json.dumps(videos))
    (tmp_path / "b").mkdir()
    pq.write_table(pa.Table.from_pylist(videos), tmp_path / "b" / "nested.parquet")
    flat = [{"video_id": "001", "duration": "short", "domain": "Knowledge", **q} for q in videos[0]["questions"][:1]]
    (tmp_path / "c").mkdir()
    pq.write_table(pa.Table.from_pylist(flat), tmp_path / "c" / "flat.parquet")
    a, b, c = (load_benchmark(tmp_path / k) for k in "abc")

    def strip(qs):
        return [dict(q.to_dict(), source="") for q in qs]

    assert strip(a) == strip(b) and strip(c) == strip(a)[:1]
    assert a[1].options == ("A. x", "B. y", "C. z", "D. w") and a[1].answer == "D" and a[0].domain == "Knowledge"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(UserError, match="cannot read parquet"):
        load_benchmark(tmp_path / "d")


def test_bad_question_file_via_cli_exit_2(syn, cli, tmp_path):
    qdir = tmp_path / "qs"
    qdir.mkdir()
    (qdir / "x.json").write_text(json.dumps([_q("q0", answer="Z")]))
    r = cli(
        "harness",
        "infer",
        "--store-dir",
        syn / "store",
        "--workspace-dir",
        tmp_path / "ws",
        "--questions",
        qdir,
        "--backend",
        "simulated",
        "--set",
        "embed.backend=hashing",
        "--quiet",
    )
    assert r.returncode == 2 and "x.json:1: field 'answer'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "ws" / "harness.db").exists()  # nothing written before the inputs are valid


# ---------- config ----------


def test_seed_config_values_and_defaults():
    # the reference unit tests, verbatim in spirit: every field given, and run_holdout_eval defaulting to True
    kw = dict(
        workspace_dir=Path("/tmp/ws"),
        store_dir=Path("/tmp/store"),
        mode="train",
        concurrency=4,
        max_steps=10,
        skill_mode="auto",
        n_samples=0,
        questions="benchmarks/Video-MME",
        skills_version="v1",
        prompts_version="v1",
        epochs=1,
        diag_size=100,
        diag_correct_ratio=0.5,
        val_size=30,
        val_correct_ratio=0.5,
        edit_budget_start=5,
        edit_budget_end=2,
        batch_size=15,
        min_class_per_batch=2,
        eval_min_per_class=2,
        early_stop_patience=4,
        test_size=30,
        use_slow_momentum=True,
        gate_e_confirm=20.0,
        gate_e_provisional=3.0,
        gate_w_net_min=2,
        gate_delta_min=0.02,
        gate_lambda_dir=-0.642,
        gate_e_rollback=10.0,
        gate_block=8,
        gate_n_max=40,
        gate_p_low=0.05,
        gate_p_high=0.95,
        gate_probe_quota=0.2,
        gate_gamma_decay=0.9,
        gate_cooldown_steps=2,
        gate_guard_err=0.10,
        skill_update_mode="patch",
        appendix_consolidate_threshold=6,
        run_id="test_run",
    )
    assert RunConfig(**kw).run_holdout_eval is True
    assert RunConfig(**kw, run_holdout_eval=False).run_holdout_eval is False


def test_experiment_yaml_loads(syn):
    c = load_config(syn / "config" / "train_action_recognition.yaml")
    assert (
        c.task_types == ("Action Recognition",) and c.run_holdout_eval is False and c.pool_split_mode == "per_category"
    )
    assert isinstance(c.workspace_dir, Path) and isinstance(c.store_dir, Path)
    assert c.embed.model_name == "all-MiniLM-L6-v2" and c.embed.embed_dim == 384


def test_only_differences_needed(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("harness:\n  epochs: 7\n")
    c = load_config(p)
    assert c.epochs == 7 and c.gate_e_confirm == RunConfig().gate_e_confirm and c.embed == RunConfig().embed


@pytest.mark.parametrize(
    "body,msg",
    [
        (
            "harness:\n  mode: train\n  gate_e_confrm: 20\n",
            "c.yaml:3: field 'gate_e_confrm': unknown key 'gate_e_confrm' (did you mean 'gate_e_confirm'?)",
        ),
        ("harness:\n  epochs: three\n", "c.yaml:2: field 'epochs': expected an integer, got 'three'"),
        ("harness:\n  concurrency: 0\n", "c.yaml:2: field 'concurrency': 0 is out of range (must be >= 1)"),
        ("harness:\n  use_slow_momentum: 1\n", "field 'use_slow_momentum': expected true/false"),
        (
            "harness:\n  pool_split_mode: per_type\n",
            "field 'pool_split_mode': 'per_type' is not one of 'global', 'per_category'",
        ),
        ("embed:\n  backend: remote\n", "field 'backend': 'remote' is not one of 'local', 'hashing'"),
        ("embed:\n  modle_name: x\n", "did you mean 'model_name'"),
        ("harnes:\n  epochs: 1\n", "c.yaml:1: field 'harnes': unknown section"),
        ("harness:\n  epochs: [1\n", "c.yaml:3: invalid YAML"),
        (
            "harness:\n  gate_p_low: 0.5\n  gate_p_high: 0.5\n",
            "field 'gate_p_low': gate_p_low must be below gate_p_high",
        ),
    ],
)
def test_config_errors_name_key_and_file(tmp_path, body, msg):
    p = tmp_path / "c.yaml"
    p.write_text(body)
    with pytest.raises(UserError) as e:
        load_config(p)
    assert msg in str(e.value), str(e.value)


def test_config_errors_via_cli(cli, tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("harness:\n  gate_n_maxx: 4\n")
    r = cli("harness", "train", "--config", p)
    assert r.returncode == 2 and r.stderr.strip().startswith("error:") and "did you mean 'gate_n_max'" in r.stderr
    r = cli("harness", "train", "--config", tmp_path / "missing.yaml")
    assert r.returncode == 2 and "no such config file" in r.stderr


def test_cli_overrides_yaml(syn, monkeypatch):
    from vtreetrm.harness import cli as hcli

    seen = {}

    class FakeRunner:
        def __init__(self, cfg, **kw):
            seen["cfg"], seen["kw"] = cfg, kw

        def run(self):
            return {"ok": 1}

    monkeypatch.setattr(hcli, "Runner", FakeRunner)
    from vtreetrm.cli import main

    assert (
        main(
            [
                "harness",
                "train",
                "--config",
                str(syn / "config" / "train_action_recognition.yaml"),
                "--epochs",
                "1",
                "--task-types",
                "Counting Problem",
                "Action Recognition",
                "--set",
                "gate_n_max=12",
                "embed.backend=hashing",
                "--seed",
                "myseed",
                "--fresh",
            ]
        )
        == 0
    )
    c = seen["cfg"]
    assert (c.epochs, c.task_types, c.gate_n_max, c.embed.backend, c.run_holdout_eval) == (
        1,
        ("Counting Problem", "Action Recognition"),
        12,
        "hashing",
        False,
    )
    assert seen["kw"]["seed_name"] == "myseed" and seen["kw"]["fresh"] is True
    p = syn.parent / "holdout_on.yaml"
    p.write_text("harness:\n  run_holdout_eval: true\n")
    assert main(["harness", "train", "--config", str(p), "--no-run-holdout-eval"]) == 0
    assert seen["cfg"].run_holdout_eval is False and seen["cfg"].mode == "train"
    assert main(["harness", "train", "--config", str(p)]) == 0 and seen["cfg"].run_holdout_eval is True


# ---------- pools (the reference tests and more) ----------


def _write_test_dir(test_dir, types, n):
    test_dir.mkdir()
    for tt in types:
        items = [_q(f"{tt.replace(' ', '_')}_{i:03d}", tt) for i in range(n)]
        (test_dir / f"{tt.lower().replace(' ', '_')}.json").write_text(
            json.dumps(items, ensure_ascii=False), encoding="utf-8"
        )


class TestPerCategoryPoolStrategy:
    def test_per_category_test_pool_filtered_by_task_types(self, tmp_path):
        test_dir = tmp_path / "test_questions"
        _write_test_dir(test_dir, ("Action Recognition", "Object Reasoning", "Counting Problem"), 10)
        questions = [_make_question(f"ar_{i:03d}", "Action Recognition") for i in range(30)]
        correctness = {q.question_id: (i < 20) for i, q in enumerate(questions)}
        config = PoolConfig(
            task_types=("Action Recognition",),
            seed=42,
            baseline_run_id="bl",
            diag_size=0,
            diag_correct_ratio=0.0,
            val_size=0,
            val_correct_ratio=0.0,
            test_size=0,
            eval_min_per_class=0,
            train_ratio=20 / 30,
            test_questions_dir=test_dir,
        )
        pools = PerCategoryPoolStrategy().build(questions, correctness, config)
        assert len(pools.test) == 10
        assert all(q.task_type == "Action Recognition" for q in pools.test)

    def test_per_category_test_pool_no_filter_when_task_types_none(self, tmp_path):
        test_dir = tmp_path / "test_questions"
        _write_test_dir(test_dir, ("Action Recognition", "Object Reasoning"), 5)
        questions = [_make_question(f"q_{i:03d}", "Action Recognition") for i in range(10)]
        correctness = {q.question_id: True for q in questions}
        config = PoolConfig(
            task_types=None,
            seed=42,
            baseline_run_id="bl",
            diag_size=0,
            diag_correct_ratio=0.0,
            val_size=0,
            val_correct_ratio=0.0,
            test_size=0,
            eval_min_per_class=0,
            train_ratio=0.667,
            test_questions_dir=test_dir,
        )
        assert len(PerCategoryPoolStrategy().build(questions, correctness, config).test) == 10

    def test_ratios_minimums_and_determinism(self):
        qs = [_make_question(f"a{i:02d}", "Action Recognition") for i in range(30)] + [
            _make_question(f"c{i:02d}", "Counting Problem") for i in range(6)
        ]
        corr = {q.question_id: i % 3 == 0 for i, q in enumerate(qs)}
        cfg = PoolConfig(
            diag_size=10,
            diag_correct_ratio=0.5,
            val_size=6,
            val_correct_ratio=0.5,
            eval_min_per_class=2,
            train_ratio=0.5,
            test_size=0,
        )
        p = PerCategoryPoolStrategy().build(qs, corr, cfg)
        assert (
            sum(q.task_type == "Counting Problem" for q in p.val) >= 2
            and sum(q.task_type == "Counting Problem" for q in p.diag) >= 2
        )
        assert {q.question_id for q in p.diag} <= {q.question_id for q in p.train}
        assert not {q.question_id for q in p.val} & {q.question_id for q in p.train}
        assert sum(q.task_type == "Action Recognition" for q in p.train) == 15
        p2 = PerCategoryPoolStrategy().build(list(reversed(qs)), corr, cfg)  # input order does not matter
        assert [q.question_id for q in p.val] == [q.question_id for q in p2.val]
        p3 = PerCategoryPoolStrategy().build(qs, corr, PoolConfig(**{**cfg.__dict__, "seed": 7}))
        assert [q.question_id for q in p.train] != [q.question_id for q in p3.train]


def test_global_pools_hold_out_test_and_ratio():
    qs = [_make_question(f"q{i:03d}", "Action Recognition") for i in range(100)]
    corr = {q.question_id: i < 50 for i, q in enumerate(qs)}
    p = GlobalPoolStrategy().build(
        qs, corr, PoolConfig(test_size=20, val_size=10, val_correct_ratio=0.3, diag_size=10, diag_correct_ratio=0.8)
    )
    assert p.sizes() == {"train": 70, "diag": 10, "val": 10, "test": 20}
    assert sum(corr[q.question_id] for q in p.val) == 3 and sum(corr[q.question_id] for q in p.diag) == 8
    ids = [q.question_id for pool in (p.train, p.val, p.test) for q in pool]
    assert len(ids) == len(set(ids)) == 100


def test_batches_honour_size_class_minimum_ratio():
    qs = [_make_question(f"a{i:02d}", "Action Recognition") for i in range(40)] + [
        _make_question(f"c{i:02d}", "Counting Problem") for i in range(10)
    ]
    corr = {q.question_id: i % 2 == 0 for i, q in enumerate(qs)}
    bs = make_batches(qs, corr, batch_size=10, min_class_per_batch=2, batch_correct_ratio=0.3, seed=3, epoch=1)
    assert [len(b) for b in bs] == [10] * 5
    assert sorted(q.question_id for b in bs for q in b) == sorted(q.question_id for q in qs)
    assert all(sum(q.task_type == "Counting Problem" for q in b) >= 2 for b in bs)
    assert sum(corr[q.question_id] for q in bs[0]) == 3


def test_allow_duplicates_flag_via_cli(syn, tmp_path):
    from vtreetrm.cli import main

    qdir = tmp_path / "qs"
    qdir.mkdir()
    src = json.loads((syn / "store/questions/generated-v2-360/accepted_questions_action_recognition.json").read_text())
    (qdir / "a.json").write_text(json.dumps(src[:3]))
    (qdir / "b_backup.json").write_text(json.dumps(src[:2]))
    args = [
        "harness",
        "infer",
        "--store-dir",
        str(syn / "store"),
        "--workspace-dir",
        str(tmp_path / "ws"),
        "--questions",
        str(qdir),
        "--backend",
        "simulated",
        "--quiet",
        "--set",
        "embed.backend=hashing",
    ]
    assert main(args) == 2
    assert main(args + ["--allow-duplicates"]) == 0
    import sqlite3

    con = sqlite3.connect(tmp_path / "ws/harness.db")
    assert con.execute("SELECT COUNT(*) FROM answers").fetchone()[0] == 3
    con.close()
