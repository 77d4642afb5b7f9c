"""The main job (`vtreetrm demo`) end to end, the report's tables, escaping, and its rendering in headless Chromium."""

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import CHROMIUM, chromium_cmd


@pytest.fixture
def demo(synthetic_eval):
    return synthetic_eval


def test_demo_outputs(demo):
    d, stdout = demo
    assert stdout.strip().splitlines()[-1] == f"report: {(d / 'report.html').resolve()}"
    run = d / "runs" / "demo-eval-seed0"
    assert json.loads((run / "run.json").read_text())["status"] == "done"
    m = json.loads((run / "metrics.json").read_text())
    scored = [
        json.loads(p.read_text()) for p in (d / "runs" / "demo-data-seed0" / "eval_outputs").rglob("metrics.json")
    ]
    assert m["runs_scored"] == len(scored) == 56
    assert m["mean_top1"] == pytest.approx(np.mean([s["top1_accuracy_single_label"] for s in scored]))
    by_m = m["query_diversity_by_M"]
    ratios = [by_m[str(M)]["effective_rank_ratio"] for M in (64, 128, 512)]
    ginis = [by_m[str(M)]["gini"] for M in (64, 128, 512)]
    assert ratios == sorted(ratios, reverse=True) and ginis == sorted(ginis)  # the seed's trend, by construction
    assert json.loads((d / "report.json").read_text())["num_runs"] == 56


def test_report_tables(demo):
    d, _ = demo
    html = (d / "report.html").read_text()
    for title in (
        "Label simplification (actions_first, M=64)",
        "M sweep, simplified labels: analysis_first",
        "M sweep, simplified labels: actions_first",
        "Auxiliary classification head vs baseline",
        "p1-own variant vs baseline",
        "e2-drop10 variant vs baseline",
        "flip-balanced variant vs baseline",
        "Cross-dataset / zero-shot",
        "Q-former query diversity",
    ):
        assert title in html, title
    assert "n = min(M, d)" in html and "ceiling n/M" in html  # R_eff/M beside the bound d/M puts on it
    assert (
        "8. Cross-dataset / zero-shot" in html
        and "9. Q-former query diversity" in html
        and "9.4 Effective-rank" in html
    )  # the seed's numbering
    assert html.count("font-weight: bold") >= 20
    assert "synthetic Qwen2.5-7B (simplified labels)" in html and "synthetic Qwen3-8B (MammalNet→LoTE-Animal)" in html
    assert (
        len(re.findall(r'src="data:image/png;base64,', html)) == 4 + 2 * 2
    )  # query diversity; F1 bars + confusion per dataset
    assert "Glossary" in html and "e2-drop10" in html and "Best run of each dataset, class by class" in html
    simp = html[html.index("Label simplification: official") :]
    assert "LoTE-Animal (21 labels, " in simp and "CircumanalGlandSigning" in simp and "scent marking" in simp
    assert "import " not in html and "collect_runs(" not in html  # no code cells
    # every row of every numbered table is in the HTML under its title, with its values
    from vtreetrm.runs.report import collect_runs, comparison_tables

    runs, missing, bad = collect_runs([d / "runs" / "demo-data-seed0" / "eval_outputs"])
    assert len(runs) == 56 and not missing and not bad
    tables = comparison_tables(runs)
    for i, (title, t) in enumerate(tables, 1):
        sec = html[html.index(f"{i}. {title}") :]
        sec = sec[: sec.index(f"{i + 1}. ")] if i < len(tables) else sec
        for _, r in t.iterrows():
            assert f"{r['Top1']:.2f}" in sec and f"{r['Macro-F1']:.2f}" in sec and r["Model"] in sec, (title, dict(r))


