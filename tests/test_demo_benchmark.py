"""benchmarks/demo_time.py reads a finished demo right: its floor from the run folders' times, its figures against
the committed summary (a changed figure is named)."""

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fake_demo(folder: Path, top1_shift: float = 0.0) -> Path:
    "A finished 1-seed demo: data written at t=1000, two Phase-2 runs of 30 s and 50 s from t=1080, 2 processes."
    committed = json.loads((ROOT / "reports" / "demo_summary.json").read_text())
    rows = [dict(r) for r in committed["rows"] if r["seed"] == 0][:2]
    rows[0]["top1"] += top1_shift
    qd = {r["run"]: committed["query_diversity"]["runs"][r["run"]] for r in rows}
    summary = {**committed, "seeds": 1, "jobs": 2, "seconds": 200, "rows": rows, "query_diversity": {"runs": qd}}
    (folder / "demo_summary.json").parent.mkdir(parents=True)
    (folder / "demo_summary.json").write_text(json.dumps(summary))
    data = folder / "runs" / "video_demo" / "data" / "report.json"
    data.parent.mkdir(parents=True)
    data.write_text("{}")
    os.utime(data, (1000, 1000))
    for r, secs in zip(rows, (30, 50)):
        run = folder / "runs" / "video_demo" / "runs" / r["run"]
        run.mkdir(parents=True)
        started = datetime.fromtimestamp(1080, timezone.utc).isoformat(timespec="seconds")
        (run / "run.json").write_text(json.dumps({"status": "done", "started": started}))
        (run / "metrics.json").write_text("{}")
        os.utime(run / "metrics.json", (1080 + secs, 1080 + secs))
    return folder


def bench(*folders) -> list:
    argv = [sys.executable, ROOT / "benchmarks" / "demo_time.py", "--from", *folders]
    return subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT).stdout.splitlines()


def test_demo_time_reads_floor_and_figures(tmp_path):
    same, moved = fake_demo(tmp_path / "same"), fake_demo(tmp_path / "moved", top1_shift=0.01)
    lines = bench(same, moved)
    # serial 80 s (data at 1000, first run at 1080) + (30 + 50) CPU-s / 2 processes = 120 s
    assert "200 s (goal <= 360 s); floor at the same math 120 s = serial 80 s + 2 Phase-2 runs' 80 CPU-s" in lines[0]
    assert lines[0].endswith("figures: as committed")
    assert "1 differ" in lines[1] and ".top1:" in lines[1]
    assert lines[-1] == "make demo --seeds 1: 0.56x the goal, 1.67x its floor"


def test_demo_time_runs_the_demo_and_reads_it(tmp_path, monkeypatch, capsys):
    "Without --from: each demo it runs is read with its own wall time (the demo itself replaced by a finished fake)."
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import demo_time
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    ran = []

    def run_demo(seeds, work):
        ran.append(seeds)
        return fake_demo(work / f"seeds{seeds}"), 150.0

    monkeypatch.setattr(demo_time, "run_demo", run_demo)
    monkeypatch.setattr(sys, "argv", ["demo_time.py", "--seeds", "1"])
    demo_time.main()
    lines = capsys.readouterr().out.splitlines()
    assert ran == [1] and "make demo --seeds 1: 150 s (goal <= 360 s)" in lines[1] and lines[1].endswith("as committed")
    assert lines[-1] == "make demo --seeds 1: 0.42x the goal, 1.25x its floor"
