import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from vtreetrm.runs.papermill import skip_iri_grammar

skip_iri_grammar()  # test modules import nbformat: without the grammar its jsonschema never uses (2 s per worker)
ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session", autouse=True)
def _session_tmpdir(tmp_path_factory):
    """Temporary files of this process and of the processes the tests start under the session's base folder, which
    pytest prunes: what a killed writer leaves (openpyxl's sheet files, verl's checkpoint locks) stays out of /tmp."""
    d = tmp_path_factory.mktemp("tmpdir")
    with pytest.MonkeyPatch.context() as mp:  # both put back after the session
        mp.setenv("TMPDIR", str(d))
        mp.setattr(tempfile, "tempdir", None)  # `tempfile` reads TMPDIR again
        yield d


def vtreetrm_argv(*args) -> list:
    "The argv of the `vtreetrm` console script (or the same entry point through this Python) with `args`."
    exe = Path(sys.executable).parent / "vtreetrm"
    return [
        str(exe) if exe.exists() else sys.executable,
        *([] if exe.exists() else ["-c", "from vtreetrm.cli import console_main; console_main()"]),
        *map(str, args),
    ]


def vtreetrm(*args, cwd=None, check=None, timeout=900):
    "Run the `vtreetrm` console script like a user; returns the CompletedProcess."
    r = subprocess.run(vtreetrm_argv(*args), cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout)
    if check is not None:
        assert r.returncode == check, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


@pytest.fixture
def cli():
    return vtreetrm


def one_line(err: str, rc: int, *needles) -> str:
    "Refused as a user mistake: exit 2, no traceback, exactly one `error:` line under 1 KiB holding every needle."
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert rc == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and len(lines[0].encode()) < 1024, err
    for n in needles:
        assert str(n) in lines[0], (n, err)
    return lines[0]


def refused_cli(r: subprocess.CompletedProcess, *needles) -> str:
    "`one_line` of a console-script run."
    return one_line(r.stderr, r.returncode, *needles)


# headless Chromium for the page tests: the flags that keep it off a closed network (no background, update or sync traffic)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"]  # fmt: skip


def chromium_cmd(profile, *extra) -> list:
    "A headless Chromium command line with its own profile folder and `extra` flags."
    return [CHROMIUM, "--headless", *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra]


def once(tmp_path_factory, worker_id: str, name: str, make) -> Path:
    """`make(folder)` once per test session, also across pytest-xdist workers (xdist's own recipe): the first worker
    to get here makes it in the session's shared temp folder under a lock, the others wait for it and reuse it."""
    if worker_id == "master":  # no xdist: the session's temp folder is this run's own
        d = tmp_path_factory.mktemp(name)
        make(d)
        return d
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp().parent  # shared by this run's workers only
    d, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.is_file():
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
            make(d)
            done.touch()
    return d


def _synthetic_eval(d: Path):
    r = vtreetrm("demo", "--synthetic-eval", "--runs-dir", d / "runs", "--out", d / "report.html", check=0)
    (d / "stdout.txt").write_text(r.stdout)


@pytest.fixture(scope="session")
def synthetic_eval(tmp_path_factory, worker_id):
    "`vtreetrm demo --synthetic-eval` once per test session: its folder (runs/, report.html) and its stdout."
    d = once(tmp_path_factory, worker_id, "synthetic-eval", _synthetic_eval)
    return d, (d / "stdout.txt").read_text()


def harness_infer(store, workspace, *flags, sets=("embed.backend=hashing",)) -> int:
    "`vtreetrm harness infer` in this process, quiet, with the hashing embedder unless `sets` says otherwise: its exit code."
    from vtreetrm.cli import main

    argv = ["harness", "infer", "--store-dir", store, "--workspace-dir", workspace, *flags, "--quiet", "--set", *sets]
    return main([str(a) for a in argv])


# ---------------------------------------------------------------- the longest modules first

# The modules holding each tier's longest tests (measured with `--durations`), run first: pytest-xdist deals tests out
# in collection order, and a minute-long test dealt last leaves the other core idle at the end. Whole modules move, so
# their module-scoped fixtures are still set up once per worker. The slow tier's: the first four.
FIRST = ["test_video_pipeline.py", "test_verl_trainer.py", "test_video_experiment.py", "test_models.py",
         "test_sweep_cluster.py", "test_runs_resume.py", "test_hostile_report.py",
         "test_hostile_artifacts_video.py", "test_harness_trees.py", "test_gpu_check.py", "test_release_experiment.py",
         "test_video_real_shapes.py", "test_video_real_footage_more.py", "test_harness_experiment.py"]  # fmt: skip


def pytest_collection_modifyitems(config, items):
    rank = {m: i for i, m in enumerate(FIRST)}
    items.sort(key=lambda it: rank.get(it.path.name, len(FIRST)))  # stable: the rest keep their order


# ---------------------------------------------------------------- no silent skips where every part is installed

NO_SKIP = os.environ.get("VTREETRM_NO_SKIP") == "1"  # set by .ci/run, which installs every part
NO_CUDA = "needs a CUDA device"  # the one skip allowed under VTREETRM_NO_SKIP=1: no machine here has one
_skipped: list = []
_no_cuda: list = []
_shown: list = []  # (test, its printed lines) of the tests marked shows_output


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_runtest_setup(item):
    "A test marked `cuda` is skipped without a CUDA device, and counted on its own line."
    if item.get_closest_marker("cuda") and not _cuda():
        pytest.skip(NO_CUDA)


def pytest_runtest_logreport(report):
    "Remember each skipped test and its reason (under xdist this runs in the controller for every worker's tests)."
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        cuda = reason.removeprefix("Skipped: ") == NO_CUDA and "cuda" in report.keywords
        (_no_cuda if cuda else _skipped).append(f"{report.nodeid}: {reason}")
    if report.when == "call" and "shows_output" in report.keywords and report.capstdout:
        _shown.append((report.nodeid, report.capstdout))


def pytest_sessionfinish(session, exitstatus):
    """With VTREETRM_NO_SKIP=1, a skipped test fails the run: there every skip means a missing part, not an option;
    only the tests marked `cuda` may skip (no CUDA device), and their count is printed on a line of its own."""
    if hasattr(session.config, "workerinput"):
        return
    for nodeid, out in _shown:
        print(f"\n{nodeid} printed:\n{out.rstrip()}")
    if _no_cuda:
        print(f"\nskipped, no CUDA device here: {len(_no_cuda)} tests marked cuda", *_no_cuda, sep="\n  ")
    if NO_SKIP and _skipped:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\n{len(_skipped)} tests skipped where none may be (VTREETRM_NO_SKIP=1):", *_skipped, sep="\n  ")