def test_escaping_and_missing_metrics(tmp_path, cli):
    run = tmp_path / "eval" / "run1"
    run.mkdir(parents=True)
    (run / "predictions.jsonl").write_text(
        json.dumps({"gold": ["<b>a</b>"], "output": "<predicted_actions><b>a</b></predicted_actions>"}) + "\n"
    )
    (run / "params.json").write_text(
        json.dumps({"model": "<script>alert(1)</script>", "dataset": "D&D", "num_queries": 64})
    )
    cli("eval", "metrics", tmp_path / "eval", check=0)
    (tmp_path / "eval" / "run2").mkdir()
    shutil.copy(run / "predictions.jsonl", tmp_path / "eval" / "run2")
    cli("report", "build", tmp_path / "eval", "--out", tmp_path / "r.html", "--title", "A <i>title</i>", check=0)
    html = (tmp_path / "r.html").read_text()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "A &lt;i&gt;title&lt;/i&gt;" in html and "D&amp;D" in html
    assert (
        "Runs with predictions but no metrics" in html
        and "vtreetrm eval metrics eval --only-missing" in html
        and "eval/run2" in html
    )
    assert str(tmp_path) not in html


def test_report_refusals(tmp_path, cli):
    assert (
        "no such folder of runs"
        in cli("report", "build", tmp_path / "nope", "--out", tmp_path / "r.html", check=2).stderr
    )
    (tmp_path / "e").mkdir()
    assert (
        "no summary.json"
        in cli(
            "report", "build", tmp_path / "e", "--analysis", tmp_path / "e", "--out", tmp_path / "r.html", check=2
        ).stderr
    )
    assert not (tmp_path / "r.html").exists()


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (make test installs it where it can)")
def test_report_renders_in_chromium(demo, tmp_path):
    d, _ = demo
    flags = chromium_cmd(tmp_path / "profile", "--virtual-time-budget=5000")
    url = (d / "report.html").resolve().as_uri()
    dom = subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    assert (
        dom.count("<table") >= 9 and dom.count("<img") == 4 + 2 * 2
    )  # query diversity; F1 bars + confusion per dataset
    assert "Cross-dataset / zero-shot" in dom
    # every embedded figure decodes as a real image
    import io

    import matplotlib.image as mpimg

    for b64 in re.findall(r'src="data:image/png;base64,([^"]+)"', dom):
        img = mpimg.imread(io.BytesIO(base64.b64decode(b64)), format="png")
        assert img.shape[0] > 100 and img.shape[1] > 100 and img.std() > 0.01
    shot = tmp_path / "shot.png"
    subprocess.run(flags + ["--window-size=1200,2400", f"--screenshot={shot}", url], capture_output=True, timeout=120)
    img = mpimg.imread(shot)
    assert img.shape[:2] == (2400, 1200) and img.std() > 0.05  # a rendered page, not a blank one


