"""A benchmark's committed summary: reports/NAME.json (its figures and what produced them) and reports/NAME.md (the
Markdown that `.ci/readme.py` puts in place of the README's `<!-- NAME -->` line), each replaced whole."""

import os
import sys
import time
from pathlib import Path

from vtreetrm.utils import UserError, atomic_write, provenance, read_json, write_json

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def begin(params: dict) -> dict:
    "The provenance of a benchmark run, taken when it starts (the checkout may change while it runs)."
    return provenance(params, command=["python", *sys.argv])


def check_own_report(out: Path, name: str):
    "Refuse to write over NAME.json / NAME.md in `out` unless they are an earlier summary of this benchmark."
    j, md = out / f"{name}.json", out / f"{name}.md"
    try:
        ours = not j.exists() or (lambda o: isinstance(o, dict) and o.get("name") == name and "figures" in o)(
            read_json(j)
        )
    except UserError:
        ours = False
    if not ours or (md.exists() and not j.exists()) or j.is_symlink() or md.is_symlink():
        raise SystemExit(
            f"error: {out}: refusing to replace {j.name} / {md.name}: they are not a summary this benchmark wrote"
        )


def alternate(repeats: int, steps: int, variants: dict, sync=lambda: None) -> dict:
    """Seconds per step of each variant over `repeats`: `variants` maps a name to `run(repeat, n)`, called with n=1
    (a warm-up), then timed with n=`steps`; the repeats alternate which variant goes first."""
    names, times = list(variants), {k: [] for k in variants}
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            variants[name](r, 1)
            sync()
            t0 = time.perf_counter()
            variants[name](r, steps)
            sync()
            times[name].append((time.perf_counter() - t0) / steps)
    return times


def summary_markdown(s: dict, markdown: str) -> str:
    "NAME.md of the summary `s`: the benchmark's `markdown` of its figures, then what produced them."
    pv, machine = s["provenance"], s["machine"]
    tail = (
        f"{'A --quick run (not for the README): ' if s['quick'] else ''}`{' '.join(pv['command'])}` on "
        f"{machine['cpus']} CPU cores{', a GPU' if machine['cuda'] else ''}, {s['seconds']} s, "
        f"vtreetrm {pv['versions'].get('vtreetrm')} at {str(pv.get('git_sha') or 'no git')[:10]}, {s['date']}."
    )
    return markdown.rstrip("\n") + "\n\n" + tail + "\n"


def write_report(name: str, figures: dict, markdown: str, pv: dict, seconds: float, quick: bool, out=None):
    "Write NAME.json and NAME.md under `out` (default: the repository's reports/), `pv` from `begin`; returns both paths."
    import torch

    out = Path(out or REPORTS)
    check_own_report(out, name)
    machine = {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "cuda": torch.cuda.is_available()}
    s = {"name": name, "quick": quick, "seconds": round(seconds), "date": time.strftime("%Y-%m-%d"),
         "machine": machine, "figures": figures, "provenance": pv}  # fmt: skip
    return write_json(out / f"{name}.json", s), atomic_write(out / f"{name}.md", summary_markdown(s, markdown))


def render_report(name: str, markdown, out=None) -> Path:
    "NAME.md written again from NAME.json by `markdown(figures)`: the table changes, never a figure."
    out = Path(out or REPORTS)
    check_own_report(out, name)
    s = read_json(out / f"{name}.json")
    return atomic_write(out / f"{name}.md", summary_markdown(s, markdown(s["figures"])))
