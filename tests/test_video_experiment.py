"""The Phase-2 experiment notebook runs under papermill with tiny parameters and leaves the run contract."""

import json
from pathlib import Path

import pytest
from conftest import refused_cli

from vtreetrm.cli import main


@pytest.mark.slow
def test_phase2_notebook_run(tmp_path):
    assert main(["video", "make-synthetic", "--out", str(tmp_path / "syn"), "--scale", "tiny"]) == 0
    rc = main(
        [
            "run",
            "phase2_sft",
            "--name",
            "nb",
            "--runs-dir",
            str(tmp_path / "runs"),
            "--no-html",
            "-p",
            f"data_dir={tmp_path / 'syn'}",
            f"cache_dir={tmp_path / 'cache'}",
            "phase1=none",
            "epochs=1",
            "num_queries=8",
            "label_mode=simple",
            "eval_dataset=mammalnet",
        ]
    )
    assert rc == 0
    run = tmp_path / "runs" / "nb"
    for f in (
        "params.json",
        "run.json",
        "metrics.json",
        "predictions.jsonl",
        "query_tokens.safetensors",
        "query_diversity.json",
    ):
        assert (run / f).is_file(), f
    m = json.loads((run / "metrics.json").read_text())
    assert m["trained_on"] == "lote" and m["evaluated_on"] == "mammalnet"
    assert json.loads((run / "query_diversity.json").read_text())["effective_rank"] > 0
    lad = json.loads((run / "ladder.json").read_text())  # the ladder section: on the evaluated dataset's test split
    assert lad["dataset"] == "mammalnet" and [g["stage"] for g in lad["rungs"]][1:] == [
        "Phase-2 cls head",
        "Phase-2 generated answer",
    ]
    assert lad["rungs"][-1]["top1"] == pytest.approx(m["top1_accuracy_single_label"])


@pytest.mark.slow
def test_video_demo_quick(tmp_path):
    from vtreetrm.video.demo import run_video_demo

    # two processes; `also` runs in them, beside the last runs
    s = run_video_demo(
        tmp_path / "demo", quick=True, threads=1, progress=False, seeds=2, jobs=2, also=[(sum, ([1, 2],))]
    )
    assert s["also"] == [3]
    from vtreetrm.video.demo import demo_runs

    assert len(s["rows"]) == len(demo_runs(quick=True, seeds=2)) + 1 and (tmp_path / "demo" / "summary.json").is_file()
    seeds = {(r["variant"], r["seed"]) for r in s["rows"] if r["run"].endswith("_seed1")}
    assert {v for v, _ in seeds} == {r["variant"] for r in demo_runs(quick=True) if "shuffle" not in r["name"] and
                                     "mammalnet" not in r["name"]} and {k for _, k in seeds} == {1}  # fmt: skip
    p = json.loads(
        (tmp_path / "demo" / "runs" / "small_lote_m16_simple_actions_first_seed1" / "params.json").read_text()
    )
    assert p["config"]["seed"] == 1  # the seed reaches the run's own config
    assert {r["dataset"] for r in s["rows"]} == {"lote", "mammalnet"}
    for r in s[
        "rows"
    ]:  # each row's Top1 is its run's scored metrics.json (scored against scikit-learn in test_eval_cli)
        m = json.loads((tmp_path / "demo" / "runs" / r["run"] / "metrics.json").read_text())
        assert r["top1"] == pytest.approx(m["top1_accuracy_single_label"])
    head = tmp_path / "demo" / "runs" / s["rows"][0]["run"]
    stages = [r["stage"] for r in json.loads((head / "ladder.json").read_text())["rungs"]]
    assert stages[0] == "linear probe: frozen encoder features" and stages[-1] == "Phase-2 generated answer"
    # each seed's ladder (its probes fitted once for both seeds) is what one `ladder` call with both writes
    from vtreetrm.video.config import FeatureSpec
    from vtreetrm.video.ladder import ladder

    d = tmp_path / "demo"
    for run in ("lote_m8_simple_actions_first", "lote_m8_simple_actions_first_seed1"):
        one = ladder(d / "data" / "lote", FeatureSpec(d / "cache"), d / "runs" / "phase1_joint" / "best",
                     d / "runs" / run / "best", progress=False)  # fmt: skip
        assert json.loads((d / "runs" / run / "ladder.json").read_text()) == json.loads(json.dumps(one)), run
    # the report: the rankreg pair side by side with its query figures, and the headline's ladder
    from vtreetrm.runs.report import build_report, collect_runs, rankreg_table

    rr = rankreg_table(collect_runs([tmp_path / "demo" / "runs"])[0])
    assert rr["Model"].str.endswith("(cls)").sum() == 2 and rr["Model"].str.endswith("(rankreg)").sum() == 2
    assert rr[["R_eff/M", "Gini", "output rank entropy"]].notna().all().all() and (rr["ceiling n/M"] == 1).all()
    html = build_report([tmp_path / "demo" / "runs"], tmp_path / "r.html").read_text()
    assert "Query-diversity regulariser (rankreg) vs baseline" in html and "Learnability ladder" in html
    assert "linear probe: Phase-1 behaviour embedding" in html and "small_lote_m16_simple_actions_first_rankreg" in html
    # the demo's summary: both seeded pairs compared over their two seeds, with a verdict
    from vtreetrm.demo import demo_summary, summary_markdown

    cs = {c["a"]: c for c in demo_summary(tmp_path / "demo", 1, quick=True)["comparisons"]}
    rr_ = cs["small_lote_m16_simple_actions_first_rankreg"]
    assert len(rr_["a_top1"]) == len(rr_["b_top1"]) == 2 and rr_["verdict"] in ("separated", "within seed noise")
    assert len(cs["lote_m8_simple_actions_first: Phase-2 generated answer"]["a_top1"]) == 2
    assert "(2 seeds)" in summary_markdown(demo_summary(tmp_path / "demo", 1, quick=True))


