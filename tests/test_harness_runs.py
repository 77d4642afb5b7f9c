"Harness runs end to end through the CLI on the synthetic benchmark: infer, seed, train, store contents, resume after SIGKILL."

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from vtreetrm.harness.store import HarnessStore
from vtreetrm.harness.synthetic import make_synthetic

SMALL = dict(n_train_videos=12, n_test_videos=10, per_task=12, test_ar=20, test_other=3)
FAST = ["--set", "embed.backend=hashing", "--quiet"]  # hashing embeddings, chosen explicitly, keep tests fast
HASH = "embed.backend=hashing"  # for commands with their own --set (one --set takes several KEY=VALUE)


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs") / "syn"
    make_synthetic(d, **SMALL)
    return d


def _db_rows(db, sql, *a):
    con = sqlite3.connect(db)
    try:
        return con.execute(sql, a).fetchall()
    finally:
        con.close()


def test_infer_seed_train_pipeline(syn, cli):
    r = cli(
        "harness",
        "infer",
        "--config",
        "config/default.yaml",
        "--run-id",
        "v2ar_baseline",
        "--task-types",
        "Action Recognition",
        *FAST,
        cwd=syn,
        check=0,
    )
    out = json.loads(r.stdout)
    assert out["run_id"] == "infer_v2ar_baseline" and out["n"] == 12
    db = syn / "workspaces/default/harness.db"
    rows = _db_rows(db, "SELECT answer, gold FROM answers WHERE run_id='infer_v2ar_baseline'")
    assert len(rows) == 12 and out["accuracy"] == pytest.approx(sum(a == g for a, g in rows) / 12)
    assert _db_rows(db, "PRAGMA journal_mode")[0][0] == "wal"
    traj = json.loads(
        _db_rows(db, "SELECT trajectory_json FROM answers WHERE run_id='infer_v2ar_baseline' LIMIT 1")[0][0]
    )
    assert [s.get("tool") for s in traj][:3] == ["look", "search_captions", "read_captions"]
    assert (syn / "workspaces/default/analyses/infer_v2ar_baseline.json").is_file()
    # extract + seed
    cli("harness", "extract-run-db", db, syn / "bl.db", "infer_v2ar_baseline", cwd=syn, check=0)
    assert [x[0] for x in _db_rows(syn / "bl.db", "SELECT run_id FROM runs")] == ["infer_v2ar_baseline"]
    cli(
        "harness",
        "init-seed",
        "v2ar-baseline",
        "--from-db",
        db,
        "--run-id",
        "infer_v2ar_baseline",
        "--description",
        "AR baseline",
        cwd=syn,
        check=0,
    )
    meta = json.loads((syn / "store/seeds/v2ar-baseline/seed.json").read_text())
    assert (
        meta["baseline_answers"] == 12
        and meta["parent"] is None
        and (syn / "store/seeds/v2ar-baseline/skills/skills.md").is_file()
    )
    r = cli("harness", "init-seed", "v2ar-baseline", "--from-db", db, "--run-id", "infer_v2ar_baseline", cwd=syn)
    assert r.returncode == 2 and "already exists" in r.stderr
    # train from the seed, with the four-way holdout switched on
    r = cli(
        "harness",
        "train",
        "--config",
        "config/train_action_recognition.yaml",
        "--fresh",
        "--seed",
        "v2ar-baseline",
        "--set",
        "run_holdout_eval=true",
        "test_size=0",
        "val_size=4",
        "diag_size=8",
        "batch_size=4",
        HASH,
        "--quiet",
        cwd=syn,
        check=0,
    )
    res = json.loads((syn / "workspaces/train-action-recognition/analyses/final_test_eval.json").read_text())
    assert res["baseline_source"] == "seed:v2ar-baseline/infer_v2ar_baseline"
    assert res["pools"]["test"] == 20 and res["final"]["n"] == 20 and res["epochs_run"] == 3
    assert "provenance" in res and res["final"]["accuracy"] >= res["baseline"]["accuracy"]
    tdb = syn / "workspaces/train-action-recognition/harness.db"
    dm = _db_rows(
        tdb, "SELECT epoch, step, batch_accuracy, heldout_accuracy, skills_version FROM dual_metric ORDER BY step"
    )
    assert len(dm) == 6 and {e for e, *_ in dm} == {1, 2, 3} and all(h is not None for *_, h, _ in dm)
    assert len(_db_rows(tdb, "SELECT * FROM gate_decisions")) >= 3
    hold = _db_rows(tdb, "SELECT epoch, skills, prompts, accuracy FROM holdout")
    assert len(hold) % 4 == 0 and len(hold) >= 4
    r = cli("harness", "show", syn / "workspaces/train-action-recognition", cwd=syn, check=0)
    assert "gate fast/1/1" in r.stdout


