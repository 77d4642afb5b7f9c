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


def verdicts_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "verdicts_ci", Path(__file__).resolve().parents[1] / ".ci/verdicts.py"
    )
    v = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(v)
    return v


@pytest.mark.slow
@pytest.mark.shows_output  # each verdict beside the README's, in CI's log
def test_the_demo_at_the_readme_seeds_holds_together_and_repeats_its_verdicts(tmp_path):
    """The whole `vtreetrm demo` at the seeds and jobs of the committed summary (the README's table): its runs, ladders,
    report and summary agree with each other, and each verdict is the README's or marked borderline there (the
    slow tier's run of the demo, and CI's derivation of the README's verdicts; `make verdicts` is this check alone)."""
    import time

    from vtreetrm.demo import demo_summary, summary_markdown
    from vtreetrm.runs.report import collect_runs, rankreg_table
    from vtreetrm.video.config import FeatureSpec
    from vtreetrm.video.demo import demo_runs
    from vtreetrm.video.ladder import ladder

    v, t0 = verdicts_module(), time.perf_counter()
    readme = v.readme_summary()
    here = json.loads(v.run_demo(tmp_path, readme).read_text())
    bad = v.report(readme, here, time.perf_counter() - t0)
    assert not bad, bad
    d = tmp_path / "runs" / "video_demo"
    runs = demo_runs(seeds=readme["seeds"])
    names = [r["name"] for r in runs] + [runs[2]["name"] + "_to_lote"]  # the MammalNet run scored on LoTE too
    assert sorted(r["run"] for r in here["rows"]) == sorted(names), here["rows"]
    assert {r["dataset"] for r in here["rows"]} == {"lote", "mammalnet"} and here["seeds"] == readme["seeds"] >= 2
    head, last = runs[0]["name"], readme["seeds"] - 1
    p = json.loads((d / "runs" / f"{head}_seed{last}" / "params.json").read_text())
    assert p["config"]["seed"] == last  # the seed reaches the run's own config
    for r in here[
        "rows"
    ]:  # each row's Top1 is its run's scored metrics.json (scored against scikit-learn in test_eval_cli)
        m = json.loads((d / "runs" / r["run"] / "metrics.json").read_text())
        assert r["top1"] == pytest.approx(m["top1_accuracy_single_label"]), r["run"]
    stages = [g["stage"] for g in json.loads((d / "runs" / head / "ladder.json").read_text())["rungs"]]
    assert stages[0] == "linear probe: frozen encoder features" and stages[-1] == "Phase-2 generated answer"
    # each seed's ladder (its probes fitted once for all seeds) is what one `ladder` call for that run writes
    for run in (head, f"{head}_seed{last}"):
        one = ladder(d / "data" / "lote", FeatureSpec(d / "cache"), d / "runs" / "phase1_joint" / "best",
                     d / "runs" / run / "best", progress=False)  # fmt: skip
        assert json.loads((d / "runs" / run / "ladder.json").read_text()) == json.loads(json.dumps(one)), run
    # the report: the rank-reg pair side by side with its query figures, and the headline's ladder
    rr = rankreg_table(collect_runs([d / "runs"])[0])
    assert rr["Model"].str.endswith("(rankreg)").sum() == readme["seeds"], rr
    assert rr[["R_eff/M", "Gini", "output rank entropy"]].notna().all().all() and (rr["ceiling n/M"] == 1).all()
    html = (tmp_path / "report" / "group_meeting.html").read_text()
    assert "Query-diversity regulariser (rankreg) vs baseline" in html and "Learnability ladder" in html
    assert "linear probe: Phase-1 behaviour embedding" in html and runs[4]["name"] in html
    # steps 3 and 4 ran beside the last Phase-2 runs, each to its own report
    for name in ("demo-release", "demo-harness"):
        assert (tmp_path / "runs" / name / f"{name}.html").is_file(), name
    # the summary the command wrote is what demo_summary gives from the runs again, and its markdown says the seeds
    again = demo_summary(d, here["seconds"], False, analysis=tmp_path / "runs" / "video_demo-analysis" / "analysis")
    assert again["comparisons"] == here["comparisons"] and again["rows"] == here["rows"]
    assert f"({readme['seeds']} seeds)" in summary_markdown(here)


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
