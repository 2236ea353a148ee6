# Every target that needs Python creates the venv and installs first, so each works
# on a fresh machine: `make run` serves, `make test` runs the whole suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help setup jars run test test-pyiceberg test-fast lint format bench clean cluster-up cluster-down cluster-logs

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  %-13s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@bash scripts/bootstrap.sh "$(PYTHON)" "$(VENV)"
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

setup: $(STAMP) ## create .venv and install the package with its test tools

jars: setup ## fetch the Java programs of the tests and benchmarks (harness/maven/: Apache Kafka) into .jars/
	$(PY) -m harness.jars

run: setup ## serve the embedded node on 127.0.0.1:8181, data in ./data (ARGS="--port 9000 ...")
	$(VENV)/bin/metastore serve $(ARGS)

# pytest-xdist processes for `make test`; each module (and all Spark tests) stays on one,
# the longest groups first (tests/conftest.py orders them; no reorder by test count)
TEST_WORKERS ?= 2

test: jars ## run the whole test suite, slow tests included, then PyIceberg's own integration tests (not with ARGS)
	status=0; $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25 $(ARGS) || status=$$?; \
	if [ -z "$(ARGS)" ]; then $(PY) -m harness.pyiceberg_it || status=1; fi; exit $$status

test-pyiceberg: setup ## PyIceberg's own integration tests against a node, file and S3 warehouses (ARGS="--warehouse s3 -- -x")
	$(PY) -m harness.pyiceberg_it $(ARGS)

test-fast: setup ## run the suite without the slow tests
	$(PY) -m pytest -m "not slow" $(ARGS)

lint: setup ## ruff (lint + format check) and mypy --strict (metastore, workers, harness, bench)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: setup ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: jars ## benchmarks: the embedded node over HTTP, the cluster vs its broker, PyIceberg vs SqlCatalog, auth on vs off, rebuild on Spark vs replay, gc mark on Spark vs one process; then one summary table of every ratio (.bench/summary.json) (ARGS="--quick")
	@rm -rf .bench/rows
	@status=0; for b in embedded cluster iceberg authz pipeline gc; do \
		$(PY) -m bench.$$b $(ARGS) || status=1; \
	done; $(PY) -m bench.summary; exit $$status

clean: ## remove the venv, caches, fetched jars and ./data
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .bench .jars data

cluster-up: ## build and start Kafka (KRaft) + 3 nodes on :8181-8183, wait until healthy (needs compose v2)
	docker compose up -d --build --wait

cluster-down: ## stop the compose cluster and delete its volumes (Kafka topics, node views)
	docker compose down -v

cluster-logs: ## follow the compose cluster's logs (ARGS="metastore-2" for one service)
	docker compose logs -f $(ARGS)