def test_bad_run_inputs_exit_2(syn, cli, tmp_path):
    r = cli("harness", "train", "--config", "config/train_action_recognition.yaml", "--seed", "nope", *FAST, cwd=syn)
    assert r.returncode == 2 and "no seed 'nope'" in r.stderr
    empty = tmp_path / "store"
    (empty / "questions").mkdir(parents=True)
    r = cli("harness", "infer", "--store-dir", empty, "--workspace-dir", tmp_path / "ws", *FAST, cwd=syn)
    assert r.returncode == 2 and "the store has no skills v1" in r.stderr
    env_before = os.environ.pop("OPENAI_API_KEY", None)
    try:
        r = cli(
            "harness",
            "infer",
            "--config",
            "config/default.yaml",
            "--backend",
            "openai",
            "--run-id",
            "nokey",
            "--set",
            "workspace_dir=ws_nokey",
            HASH,
            "--quiet",
            cwd=syn,
        )
    finally:
        if env_before is not None:
            os.environ["OPENAI_API_KEY"] = env_before
    assert r.returncode == 2 and "needs base_url" in r.stderr and "or an API key" in r.stderr
    assert not (syn / "ws_nokey" / "logs" / "episodes.jsonl").exists()  # no question was asked


def test_gate_off_accepts_more_bad_edits(syn, cli):
    common = ["--config", "config/train_action_recognition.yaml", "--fresh", "--set", "test_size=0", HASH, "--quiet"]
    cli("harness", "train", *common, "--run-id", "gated", "--workspace-dir", "workspaces/gated", cwd=syn, check=0)
    cli(
        "harness",
        "train",
        *common,
        "--run-id",
        "ungated",
        "--workspace-dir",
        "workspaces/ungated",
        "--no-gate",
        cwd=syn,
        check=0,
    )
    g = json.loads((syn / "workspaces/gated/analyses/final_test_eval.json").read_text())["gate"]
    u = json.loads((syn / "workspaces/ungated/analyses/final_test_eval.json").read_text())["gate"]
    print("gated", g, "ungated", u)
    assert u["bad_edits_accepted"] > g["bad_edits_accepted"] and u["bad_edits_proposed"] > 0
    assert set(u["decisions"]) == {"accept_ungated"}


def _train_cmd(ws):
    return [
        sys.executable,
        "-c",
        "from vtreetrm.cli import console_main; console_main()",
        "harness",
        "train",
        "--config",
        "config/train_action_recognition.yaml",
        "--run-id",
        "killme",
        "--workspace-dir",
        ws,
        "--concurrency",
        "4",
        "--set",
        "embed.backend=hashing",
        "sim_latency_s=0.01",
        "test_size=0",
        "--quiet",
    ]


