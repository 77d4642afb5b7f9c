"""The tests of a module's notebook run against the exported module: each code cell but the exported ones runs, in
order, in a namespace holding the module's own names (private ones too), so the notebook's tests call the module's
functions, not the notebook's copies. `nbdev_test` runs the notebooks as written; this runs their tests on what users
import, which is also what `make mutate` mutates (its mutants are killed by these tests too)."""

import importlib
import json
import re
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the notebooks of the modules whose guarantees are security or numbers (`make mutate`'s scope)
NOTEBOOKS = ["00_utils.ipynb", "harness/04_store.ipynb", "harness/03_gate.ipynb", "eval/00_parse.ipynb",
             "eval/01_metrics.ipynb", "release/14_rollout.ipynb", "release/05_audit.ipynb"]  # fmt: skip
EXPORTED = re.compile(r"^\s*#\|\s*(export|exports|exporti|default_exp)\b", re.M)
SKIPPED = re.compile(r"^\s*#\|\s*(slow|cuda|eval:\s*false)\b", re.M)  # what nbdev_test skips by default


def module_of(nb: dict) -> str:
    for c in nb["cells"]:
        if m := re.search(r"#\|\s*default_exp\s+(\S+)", "".join(c["source"])):
            return f"vtreetrm.{m[1]}"
    raise AssertionError("no default_exp cell")


def cells_to_run(nb: dict) -> list:
    "(cell id, source) of each code cell a notebook test runs: neither exported nor flagged off."
    out = []
    for c in nb["cells"]:
        src = "".join(c["source"])
        if c["cell_type"] == "code" and not EXPORTED.search(src) and not SKIPPED.search(src) and src.strip():
            out.append((c.get("id"), src))
    return out


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_notebooks_tests_pass_on_its_module(name, monkeypatch, tmp_path):
    path = ROOT / "nbs" / name
    nb = json.loads(path.read_text(encoding="utf-8"))
    mod = importlib.import_module(module_of(nb))
    ns = {**vars(mod), "__name__": "__main__"}
    monkeypatch.chdir(path.parent)  # as nbdev_test runs it
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what the cells leave behind goes with tmp_path
    cells = cells_to_run(nb)
    assert cells, f"{name} has no test cell"
    for cid, src in cells:
        exec(compile(src, f"{name} cell {cid}", "exec"), ns)  # noqa: S102 - the project's own notebook
    for k, v in vars(mod).items():  # the tests called the module's functions: no cell redefined one
        if callable(v) and getattr(v, "__module__", None) == mod.__name__:
            assert ns.get(k) is v, (
                f"{name}: a test cell redefines {k}, so the notebook's tests do not test the module's"
            )
