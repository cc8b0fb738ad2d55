# InferenceBackend — top-level entry points. `make demo` and `make test` are the two commands a fresh machine needs.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Heavy things (control-plane binaries, llama-server, engine environments) live here, keyed by version.
export IB_CACHE ?= $(HOME)/.cache/inference-backend

# Each mk/*.mk adds its own targets and appends to TEST_TARGETS / DEMO_TARGETS.
TEST_TARGETS := lint unit
-include mk/*.mk

.PHONY: help venv lint unit test demo demo-down demo-select crds clean
help:
	@echo "make demo       - local cluster with fake GPU nodes, the operator, one InferenceBackend per engine"
	@echo "make demo-down  - stop the demo's operator and cluster"
	@echo "make test       - lint, unit, engine contracts, runners, e2e (what .ci/run calls)"
	@echo "make lint | unit | contracts | runners-test | e2e | crds | golden | bench-operator"

# The product (editable, with the test extras) and testkit/ (ib_testkit: the helpers tests, bench/ and hack/ share;
# a distribution of its own, so not in the product's wheel). bench/ is a package of the repository: its scripts run
# from the repository root as `python -m bench.NAME`.
venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml testkit/pyproject.toml
	@echo ">> creating $(VENV) (python deps for the operator, CLI and tests)"
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev,operator,fetch]' -e ./testkit
	touch $@

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

unit: venv
	$(PY) -m pytest -q tests --ignore=tests/contracts --ignore=tests/runners

crds: venv
	$(PY) -m inference_backend.crdgen --write crds/
	$(PY) -m inference_backend.crdgen --write charts/inference-backend/crds/

demo: venv
	PY=$(PY) hack/demo

demo-down:
	hack/demo down

test: $(TEST_TARGETS)
	@echo ">> make test: all of $(TEST_TARGETS) passed"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# The selection alone, offline, on every example against the mixed node list.
demo-select: venv
	@for f in docs/examples/*.yaml; do \
	  [ "$$f" = docs/examples/models.yaml ] && continue; \
	  echo "=== $$f against docs/examples/nodes/mixed.yaml"; \
	  $(VENV)/bin/inference-backend select -f $$f --nodes docs/examples/nodes/mixed.yaml \
	    --models docs/examples/models.yaml || [ $$? -eq 3 ]; \
	done
