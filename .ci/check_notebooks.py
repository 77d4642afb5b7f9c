#!/usr/bin/env python3
"""Fail when vtreetrm/ differs from what the notebooks export, or when a notebook is not clean.

Works on a copy, so it checks the notebooks against the library whatever git's state is."""

import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

root = Path(__file__).resolve().parents[1]
bin_dir = Path(sys.executable).parent


def files(d, pattern):
    return {
        p.relative_to(d)
        for p in d.rglob(pattern)
        if "__pycache__" not in p.parts and not any(s.startswith(".") for s in p.relative_to(d).parts)
    }


def main():
    bad = []
    with tempfile.TemporaryDirectory() as t:
        t = Path(t)
        shutil.copy(root / "settings.ini", t / "settings.ini")
        shutil.copytree(root / "nbs", t / "nbs", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        (t / "vtreetrm").mkdir()
        shutil.copy(root / "vtreetrm" / "__init__.py", t / "vtreetrm" / "__init__.py")
        for cmd in (["nbdev_export"], ["nbdev_clean"]):  # what `make export` does
            r = subprocess.run([str(bin_dir / cmd[0]), *cmd[1:]], cwd=t, capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
        want, have = files(t / "vtreetrm", "*.py"), files(root / "vtreetrm", "*.py")
        for f in sorted(want ^ have):
            bad.append(f"vtreetrm/{f}: {'missing from' if f in want else 'not exported by'} the notebooks' export")
        for f in sorted(want & have):
            if not filecmp.cmp(t / "vtreetrm" / f, root / "vtreetrm" / f, shallow=False):
                bad.append(f"vtreetrm/{f}: differs from the notebooks (run make export)")
        for f in sorted(files(t / "nbs", "*.ipynb")):
            if not filecmp.cmp(t / "nbs" / f, root / "nbs" / f, shallow=False):
                bad.append(f"nbs/{f}: not clean (run nbdev_clean)")
    if bad:
        sys.exit("notebook checks failed:\n  " + "\n  ".join(bad))
    print(f"notebook checks passed: {len(want)} modules in sync, notebooks clean")


if __name__ == "__main__":
    main()