def test_demo_refuses_seeds_or_jobs_below_one(cli, tmp_path):
    r = cli("demo", "--seeds", "0", "--runs-dir", tmp_path / "runs", "--out", tmp_path / "r.html")
    refused_cli(r, "--seeds must be from 1 to 10", "got 0")
    r = cli("demo", "--jobs", "0", "--runs-dir", tmp_path / "runs", "--out", tmp_path / "r.html")
    refused_cli(r, "--jobs must be a positive integer", "got 0")
    r = cli("demo", "--seeds", "1000000", "--runs-dir", tmp_path / "runs", "--out", tmp_path / "r.html")
    refused_cli(r, "--seeds must be from 1 to 10", "got 1000000")
    r = cli("demo", "--synthetic-eval", "--seed", "-1", "--runs-dir", tmp_path / "runs", "--out", tmp_path / "r.html")
    refused_cli(r, "--seed must be from 0", "got -1")
    assert not (tmp_path / "runs").exists()  # refused before anything is rendered


def test_phase2_notebook_parameters_are_phase2config():
    """The Phase2Config block of the experiment notebook's parameters cell is what the dataclass generates."""
    from pathlib import Path

    import nbformat

    from vtreetrm.cli import parameters_source
    from vtreetrm.video.phase2 import Phase2Config

    nb = nbformat.read(Path(__file__).parents[1] / "nbs" / "experiments" / "phase2_sft.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    want = parameters_source(Phase2Config)
    assert want in cell.source, f"regenerate the parameters cell's Phase2Config block:\n{want}"


def test_multi_gpu_launch_gets_the_same_configuration():
    "phase2_sft with num_processes > 1 starts `vtreetrm video phase2` under accelerate launch: its argv parses back to the same config."
    from vtreetrm.cli import argv_for, command_parser
    from vtreetrm.video.cli import phase2_cmd
    from vtreetrm.video.config import FeatureSpec
    from vtreetrm.video.phase2 import Phase2Config

    cfg = Phase2Config(num_queries=64, answer_order="analysis_first", cls_head=True, epochs=3, lr=3e-4)
    features = FeatureSpec(".c", "tiny", frames=6, grid=4)
    args = dict(dataset=Path("d/lote"), out=Path("r/phase2"), phase1=Path("p1/best"), features=features, resume=True,
                cfg=cfg)  # fmt: skip
    p = command_parser(phase2_cmd)
    ns = vars(p.parse_args(argv_for(phase2_cmd, **args)))
    for name, want in (("cfg", cfg), ("features", features)):
        cls, fields = p.configs[name]
        assert cls(**{f: ns.pop(f) for f in fields}) == want
    assert (ns["dataset"], ns["out"], ns["phase1"], ns["resume"]) == ("d/lote", "r/phase2", "p1/best", True)
