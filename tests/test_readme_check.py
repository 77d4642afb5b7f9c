"""The README check trusts no typed figure: a figure typed into the README, into a committed reports/NAME.md or into
the README's prose fails it; every table is rendered again from its JSON; a table whose sources changed since its
commit says it is stale."""

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def readme(tmp_path, monkeypatch):
    "`.ci/readme.py` as a module, working on a copy of the index, the reports and the allow-list under tmp_path."
    spec = importlib.util.spec_from_file_location("readme_ci", ROOT / ".ci" / "readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for d in ("nbs", "reports", ".ci"):
        (tmp_path / d).mkdir()
    shutil.copy(ROOT / "nbs/index.ipynb", tmp_path / "nbs")
    shutil.copy(ROOT / mod.ALLOWED, tmp_path / mod.ALLOWED)
    shutil.copy(ROOT / ".ci/verdicts.py", tmp_path / ".ci")  # demo_arith's table is its renderer's
    for f in (ROOT / "reports").glob("*.*"):
        shutil.copy(f, tmp_path / "reports")
    shutil.copytree(ROOT / "benchmarks", tmp_path / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(mod, "root", tmp_path)
    return mod


def check(mod, monkeypatch, *argv):
    monkeypatch.setattr("sys.argv", ["readme.py", *argv])
    mod.main()


def test_the_readme_is_made_from_the_json_and_a_typed_figure_fails(readme, tmp_path, monkeypatch, capsys):
    check(readme, monkeypatch)  # writes README.md (no git here: whether each table is stale cannot be told)
    text = (tmp_path / "README.md").read_text()
    s = json.loads((tmp_path / "reports/demo_summary.json").read_text())
    top1 = f"{s['rows'][0]['top1']:.3f}"
    assert f"| {s['rows'][0]['run']} | " in text and f" | {top1} | " in text
    assert "*Measured at `" + s["provenance"]["git_sha"][:10] in text and "cannot be told here" in text
    check(readme, monkeypatch, "--check")
    assert "README.md is what nbs/index.ipynb and the 7 reports/*.json give" in capsys.readouterr().out
    # typed over the headline row of the README: the check fails
    (tmp_path / "README.md").write_text(text.replace(f" | {top1} | ", " | 0.999 | ", 1))
    with pytest.raises(SystemExit, match="README.md differs from nbs/index.ipynb and reports/"):
        check(readme, monkeypatch, "--check")
    # typed over the intermediate report, then the README made from it: both refuse
    md = tmp_path / "reports/demo_summary.md"
    md.write_text(md.read_text().replace(f" | {top1} | ", " | 0.999 | ", 1))
    for argv in ((), ("--check",)):
        with pytest.raises(SystemExit, match=r"demo_summary.md differs from what demo_summary.json renders"):
            check(readme, monkeypatch, *argv)
    check(readme, monkeypatch, "--reports")  # written again from the JSON: the typed figure is gone
    assert " | 0.999 | " not in md.read_text() and f" | {top1} | " in md.read_text()
    # a benchmark's report too, through the benchmark's own renderer
    rm = tmp_path / "reports/real_release.md"
    rm.write_text(rm.read_text().replace("| 37.5 |", "| 25.0 |", 1))
    with pytest.raises(SystemExit, match="real_release.md differs from what real_release.json renders"):
        check(readme, monkeypatch, "--check")
    check(readme, monkeypatch, "--reports")
    # and the table of the demo on another arithmetic, rendered by .ci/verdicts.py from both summaries
    am = tmp_path / "reports/demo_arith.md"
    assert "| within seed noise: " in am.read_text() and "AVX2 kernels" in am.read_text()
    am.write_text(am.read_text().replace("differs (borderline in the README)", "same", 1))
    with pytest.raises(SystemExit, match="demo_arith.md differs from what demo_arith.json renders"):
        check(readme, monkeypatch, "--check")


def test_a_figure_in_the_prose_needs_a_json_or_the_allow_list(readme, tmp_path):
    body = "Intro.\n\nThe export takes 12.5 s on 2 cores, 30% faster, 1.4x the bare loop.\n\n```bash\nsleep 5 s\n```\n"
    with pytest.raises(SystemExit) as e:
        readme.check_prose(body)
    msg = str(e.value)
    assert all(f"{f!r}" in msg for f in ("12.5 s", "30%", "1.4x")) and "sleep" not in msg  # code blocks left out
    assert "`x 3 s`" not in readme.prose_figures("see `x 3 s` here")  # inline code left out
    assert not readme.prose_figures("a 2-layer, 64-wide Qwen2 of 1,000 records, vtreetrm 0.1.0")  # no unit: no figure
    allow = tmp_path / readme.ALLOWED
    allow.write_text("takes 12.5 s  # a goal\n30% faster  # a goal\n1.4x the bare loop  # a goal\n")
    readme.check_prose(body)
    allow.write_text(allow.read_text() + "gone 9 s  # no longer in the prose\n")
    with pytest.raises(SystemExit, match=r"lists phrases the README no longer holds: \['gone 9 s'\]"):
        readme.check_prose(body)
    allow.write_text("takes 12.5 s\n")
    with pytest.raises(SystemExit, match="line 1: write `PHRASE  # why"):
        readme.check_prose(body)


def test_the_index_prose_holds_no_unbacked_figure():
    "The committed index passes the prose check (the README check runs it too; this names the figure on failure)."
    spec = importlib.util.spec_from_file_location("readme_ci", ROOT / ".ci" / "readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from nbconvert import MarkdownExporter

    mod.check_prose(MarkdownExporter().from_filename(str(ROOT / "nbs/index.ipynb"))[0])


def test_a_table_whose_sources_changed_is_marked_stale(readme, tmp_path):
    git = ["git", "-C", str(tmp_path), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "benchmarks").mkdir(exist_ok=True)
    src = tmp_path / "benchmarks/phase2_scale.py"
    subprocess.run([*git, "add", "benchmarks/phase2_scale.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    s = json.loads((tmp_path / "reports/phase2_scale.json").read_text())
    s["provenance"]["git_sha"] = sha
    assert readme.stale("phase2_scale", s) == []
    assert "Stale" not in readme.measured_line("phase2_scale", s, readme.stale("phase2_scale", s))
    src.write_text(src.read_text() + "\n# changed\n")
    assert readme.stale("phase2_scale", s) == ["benchmarks/phase2_scale.py"]
    line = readme.measured_line("phase2_scale", s, readme.stale("phase2_scale", s))
    assert "**Stale**: changed since then: `benchmarks/phase2_scale.py`; run `python benchmarks/phase2_scale.py" in line
    s["provenance"]["git_sha"] = "0" * 40  # a commit this clone does not have
    assert readme.stale("phase2_scale", s) is None and "cannot be told here" in readme.measured_line(
        "phase2_scale", s, readme.stale("phase2_scale", s)
    )


def test_the_verdicts_check_fails_on_a_verdict_another_machine_does_not_repeat():
    "`.ci/verdicts.py` sets a demo summary's verdicts beside the README's: a flipped clear verdict fails, a borderline one not."
    import copy

    spec = importlib.util.spec_from_file_location("verdicts_ci", ROOT / ".ci" / "verdicts.py")
    v = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(v)
    readme = json.loads((ROOT / "reports/demo_summary.json").read_text())
    lines, bad = v.compare(readme, readme)
    assert lines and not bad and all(line.endswith(": same") for line in lines)
    here = copy.deepcopy(readme)
    shuffled = next(r for r in here["rows"] if r["run"].endswith("_shuffled"))
    shuffled["top1"] = 0.918  # the shuffled-labels control as good as its model: "separated" no longer holds
    lines, bad = v.compare(readme, here)
    assert bad == [next(k for k in v.verdicts(readme) if k.startswith("shuffled-labels control"))], lines
    assert any("DIFFERS" in line for line in lines)
    rows = {r["run"]: r for r in here["rows"]}
    rows["lote_m32_simple_actions_first_shuffled"]["top1"] = readme["rows"][1]["top1"]  # back as it was
    # the ladder's answer within noise of its probe here: borderline in the README, so no failure
    ladder = next(k for k in v.verdicts(readme) if k.startswith("ladder"))
    m = v.verdict_margin(*v.verdicts(readme)[ladder])
    assert v.BORDERLINE[0] <= m <= v.BORDERLINE[1], m
    for rungs in here["ladders"].values():
        for g in rungs:
            if g.get("stage") == "linear probe: Phase-1 behaviour embedding":
                g["top1"] = 0.925
    lines, bad = v.compare(readme, here)
    assert not bad and any("differs (borderline in the README)" in line for line in lines), lines
