# infergate — the two commands a newcomer needs are `make demo` and `make test`.
# Heavy pieces (Go-built control plane, engine venvs, fixture model) are cached
# by version under $(INFERGATE_CACHE), so a warm machine is fast.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
INFERGATE_CACHE ?= $(HOME)/.cache/infergate
export INFERGATE_CACHE
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
export PIP_DISABLE_PIP_VERSION_CHECK := 1

# The operator image's lock pins the operator's dependencies in the dev venv too, so
# the tests run what the image ships and a fresh clone gets the versions last tested.
OPERATOR_LOCK := runtime_images/operator/requirements.txt
# The development machinery (local cluster, chart generator) is a package of its own,
# dev/ (`infergate_dev`), installed beside the product here and in no image.
DEV_PYPROJECT := dev/pyproject.toml
# Hashing the dependency declarations re-installs only when they change.
VENV_STAMP := $(VENV)/.installed-$(shell cat pyproject.toml $(DEV_PYPROJECT) $(OPERATOR_LOCK) | sha256sum | cut -c1-12)

.PHONY: help setup venv control-plane test test-slow test-unit test-cluster lint fmt crds crds-check \
        cluster-up cluster-down demo bench bench-parity bench-mirror clean

help:
	@echo "make demo    bring up the local cluster and show infergate at work"
	@echo "make test    lint, unit, cluster integration and end-to-end tests"
	@echo "other: test-slow test-matrix lint-manifests test-gateway setup lint crds crds-check cluster-up cluster-down bench bench-mirror clean"

$(VENV_STAMP): pyproject.toml $(DEV_PYPROJECT) $(OPERATOR_LOCK)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]' -e ./dev -c $(OPERATOR_LOCK)
	@rm -f $(VENV)/.installed-*; touch $@

venv: $(VENV_STAMP)

control-plane:
	hack/build-control-plane.sh all

setup: venv control-plane

# Every Python file in the repo; mypy strict on both packages and the scripts beside them.
PY_DIRS := operator dev tests demo bench experiments hack
SCRIPTS := demo bench experiments

lint: venv
	$(BIN)/ruff check $(PY_DIRS)
	$(BIN)/ruff format --check $(PY_DIRS)
	$(BIN)/mypy
	$(BIN)/mypy $(SCRIPTS)
	$(BIN)/lint-imports
	$(PY) hack/room-sizes.py operator

fmt: venv
	$(BIN)/ruff format $(PY_DIRS)
	$(BIN)/ruff check --fix $(PY_DIRS)

crds: venv
	$(BIN)/infergate crds --out crds --reference docs/api-reference.md --profiles docs/parity-profiles.md

crds-check: venv
	$(BIN)/infergate crds --check crds --reference docs/api-reference.md --profiles docs/parity-profiles.md

test-unit: venv
	$(BIN)/pytest tests/unit

test-cluster: setup lws-controller
	$(BIN)/pytest tests/cluster tests/integration

# One pytest run: unit tests, then the cluster-backed ones (the session fixture
# starts the local cluster if it is not up, and stops it again if it started it).
# The slow suites (fault injection; traffic and load end to end, each tens of minutes on
# a 2-core machine) are deselected here, visibly ("N deselected"), and run by
# `make test-slow`.
# The LeaderWorkerSet controller (cached by version) runs the group tests' rollouts
# (tests/integration/test_controller_groups.py and the other group suites).
test: setup engines lws-controller lint crds-check
	INFERGATE_REQUIRE_ENGINES=1 INFERGATE_REQUIRE_E2E=1 INFERGATE_REQUIRE_S3=1 $(BIN)/pytest tests -m "not slow"
	@echo "not run here: the slow suites (marker slow) - make test-slow"
	@echo "run on one Kubernetes version; the install and canary flows on $(K8S_MATRIX_VERSIONS) - make test-matrix"

test-slow: setup engines
	INFERGATE_REQUIRE_ENGINES=1 INFERGATE_REQUIRE_E2E=1 INFERGATE_REQUIRE_S3=1 $(BIN)/pytest tests -m slow

cluster-up: setup
	$(BIN)/infergate-dev localcluster up

cluster-down: venv
	$(BIN)/infergate-dev localcluster down

# The main job: the local cluster with real engines, a canary flow end to end.
demo: setup engines cluster-up
	$(BIN)/infergate-dev localcluster show
	$(MAKE) --no-print-directory demo-flow

bench: bench-parity bench-rollout

bench-parity: venv
	$(PY) bench/parity_bench.py

# The mirror's cost on the client (bench/mirror_bench.py; figures in experiments/TRAFFIC.md):
# two local vLLM engines, the mirror in process, about 15 minutes, under the machine's lock
# for engine work. Not part of `make test` nor of `make bench` (it needs the engines).
#   make bench-mirror MIRROR_BENCH_REQUESTS=200     requests per route per window
MIRROR_BENCH_REQUESTS ?= 200
HEAVY_LOCK ?= /tmp/heavy.lock

bench-mirror: venv engines
	flock $(HEAVY_LOCK) $(PY) bench/mirror_bench.py --requests $(MIRROR_BENCH_REQUESTS)

clean: cluster-down
	rm -rf $(VENV) .cluster

# Area fragments: engines, parity benchmarks, ... (each owns its targets).
include $(wildcard mk/*.mk)
