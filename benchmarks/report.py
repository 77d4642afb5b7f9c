"""A benchmark's committed summary: reports/NAME.json (its figures and what produced them) and reports/NAME.md (the
Markdown that `.ci/readme.py` puts in place of the README's `<!-- NAME -->` line), each replaced whole."""

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

from vtreetrm.utils import UserError, atomic_write, provenance, read_json, write_json

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def begin(params: dict) -> dict:
    "The provenance of a benchmark run, taken when it starts (the checkout may change while it runs)."
    return provenance(params, command=["python", *sys.argv])


def summary_parser(name: str, doc: str, quick: str) -> argparse.ArgumentParser:
    "The flags of a benchmark that writes reports/NAME.json and .md: --quick (help `quick`), --work, --out, --render."
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=quick)
    ap.add_argument("--work", default=None, help="keep the runs here (default: a temporary folder, removed)")
    ap.add_argument("--out", default=None, help=f"where {name}.json/.md go (default: the repository's reports/)")
    ap.add_argument("--render", action="store_true", help=f"write {name}.md again from {name}.json, run nothing")
    return ap


@contextlib.contextmanager
def work_folder(work, name: str):
    "A benchmark's run folder: `work` (made, and kept), else a temporary one removed at the end."
    if work:
        Path(work).mkdir(parents=True, exist_ok=True)
        yield Path(work)
        return
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as d:
        yield Path(d)


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


def epoch_batches(inputs, cfg, epoch: int, n: int) -> list:
    "The first `n` batches of `epoch` as `Phase2Trainer` draws them from `inputs` (the epoch repeated where it is shorter)."
    from vtreetrm.video.phase2 import _epoch_order, rank_batches

    batches = rank_batches(_epoch_order(inputs.train, cfg, epoch, inputs.mirrored), cfg.batch_size)
    return (batches * (n // len(batches) + 1))[:n]


def trainer_steps(tr, cfg):
    "`run(n, epoch)`: `n` more optimizer steps of the `Phase2Trainer` `tr` (config `cfg`) in `epoch`."
    from dataclasses import replace

    def run(n: int, epoch: int):
        tr.cfg = replace(cfg, max_steps=tr.step + n)
        tr.train_epoch(epoch)

    return run


def plain_steps(loss_of, opt):
    "`run(inputs)`: the bare loop, one step per input: `loss_of(x)`, backward, `opt.step()`."

    def run(inputs: list):
        for x in inputs:
            loss = loss_of(x)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    return run


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
