# One command sets up and runs the advisor; one runs the tests.
#   make run    -> creates .venv, installs advisor's lean base (no torch, no transformers: recommend, compare,
#                  estimate, profile, probe and the wizard never import them), prints a recommendation for gpt2 here
#   make test   -> adds the development extras (torch, transformers, pytest, hypothesis, accelerate, deepspeed, peft,
#                  the wizard's snapshot plugin), then runs the whole test suite (offline, no GPU needed)
#   make test-fast -> the quick lane: the suite less the tests marked slow (simulations, CPU trials), subprocess
#                  (a Python process of its own) and cuda; under a minute on 2 cores
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: setup setup-dev run lint test test-fast clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -e .
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	# the CPU build of torch 2.13.0 is on disk here; an unpinned torch would pull CUDA packages.
	# A machine that already has torch (e.g. a CUDA build) keeps it: pyproject only asks for torch>=2.1.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	touch $(DEV_STAMP)

setup: $(STAMP)

setup-dev: $(DEV_STAMP)

run: setup
	$(VENV)/bin/advisor recommend --model gpt2

lint: setup-dev
	$(VENV)/bin/ruff check advisor probes rules tui benchmarks tests
	$(VENV)/bin/ruff format --check --quiet advisor probes rules tui benchmarks tests
	$(VENV)/bin/lint-imports

test: setup-dev lint
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n auto

test-fast: setup-dev
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n auto -m "not slow and not subprocess and not cuda"

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
