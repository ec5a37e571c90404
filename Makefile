# Kuberhealthy (Python). `make demo` and `make test` do all set-up on a fresh machine.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: help venv testbed demo test test-unit test-integration test-slow lint bench helm-lint image clean

help:
	@echo "make demo    - local API server + sample checks + simulated kubelet + the daemon"
	@echo "make test    - unit + integration + web tests against a real API server"
	@echo "make lint    - ruff + mypy"
	@echo "make bench   - performance figures (run overhead, API calls per run, HTTP throughput)"

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

venv: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'

testbed:
	bash hack/testbed/setup.sh
	bash hack/tools.sh

demo: venv testbed
	$(BIN)/python -m tests.harness.demo

test: venv testbed
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) tests -m "not slow"

test-unit: venv
	$(BIN)/python -m pytest -q tests/unit

test-slow: venv testbed
	$(BIN)/python -m pytest -q tests -m slow

lint: venv
	$(BIN)/ruff check kuberhealthy tests bench examples
	$(BIN)/mypy

bench: venv testbed
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build dist *.egg-info
