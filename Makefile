# Quartermaster developer entry points. `make demo` and `make test` are the two commands the
# README starts with; .ci/run calls `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed

.PHONY: help setup demo test lint typecheck unit crds golden bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP) ## create .venv and install the package with its dev tools

demo: setup ## validate the bundled example policy and render its objects to out/
	$(BIN)/quartermaster validate
	$(BIN)/quartermaster render -o out/example-rendered.yaml
	@echo "--- objects in out/example-rendered.yaml:"
	@grep '^kind:' out/example-rendered.yaml | sort | uniq -c

lint: setup ## ruff lint and format check
	$(BIN)/ruff check controller tests bench
	$(BIN)/ruff format --check controller tests bench

typecheck: setup ## mypy --strict
	$(BIN)/mypy

unit: setup ## the test suite only
	$(BIN)/pytest -q

test: lint typecheck unit ## everything CI runs: lint, type checks, all tests

crds: setup ## regenerate manifests/crds/ from controller/api/types.py
	$(PY) -m controller.api.crds manifests/crds

golden: setup ## regenerate the golden render of the example policy
	$(BIN)/quartermaster render -o tests/golden/example-render.yaml

bench: setup ## validation + rendering speed and memory at 1,000 projects x 4 pools
	$(PY) bench/bench_policy.py

clean: ## remove the venv and generated output
	rm -rf $(VENV) out .mypy_cache .ruff_cache .pytest_cache
