#!/usr/bin/env python3
"""Import every exported module in a fresh interpreter (catches imports hidden in non-exported cells)."""

import importlib
import pkgutil
import sys

import vtreetrm

optional = {"verl"}  # modules may need an optional extra; anything else missing is a failure
failed, n = [], 0
for m in pkgutil.walk_packages(vtreetrm.__path__, "vtreetrm."):
    n += 1
    try:
        importlib.import_module(m.name)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] in optional:
            print(f"skipped {m.name}: optional {e.name} not installed")
        else:
            failed.append(f"{m.name}: {e!r}")
    except Exception as e:
        failed.append(f"{m.name}: {e!r}")
if failed:
    sys.exit("import failed:\n  " + "\n  ".join(failed))
print(f"imported {n} modules")