def test_rankreg_and_ladder_sections(tmp_path, cli):
    """A rankreg run and its baseline side by side with their query figures, a ladder, and no machine path or
    markup from the data in either section."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    for name, rr, q in (
        ("m128", 0, np.outer(rng.normal(size=16), rng.normal(size=16))),
        ("m128_rankreg", 0.2, rng.normal(size=(16, 16))),
    ):
        d = tmp_path / "runs" / name
        d.mkdir(parents=True)
        (d / "params.json").write_text(
            json.dumps({"dataset": "lote", "config": {"llm": "tiny", "num_queries": 16, "rank_reg": rr}})
        )
        (d / "metrics.json").write_text(json.dumps({"top1_accuracy_single_label": 0.5 + rr, "macro_f1": 0.3}))
        save_file({"query_tokens": q[None].astype(np.float32)}, str(d / "query_tokens.safetensors"))
        (d / "steps.jsonl").write_text(json.dumps({"epoch": 1, "query_rank_entropy": 0.05 + rr}) + "\n")
    (tmp_path / "runs" / "m128" / "ladder.json").write_text(
        json.dumps(
            {
                "dataset": "lote",
                "split": "test",
                "chance_top1": 0.05,
                "majority_top1": 0.16,
                "rungs": [
                    {"stage": "<script>alert(1)</script>", "top1": 0.881, "macro_f1": 0.8},
                    {
                        "stage": "Phase-2 cls head",
                        "top1": None,
                        "macro_f1": None,
                        "note": "the run was trained without --cls-head",
                    },
                ],
            }
        )
    )
    cli("report", "build", tmp_path / "runs", "--out", tmp_path / "r.html", check=0)
    html = (tmp_path / "r.html").read_text()
    sec = html[html.index("Query-diversity regulariser (rankreg) vs baseline") : html.index("Learnability ladder")]
    assert "tiny (baseline)" in sec and "tiny (rankreg)" in sec and ">runs/m128_rankreg<" in sec and "70.00" in sec
    assert "0.050" in sec and "0.250" in sec  # output rank entropy of each run
    assert str(tmp_path) not in html  # no path of this machine anywhere
    lad = html[html.index("Learnability ladder") :]
    assert (
        "LoTE-Animal test — m128" in lad
        and "88.1" in lad
        and "trained without --cls-head" in lad
        and "majority class" in lad
    )
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in lad


def _layout(url: str, width: int, shot: Path) -> dict:
    """Open `url` in headless Chromium at `width` px over the DevTools protocol (on a pipe: no port, no extra package)
    and return the page's scroll width, its viewport width and every table wider than the viewport (with whether an
    ancestor scrolls it); a screenshot goes to `shot`. DevTools evaluation is not subject to the report's CSP."""
    import os
    import time

    r3, w3 = os.pipe()
    r4, w4 = os.pipe()

    def child():  # Chromium reads commands on fd 3 and answers on fd 4
        a, b = os.dup(r3), os.dup(w4)
        os.dup2(a, 3)
        os.dup2(b, 4)

    p = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--remote-debugging-pipe",
            "--no-first-run",
            "--disable-background-networking",
            f"--user-data-dir={shot.parent / 'cdp-profile'}",
            "about:blank",
        ],
        close_fds=False,
        preexec_fn=child,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(r3)
    os.close(w4)
    state = {"buf": b"", "id": 0}

    def call(method, session=None, **params):
        state["id"] += 1
        os.write(
            w3,
            json.dumps(
                {"id": state["id"], "method": method, "params": params, **({"sessionId": session} if session else {})}
            ).encode()
            + b"\0",
        )
        while True:
            while b"\0" not in state["buf"]:
                state["buf"] += os.read(r4, 1 << 16)
            raw, state["buf"] = state["buf"].split(b"\0", 1)
            m = json.loads(raw)
            if m.get("id") == state["id"]:
                assert "error" not in m, m
                return m["result"]

    try:
        sid = call(
            "Target.attachToTarget", targetId=call("Target.createTarget", url="about:blank")["targetId"], flatten=True
        )["sessionId"]
        call("Emulation.setDeviceMetricsOverride", sid, width=width, height=900, deviceScaleFactor=1, mobile=False)
        call("Page.navigate", sid, url=url)
        for _ in range(200):
            if (
                call("Runtime.evaluate", sid, expression="document.readyState", returnByValue=True)["result"]["value"]
                == "complete"
            ):
                break
            time.sleep(0.1)
        js = """JSON.stringify({page: document.documentElement.scrollWidth, view: document.documentElement.clientWidth,
                 tables: document.querySelectorAll('table').length,
                 wide: [...document.querySelectorAll('table')].filter(t => t.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
                       .map(t => ({head: (t.querySelector('th') || {}).textContent, scrolls: (() => {
                           for (let e = t.parentElement; e; e = e.parentElement) if (['auto', 'scroll'].includes(getComputedStyle(e).overflowX)) return true;
                           return false; })()}))})"""
        out = json.loads(call("Runtime.evaluate", sid, expression=js, returnByValue=True)["result"]["value"])
        shot.write_bytes(base64.b64decode(call("Page.captureScreenshot", sid, format="png")["data"]))
        return out
    finally:
        p.kill()
        p.wait()
        os.close(w3)
        os.close(r4)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (make sysdeps installs it)")
def test_report_fits_a_1300_px_page(demo, tmp_path):
    """At 1300 px the page never scrolls sideways: a table wider than the page (all scored runs) scrolls inside its own box."""
    d, _ = demo
    lay = _layout((d / "report.html").resolve().as_uri(), 1300, tmp_path / "shot.png")
    assert lay["tables"] >= 10 and lay["page"] <= lay["view"] <= 1300, lay
    assert all(t["scrolls"] for t in lay["wide"]), lay
    import matplotlib.image as mpimg

    img = mpimg.imread(tmp_path / "shot.png")
    assert img.shape[1] == 1300 and img.std() > 0.05