def test_resume_after_sigkill_loses_nothing_and_reasks_nothing(syn):
    ref = subprocess.run(_train_cmd("workspaces/ref"), cwd=syn, capture_output=True, text=True, timeout=900)
    assert ref.returncode == 0, ref.stderr
    ref_rows = _db_rows(
        syn / "workspaces/ref/harness.db", "SELECT question_id, skills_sha, prompts_sha, answer, correct FROM answers"
    )
    db = syn / "workspaces/kill/harness.db"
    p = subprocess.Popen(_train_cmd("workspaces/kill"), cwd=syn, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0, n = time.time(), 0
    while time.time() - t0 < 300:
        time.sleep(0.2)
        if p.poll() is not None:
            break
        try:
            n = _db_rows(db, "SELECT COUNT(*) FROM answers")[0][0]
        except sqlite3.OperationalError:
            continue
        if n >= len(ref_rows) // 2:
            break
    assert p.poll() is None, "the run finished before it could be killed"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    before = set(_db_rows(db, "SELECT question_id, skills_sha, prompts_sha, answer FROM answers"))
    assert 0 < len(before) < len(ref_rows)
    assert _db_rows(db, "SELECT status FROM runs WHERE run_id='killme'")[0][0] == "running"
    log = syn / "workspaces/kill/logs/episodes.jsonl"
    n_started_before = len(log.read_text().splitlines())
    r = subprocess.run(_train_cmd("workspaces/kill"), cwd=syn, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    after = _db_rows(db, "SELECT question_id, skills_sha, prompts_sha, answer, correct FROM answers")
    assert before <= {x[:4] for x in after}  # nothing lost
    assert sorted(after) == sorted(ref_rows)  # same answers as an uninterrupted run
    started = [
        tuple(json.loads(l)[k] for k in ("question_id", "skills_sha", "prompts_sha"))
        for l in log.read_text().splitlines()
    ]
    reasked = len(started) - len(set(started))
    assert reasked <= 4, reasked  # only the episodes in flight at the kill (concurrency 4)
    assert not {s for s in started[n_started_before:]} & {x[:3] for x in before}  # no answered question asked again
    a = json.loads((syn / "workspaces/ref/analyses/final_test_eval.json").read_text())
    b = json.loads((syn / "workspaces/kill/analyses/final_test_eval.json").read_text())
    assert a["final"] == b["final"] and a["gate"] == b["gate"] and b["resumed"] is True
    assert _db_rows(db, "SELECT status FROM runs WHERE run_id='killme'")[0][0] == "done"


def test_early_stop_and_no_slow_momentum(syn):
    from vtreetrm.harness.config import EmbedConfig, RunConfig
    from vtreetrm.harness.runner import Runner

    cfg = RunConfig(
        workspace_dir=syn / "workspaces/es",
        store_dir=syn / "store",
        mode="train",
        backend="simulated",
        run_id="es",
        epochs=5,
        early_stop_patience=1,
        use_slow_momentum=False,
        task_types=("Action Recognition",),
        pool_split_mode="per_category",
        test_questions=str(syn / "benchmarks/Video-MME"),
        test_size=5,
        embed=EmbedConfig(backend="hashing"),
        concurrency=4,
    )
    res = Runner(cfg, progress=False).run()
    vals = [h["val_accuracy"] for h in res["history"]]
    best, stop_at = -1, None
    for i, v in enumerate(vals, 1):
        if v > best:
            best = v
        else:
            stop_at = i
            break
    assert res["epochs_run"] == (stop_at or 5) and len(vals) == res["epochs_run"]
    st = HarnessStore(syn / "workspaces/es/harness.db")
    try:
        assert (st.get_event("es", "early_stop") is not None) == (stop_at is not None)
        assert not [g for g in st.table("gate_decisions", "es") if g["kind"] == "slow"] and not st.table(
            "holdout", "es"
        )
    finally:
        st.close()


def test_global_split_holds_out_test_without_test_folder(syn, capsys):
    from vtreetrm.harness.config import EmbedConfig, RunConfig
    from vtreetrm.harness.runner import Runner

    cfg = RunConfig(
        workspace_dir=syn / "workspaces/glob",
        store_dir=syn / "store",
        mode="train",
        backend="simulated",
        run_id="glob",
        epochs=1,
        test_questions=None,
        test_size=12,
        val_size=6,
        diag_size=10,
        batch_size=12,
        embed=EmbedConfig(backend="hashing"),
        use_slow_momentum=False,
    )
    res = Runner(cfg, progress=False).run()
    assert res["pools"] == {"train": 72 - 12 - 6, "diag": 10, "val": 6, "test": 12}
    assert set(res["final"]["per_task_type"]) <= {
        "Action Recognition",
        "Counting Problem",
        "Object Recognition",
        "Attribute Perception",
        "Spatial Reasoning",
        "Temporal Perception",
    }
    capsys.readouterr()
    cfg.gate_n_max = 10  # resuming with another plan-relevant setting is announced
    Runner(cfg, progress=False).run()
    assert "resuming glob with changed settings gate_n_max" in capsys.readouterr().err


def test_rollback_after_acceptance_then_cooldown(tmp_path, monkeypatch):
    "An edit that wins its gate round but loses afterwards (the data shifts) is rolled back; no candidate for cooldown steps."
    import re

    from vtreetrm.harness.backends import ChatReply
    from vtreetrm.harness.config import EmbedConfig, RunConfig
    from vtreetrm.harness.evolution import Patch
    from vtreetrm.harness.questions import load_benchmark
    from vtreetrm.harness.runner import Runner
    from vtreetrm.utils import stable_uniform

    syn = tmp_path / "syn"
    make_synthetic(syn, n_train_videos=20, n_test_videos=10, per_task=40, test_ar=10, test_other=2)
    gold = {
        (q.video_id, q.question): q
        for d in ("store/questions/generated-v2-360", "benchmarks/Video-MME")
        for q in load_benchmark(syn / d)
    }

    class Rigged:
        "Answers at once: half right without RULE-X; with it, all right before the shift and all wrong after."

        shift = False

        async def chat(self, messages, tools=None):
            user = messages[1]["content"]
            q = gold[
                (re.search(r"^Video: (.*)$", user, re.M).group(1), re.search(r"^Question: (.*)$", user, re.M).group(1))
            ]
            ok = (
                (not Rigged.shift)
                if "RULE-X" in messages[0]["content"]
                else stable_uniform("base", q.question_id) < 0.5
            )
            wrong = [l for l in q.letters if l != q.answer][0]
            return ChatReply(f"Answer: {q.answer if ok else wrong}")

    class Reflector:
        async def propose(self, text, failures, budget, key=""):
            return [] if "RULE-X" in text else [Patch("add", "General", "RULE-X")]

    orig = Runner.gate_round

    async def gate_then_shift(self, *a, **kw):
        rnd = await orig(self, *a, **kw)
        Rigged.shift = True
        return rnd

    monkeypatch.setattr(Runner, "gate_round", gate_then_shift)
    cfg = RunConfig(
        workspace_dir=syn / "ws",
        store_dir=syn / "store",
        mode="train",
        backend="simulated",
        run_id="rb",
        epochs=2,
        task_types=("Action Recognition",),
        pool_split_mode="per_category",
        batch_size=12,
        diag_size=0,
        val_size=4,
        test_size=0,
        use_slow_momentum=False,
        test_questions=str(syn / "benchmarks/Video-MME"),
        gate_cooldown_steps=2,
        embed=EmbedConfig(backend="hashing"),
    )
    res = Runner(cfg, backend=Rigged(), reflector=Reflector(), progress=False).run()
    st = HarnessStore(syn / "ws/harness.db")
    try:
        gates = [(g["key"], g["decision"]) for g in st.table("gate_decisions", "rb")]
    finally:
        st.close()
    assert gates[0][0] == "fast/1/1" and gates[0][1] in ("confirm", "provisional"), gates
    assert gates[1] == ("watch/1/2", "rollback"), gates
    fast_steps = {int(k.split("/")[2]) + (3 if k.startswith("fast/2") else 0) for k, _ in gates if k.startswith("fast")}
    assert not fast_steps & {3, 4} and fast_steps & {5, 6}, gates  # cooldown: steps 3 and 4 gate nothing, step 5 on may
    assert "RULE-X" not in (syn / "ws/versions/rb/skills" / res["skills_version"] / "skills.md").read_text()
    assert res["gate"]["rollbacks"] == 1
