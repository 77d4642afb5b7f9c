#!/usr/bin/env bash
# The wheel as a user gets it: built from the checkout's files, installed (not editable) into a fresh venv whose
# dependencies pip resolves from the package index (only torch is installed first, the build TORCH_SPEC names, as the
# README says), then used from a folder with no checkout: `vtreetrm demo --synthetic-eval` scores a tiny synthetic
# evaluation set and `vtreetrm report build` renders its report from the notebook inside the package.
#
#   .ci/check_wheel.sh [PYTHON]          (make check-wheel; PYTHON defaults to python3)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vtreetrm-wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# the files git would commit (tracked, and untracked but not ignored): nothing stale from an earlier build
mkdir "$tmp/src" "$tmp/dist" "$tmp/away"
git ls-files -z --cached --others --exclude-standard | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$tmp/src"
"$PY" -m venv "$tmp/venv"
V="$tmp/venv/bin"
log="$tmp/log"
trap 'rc=$?; [ $rc = 0 ] || { echo "check_wheel failed (exit $rc); its log:"; tail -n 60 "$log"; }; rm -rf "$tmp"' EXIT
# a pip command that reads the index is tried up to three times (pip does not retry a stalled download itself)
pip() {
  local i
  for i in 1 2 3; do
    "$V/python" -m pip -q --disable-pip-version-check "$@" >>"$log" 2>&1 && return 0
    [ "$i" = 3 ] || { echo "pip $1 failed, retrying ($i of 2)"; sleep 15; }
  done
  return 1
}
pip install -U pip wheel
pip wheel --no-deps -w "$tmp/dist" "$tmp/src"
whl=$(ls "$tmp"/dist/vtreetrm-*.whl)
pip install --no-compile $TORCH_SPEC      # --no-compile: no .pyc for every installed module (minutes of CPU, unused here)
pip install --no-compile "$whl"
pip check

cd "$tmp/away"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
"$V/python" -c 'import vtreetrm, sys; sys.exit(0 if "site-packages" in vtreetrm.__file__ else f"vtreetrm imported from {vtreetrm.__file__}")'
nb=$("$V/python" -c 'from vtreetrm.runs.papermill import resolve_notebook as r; print(r("phase2_sft"))')
case "$nb" in "$tmp/venv/"*) ;; *) echo "the experiment notebook phase2_sft resolved to $nb, not inside the installed package"; exit 1;; esac
"$V/vtreetrm" demo --synthetic-eval --runs-dir runs --out demo.html >>"$log" 2>&1
"$V/vtreetrm" report build runs --out report.html >>"$log" 2>&1
grep -q 'Cross-dataset / zero-shot' report.html || { echo "report.html lacks its zero-shot section"; exit 1; }
n=$(find runs -name metrics.json | wc -l)
test "$n" -ge 2 || { echo "expected scored runs, found $n metrics.json"; exit 1; }
versions=$("$V/python" -c 'from importlib.metadata import version as v; print(", ".join(f"{p} {v(p)}" for p in ("torch", "transformers", "peft", "fastcore", "pandas", "pyarrow")))')
echo "wheel $(basename "$whl"): installed in a fresh venv with its dependencies from the index ($versions); report of $n scored runs built outside the checkout"
