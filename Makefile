# Two entry points for a fresh machine: `make demo` (the main job) and `make test`.
# Both create .venv on first use (requirements/install.sh, with uv): CPU torch 2.13.0, sglang $(ENGINE) without its
# CUDA-only dependencies, and this bundle (editable). Nothing downloads a CUDA torch (requirements/constraints-cpu.txt).
# Another supported release: `make test-engine ENGINE=0.5.10.post1` builds .venv-0.5.10.post1 and runs the engine
# tests on it (any target takes ENGINE=...; the default release keeps .venv).
PYTHON ?= python3
DEFAULT_ENGINE := 0.5.23
ENGINE ?= $(DEFAULT_ENGINE)
VENV ?= $(if $(filter $(DEFAULT_ENGINE),$(ENGINE)),.venv,.venv-$(ENGINE))
PY := $(VENV)/bin/python
# Sandboxes often set PYTHONDONTWRITEBYTECODE=1; then every engine start recompiles the modules the set-up did not
# precompile (requirements/precompile.py compiles those an engine run imports). This venv is ours to cache in.
unexport PYTHONDONTWRITEBYTECODE
STAMP := $(VENV)/.bundle-installed

.PHONY: setup demo test test-engine selftest check lint wheel-selftest

setup: $(STAMP)

$(STAMP): pyproject.toml requirements/install.sh requirements/engine-$(ENGINE)-cpu.txt requirements/engine-$(ENGINE)-nodeps.txt requirements/constraints-cpu.txt requirements/tools.txt $(wildcard requirements/engine-$(ENGINE)-bytecode.txt)
	@echo "setting up $(VENV) for sglang $(ENGINE) (about 2.4 GB; measured on 2 cores by benchmarks/fresh_clone_setup.py: 20-30 s, then the first demo about 22 s)" >&2
	@PYTHON=$(PYTHON) requirements/install.sh $(VENV) $(ENGINE)
	@touch $@

# The main job (stdout: one bench-report.v1 JSON document; progress on stderr): a real benchmark of the real sglang engine on a tiny local FLUX.1 model (CPU, no GPU, no hub).
DEMO_LABEL ?= demo-$(shell date +%Y%m%d-%H%M%S)
demo: setup
	@$(PY) scripts/bench_diffusion_denoise.py --model tiny-flux-cpu --label $(DEMO_LABEL) --report --json

# The whole suite: the tests that need no engine, then the real-engine tests, each lane on both cores. An engine run on
# the tiny model is mostly a single-threaded import of sglang (its worker forks from it on CPU), so two at a time nearly
# halve the lane; the runner flags cells that ran on a busy host instead of failing them. --dist loadfile keeps a test
# file on one worker, so a module fixture that runs the engine (the evidence folder, the local sweep) runs once.
test: setup
	$(PY) -m pytest -q -n 2 -m "not engine" --durations=15
	$(PY) -m pytest -q -n 2 --dist loadfile -m engine --durations=15

# The tests that run the real engine, against the release ENGINE selects.
test-engine: setup
	$(PY) -m pytest -q -n 2 --dist loadfile -m engine

selftest: setup
	for s in scripts/*.py; do $(PY) $$s --self-test || exit 1; done

# The fast lane: every test that needs no engine and no torch import (torch, sglang and the model libraries look
# uninstalled there, in the tests and in every script they start: tests/check_lane/). Under a minute.
check: setup
	DIFFUSION_BENCH_CHECK_LANE=1 $(PY) -m pytest -q -p no:cacheprovider -n 2 -m "not engine and not torch"

# Style and dead code (config in pyproject.toml; vulture's known false positives in .ci/vulture_whitelist.py).
lint: setup
	$(PY) -m ruff check scripts tests benchmarks requirements .ci
	$(PY) -m vulture

# The wheel's own self-tests, installed into a clean venv without torch or sglang.
wheel-selftest: setup
	PYTHON=$(PY) .ci/wheel-selftest
