# Two entry points for a fresh machine: `make demo` (the main job) and `make test`.
# Both create .venv on first use: CPU torch 2.13.0, sglang 0.5.10.post1 without its CUDA-only
# dependencies, and this bundle (editable). Nothing downloads a CUDA torch (requirements/constraints-cpu.txt).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
STAMP := $(VENV)/.bundle-installed

.PHONY: setup demo test selftest check lint wheel-selftest

setup: $(STAMP)

$(STAMP): pyproject.toml requirements/engine-cpu.txt requirements/engine-nodeps.txt requirements/constraints-cpu.txt requirements/tools.txt
	@echo "setting up $(VENV) (first run: about 85 s and 2.6 GB)" >&2
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) >&2
	@$(PIP) install -c requirements/constraints-cpu.txt torch==2.13.0 >&2
	@$(PIP) install --no-deps -r requirements/engine-nodeps.txt >&2
	@$(PIP) install -c requirements/constraints-cpu.txt -r requirements/engine-cpu.txt -r requirements/tools.txt >&2
	@$(PIP) install --no-deps -e . >&2
	@touch $@

# The main job (stdout: one bench-report.v1 JSON document; progress on stderr): a real benchmark of the real sglang engine on a tiny local FLUX.1 model (CPU, no GPU, no hub).
DEMO_LABEL ?= demo-$(shell date +%Y%m%d-%H%M%S)
demo: setup
	@$(PY) scripts/bench_diffusion_denoise.py --model tiny-flux-cpu --label $(DEMO_LABEL) --report --json

test: setup
	$(PY) -m pytest -q

selftest: setup
	for s in scripts/*.py; do $(PY) $$s --self-test || exit 1; done

# The fast lane: every test that needs no engine and no torch import (torch, sglang and the model libraries look
# uninstalled there, in the tests and in every script they start: tests/check_lane/). Under a minute.
check: setup
	SGL_BENCH_CHECK_LANE=1 $(PY) -m pytest -q -p no:cacheprovider -n 2 -m "not engine and not torch"

# Style and dead code (config in pyproject.toml; vulture's known false positives in .ci/vulture_whitelist.py).
lint: setup
	$(PY) -m ruff check scripts tests benchmarks .ci
	$(PY) -m vulture

# The wheel's own self-tests, installed into a clean venv without torch or sglang.
wheel-selftest: setup
	PYTHON=$(PY) .ci/wheel-selftest
