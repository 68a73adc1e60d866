# Quartermaster developer entry points. `make demo` and `make test` are the two commands the
# README starts with (after `sh e2e/install-deps.sh`); .ci/run calls `make test`; `make cluster`
# keeps a local cluster running to try things on.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed

.PHONY: help setup controlplane demo cluster test lint typecheck unit crds crds-refresh reference docs golden bench bench-scale bench-sim bench-calibration bench-sweep bench-levers soak clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-17s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@# setuptools notes every editable install ("Editable installation. Please be careful with
	@# folders ..."): information only, a dozen lines before anything of ours.
	PYTHONWARNINGS='ignore:Editable installation' $(BIN)/pip install --quiet -e '.[dev,sim,docs,ray]'
	@# The test harness (testenv/), tests, e2e and bench are importable in development only:
	@# the checkout goes on the venv's path; the wheel holds just the controller.
	$(PY) -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()["purelib"], "quartermaster-dev.pth").write_text("$(CURDIR)\n")'
	touch $(STAMP)

setup: $(STAMP) ## create .venv and install the package with its dev tools

controlplane: setup ## build (once: ~4 min, ~300 MB download) or reuse etcd, the test API server and kubectl
	$(PY) -m testenv.controlplane

.PHONY: prometheus
prometheus: setup ## fetch (once: ~20 MB download, ~95 MB kept) Debian's Prometheus and promtool into ~/.cache/quartermaster
	$(PY) -m testenv.prometheus

.PHONY: kustomize
kustomize: setup ## fetch (once: ~7 MB download, ~22 MB kept) Debian's kustomize into ~/.cache/quartermaster, to build manifests/
	$(PY) -m testenv.kustomize

demo: controlplane prometheus ## validate and render the example policy, then run the controller on a real API server
	$(BIN)/quartermaster validate
	$(BIN)/quartermaster render -o out/example-rendered.yaml
	@echo "--- objects in out/example-rendered.yaml:"
	@grep '^kind:' out/example-rendered.yaml | sort | uniq -c
	@echo "--- the controller against a real API server and Prometheus"
	$(PY) -m e2e.demo

cluster: controlplane prometheus ## a local cluster (API server, CRDs, Prometheus, the controller) until Ctrl-C
	$(PY) -m e2e.cluster

.PHONY: e2e e2e-kind
e2e: controlplane prometheus ## the e2e scenario here: risk rises, the mix and NodePool limits move, and fall back
	$(PY) -m e2e.scenario --local --json out/e2e/timeline.json

e2e-kind: setup kustomize ## the same scenario on a kind cluster with Kueue 0.19.2, KEDA, Prometheus (needs Docker)
	PY=$(PY) e2e/kind.sh

lint: setup ## ruff lint and format check, and the import layering (import-linter)
	$(BIN)/ruff check controller testenv tests bench e2e
	$(BIN)/ruff format --check controller testenv tests bench e2e
	$(BIN)/lint-imports --no-cache

typecheck: setup ## mypy --strict
	$(BIN)/mypy

unit: controlplane prometheus kustomize ## the test suite only (unit and integration)
	$(BIN)/pytest -q

.PHONY: unit-future
unit-future: setup prometheus kustomize ## the unit tests with the clock a year ahead (libfaketime): none may depend on the date
	$(PY) -m testenv.faketime --days 365 -- $(BIN)/pytest -q -p no:cacheprovider tests/unit

test: lint typecheck unit unit-future docs ## everything CI runs: lint, type checks, all tests, the unit tests a year ahead, the docs

crds: setup ## regenerate manifests/crds/ from controller/api/types.py
	$(PY) -m controller.api.crds manifests/crds

reference: setup ## regenerate docs/reference/policy-api.md from controller/api/types.py
	$(PY) -m controller.api.reference docs/reference/policy-api.md

# --strict: a broken link, a missing anchor or a page left out of the nav fails the build.
docs: setup ## build the docs site into site/ (MkDocs + Material), after checking the API reference is current
	$(PY) -m controller.api.reference --check docs/reference/policy-api.md
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# make crds-refresh PROJECT=kueue RELEASE=v0.19.3: that project's files at that tag; without
# PROJECT, all four again at their pinned releases. See third_party/crds/README.md.
crds-refresh: setup ## download the pinned upstream CRDs (third_party/crds) again, from GitHub, at PROJECT's RELEASE
	$(PY) -m testenv.thirdparty $(PROJECT) $(RELEASE)

golden: setup ## regenerate the golden render of the example policy
	$(BIN)/quartermaster render -o tests/golden/example-render.yaml

bench: setup ## policy, risk, runtime learning and decision speed at 1,000 projects; reconcile at 500 on a real API server
	$(PY) bench/bench_policy.py
	$(PY) bench/bench_risk.py
	$(PY) bench/bench_learning.py
	$(PY) bench/bench_decide.py
	$(PY) bench/bench_pass.py
	$(PY) bench/bench_reconcile.py

SCALE_SECONDS ?= 60
bench-scale: controlplane ## 1,000 projects, 10,000 Workloads, 10 changes/s for SCALE_SECONDS (60; 600 for the goal)
	$(PY) bench/bench_scale.py --seconds $(SCALE_SECONDS)

bench-sim: setup ## trace replays: Philly busiest 14 days, all Philly, all Alibaba (long)
	$(PY) bench/bench_sim.py

bench-calibration: setup ## the deadline risk's calibration, raw and recalibrated, on the bench-sim replays under both deadline rules (policy only)
	$(PY) bench/bench_calibration.py $(CASES)

# QUICK=1: the same grid's shape on small slices of the traces (a minute or two, not hours).
bench-sweep: setup ## the bench-sim grid as a sweep, local vs local Ray: wall time, peak memory, Ray's overhead per cell (long; QUICK=1 quick)
	$(PY) bench/bench_sweep.py $(if $(QUICK),--quick)

.PHONY: bench-draws
bench-draws: setup ## the policy against policy-fifo in three draws per run (decision interval 899/900/901 s), judged on the means (long; ARGS="alibaba --seeds 0")
	$(PY) bench/bench_draws.py $(ARGS)

.PHONY: bench-levers
bench-levers: setup ## the per-workload levers at equal cost: policy vs static frontier, reactive, ablations (busiest 14 days, Alibaba; seeds 0-2)
	$(PY) bench/bench_levers.py

SOAK_MINUTES ?= 60

soak: controlplane prometheus ## the controller as a process under Workload churn, a 750 s warm-up then SOAK_MINUTES measured: RSS, writes, latency
	$(PY) bench/soak.py --minutes $(SOAK_MINUTES)

clean: ## remove the venv and generated output
	rm -rf $(VENV) out site .mypy_cache .ruff_cache .pytest_cache
