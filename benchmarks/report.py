"""A benchmark's committed summary: reports/NAME.json (its figures and what produced them) and reports/NAME.md (the
Markdown that `.ci/readme.py` puts in place of the README's `<!-- NAME -->` line), each replaced whole."""

import os
import sys
import time
from pathlib import Path

from vtreetrm.utils import atomic_write, provenance, write_json

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def begin(params: dict) -> dict:
    "The provenance of a benchmark run, taken when it starts (the checkout may change while it runs)."
    return provenance(params, command=["python", *sys.argv])


def write_report(name: str, figures: dict, markdown: str, pv: dict, seconds: float, quick: bool, out=None):
    "Write NAME.json and NAME.md under `out` (default: the repository's reports/), `pv` from `begin`; returns both paths."
    import torch

    out = Path(out or REPORTS)
    machine = {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "cuda": torch.cuda.is_available()}
    s = {"name": name, "quick": quick, "seconds": round(seconds), "date": time.strftime("%Y-%m-%d"),
         "machine": machine, "figures": figures, "provenance": pv}  # fmt: skip
    tail = (
        f"{'A --quick run (not for the README): ' if quick else ''}`{' '.join(pv['command'])}` on "
        f"{machine['cpus']} CPU cores{', a GPU' if machine['cuda'] else ''}, {round(seconds)} s, "
        f"vtreetrm {pv['versions'].get('vtreetrm')} at {str(pv.get('git_sha') or 'no git')[:10]}, {s['date']}."
    )
    return write_json(out / f"{name}.json", s), atomic_write(
        out / f"{name}.md", markdown.rstrip("\n") + "\n\n" + tail + "\n"
    )
