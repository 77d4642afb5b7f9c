#!/usr/bin/env python3
"""Each guarantee the docs claim, broken on purpose: the breakage is applied to the module and to the notebook it is
exported from (in a copy of the checkout), and the test named beside it must then fail. Exit 1 naming each breakage no
test caught, or whose text is no longer in the module or its notebook (the list must follow the code).

python .ci/breakages.py            # every breakage
python .ci/breakages.py -k lock    # those whose name holds "lock"  (`make breakages`; `.ci/run` runs them all)"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

root = Path(__file__).resolve().parents[1]
G = "tests/test_guarantees.py::"

# name, module, old text, new text, the test that must fail
BREAKAGES = [
    ("store: read-only db opened read-write", "vtreetrm/harness/store.py", '?mode=ro"', '?mode=rwc"',
     G + "test_a_readonly_harness_db_refuses_every_write"),
    ("xlsx: formula scan holds every piece", "vtreetrm/release/preprocess.py",
     "    for buf in pieces:\n        for m in _TAG.finditer(buf):",
     "    for buf in list(pieces):\n        for m in _TAG.finditer(buf):",
     G + "test_the_formula_scan_holds_one_piece_at_a_time"),
    ("lock: no inode re-check", "vtreetrm/utils.py",
     "os.path.exists(path) and os.stat(path).st_ino == os.fstat(fd).st_ino", "True",
     G + "test_the_folder_lock_refuses_a_lock_file_its_holder_let_go"),
    ("lock: existence checked, not the inode", "vtreetrm/utils.py",
     "os.path.exists(path) and os.stat(path).st_ino == os.fstat(fd).st_ino", "os.path.exists(path)",
     G + "test_the_folder_lock_refuses_a_lock_file_its_holder_let_go"),
    ("lock: lock file opened through a link", "vtreetrm/utils.py",
     "os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC", "os.O_RDWR | os.O_CREAT | os.O_CLOEXEC",
     G + "test_the_folder_lock_refuses_a_link_in_place_of_its_lock_file"),
    ("trees: a per-video barrier before the summaries", "vtreetrm/harness/trees.py",
     "caps = [await texts[float(t[i])] for _, ks in segs for i in ks]",
     "caps = [(await asyncio.gather(*texts.values())) and texts[float(t[i])].result() for _, ks in segs for i in ks]",
     G + "test_a_clip_summary_waits_for_its_own_captions_only"),
    ("seed verdict: <= instead of <", "vtreetrm/demo.py", "abs(ma - mb) < 2 * max(sds)", "abs(ma - mb) <= 2 * max(sds)",
     G + "test_the_seed_verdict_is_the_two_sd_rule"),
    ("seed verdict: 1 sd instead of 2", "vtreetrm/demo.py", "abs(ma - mb) < 2 * max(sds)", "abs(ma - mb) < 1 * max(sds)",
     G + "test_the_seed_verdict_is_the_two_sd_rule"),
    ("seed verdict: the smaller sd", "vtreetrm/demo.py", "abs(ma - mb) < 2 * max(sds)", "abs(ma - mb) < 2 * min(sds)",
     G + "test_the_seed_verdict_is_the_two_sd_rule"),
]  # fmt: skip


def notebook_of(module: Path) -> Path:
    "The notebook a module is exported from (nbdev's first line names it)."
    head = module.read_text(encoding="utf-8").splitlines()[2]
    return (module.parent / head.split("File to edit: ")[1].rstrip(".")).resolve()


def replace_once(path: Path, old: str, new: str):
    "`old` replaced by `new` in a module, or in the code cells of a notebook; exits unless `old` is there exactly once."
    if path.suffix != ".ipynb":
        text = path.read_text(encoding="utf-8")
        if text.count(old) != 1:
            sys.exit(f"{path}: the breakage's text is there {text.count(old)} times, not once: update .ci/breakages.py")
        path.write_text(text.replace(old, new), encoding="utf-8")
        return
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = [c for c in nb["cells"] if c["cell_type"] == "code" and old in "".join(c["source"])]
    if len(cells) != 1 or "".join(cells[0]["source"]).count(old) != 1:
        sys.exit(f"{path}: the breakage's text is not in exactly one code cell: update .ci/breakages.py")
    cells[0]["source"] = "".join(cells[0]["source"]).replace(old, new).splitlines(keepends=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def caught(name, module, old, new, test) -> tuple[bool, str]:
    "Apply one breakage to a copy of the checkout and run its test there: (whether the test failed, pytest's last line)."
    with tempfile.TemporaryDirectory(prefix="breakage-") as t:
        t = Path(t)
        for d in ("vtreetrm", "tests", "nbs"):
            shutil.copytree(root / d, t / d, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
        for f in ("pyproject.toml", "settings.ini"):
            shutil.copy(root / f, t / f)
        nb = notebook_of(root / module).relative_to(root)
        replace_once(t / module, old, new)
        replace_once(t / nb, old, new)
        env = {**os.environ, "PYTHONPATH": str(t), "PYTHONDONTWRITEBYTECODE": "1"}
        code = f"import vtreetrm, sys; sys.exit(vtreetrm.__file__ != {str(t / 'vtreetrm' / '__init__.py')!r})"
        if subprocess.run([sys.executable, "-c", code], cwd=t, env=env).returncode:
            sys.exit("the copy's vtreetrm is not the one imported: PYTHONPATH did not take")
        argv = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test]
        p = subprocess.run(argv, cwd=t, env=env, capture_output=True, text=True, timeout=600)
        last = (p.stdout.strip().splitlines() or [""])[-1]
        return p.returncode == 1 and " failed" in last, last


def main():
    pick = sys.argv[sys.argv.index("-k") + 1] if "-k" in sys.argv else ""
    chosen = [b for b in BREAKAGES if pick in b[0]]
    if not chosen:
        sys.exit(f"no breakage's name holds {pick!r}")
    missed, t0 = [], time.perf_counter()
    for b in chosen:
        ok, last = caught(*b)
        print(f"{'caught' if ok else 'MISSED'}: {b[0]} -> {b[4].split('::')[-1]} ({last})", flush=True)
        missed += [] if ok else [b[0]]
    print(f"breakages: {len(chosen) - len(missed)} of {len(chosen)} caught in {time.perf_counter() - t0:.0f} s")
    if missed:
        sys.exit(f"no test caught: {', '.join(missed)}")


if __name__ == "__main__":
    main()
