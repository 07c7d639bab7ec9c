# The two commands of the README:
#   make demo   set everything up on a fresh machine and run the demo
#   make test   run the whole test suite against the real local stack
VENV ?= .venv
# Ingest buckets of 10 seconds (the production default is an hour): batch cutoffs and the
# speed/batch boundary move six times a minute, so the demo and the tests see them move, and a
# test that sends traffic then runs a batch past it waits for the next boundary (half a bucket on
# average) and the archiver's flush past it (up to 15 s): the smaller the bucket, the shorter the
# tests that wait for a cutoff or for a replay's split.
export LAMBDA_INGEST_BUCKET_S ?= 10
# ... and a 2-minute de-duplication window in the speed layer (10 minutes by default), so the
# accuracy reports' "duplicates beyond the window" can be produced within a test run.
export LAMBDA_SPEED__DEDUPE_WINDOW_S ?= 120
# ... and API workers that read the speed layer's marker and the replay marks every 10 seconds (a
# minute by default): a replay deletes the rows its switch replaced that much sooner (the API takes
# it from the settings `make up` persists; lambdactl waits for the longer of those and its own).
export LAMBDA_API__SPEED_RECHECK_S ?= 10
# ... and the realtime clean-up after a swap waiting 10 s (20 s by default): every test's batch run
# and DAG run cleans up that much sooner. An answer that takes longer than that after its pointer
# read is computed again (serving_layer.service); test_pointer_cache_swap.py proves the settle with
# queries running.
export LAMBDA_BATCH__CLEANUP_SETTLE_S ?= 10
# The demo and the tests run in development mode, explicitly: the development token and Airflow
# password are accepted (anywhere else the API and Airflow refuse to start with them).
export LAMBDA_ENVIRONMENT ?= development
# The batch DAG created paused (a new install's runs every batch.interval_s): the tests unpause
# it when they run it, and no scheduled run lands in the middle of another test.
export LAMBDA_AIRFLOW__PAUSED_AT_CREATION ?= true
# Spark jobs in local mode (0 workers) unless a target asks for the local standalone cluster.
export LAMBDA_SPARK__CLUSTER__WORKERS ?= 0
CLUSTER_WORKERS ?= 1
# The unit tests run in this many processes (pytest-xdist): most of their time is spent waiting on
# local Spark and subprocesses, so two take 220 s where one took 320 s on a 2-core machine (four: 255 s).
# The integration tests share one stack and run in one process.
UNIT_WORKERS ?= 2
# The Spark mode the persisted settings hold, and persisting the settings in force (test-cluster
# sets the mode back afterwards, so `make unit` and the next `up` run as before).
SETTINGS_WORKERS = from definitions.settings import get_settings; print(get_settings().spark.cluster.workers)
SETTINGS_PERSIST = from definitions.settings import get_settings; from definitions.settings_store import persist; persist(get_settings())
CLUSTER_TESTS = tests/integration/api/test_end_to_end.py tests/integration/infra/test_spark_cluster.py
LAMBDACTL = $(VENV)/bin/lambdactl
PYTEST_ARGS ?=
# Options for uv pip compile in `make lock`, e.g. LOCK_ARGS='--upgrade-package certifi'
LOCK_ARGS ?=

.PHONY: help setup demo test test-cluster unit lint types format lock up down status bench clean

help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 10

setup:  ## virtualenvs, service jars, system packages (idempotent)
	bash infra/setup.sh

demo: setup  ## set everything up and run the demo
	$(LAMBDACTL) demo

test: setup  ## every test: unit, then integration against the real local stack (started if needed), then test-cluster
	$(VENV)/bin/pytest -n $(UNIT_WORKERS) tests/unit $(PYTEST_ARGS)
	$(LAMBDACTL) up
	$(VENV)/bin/pytest tests/integration $(PYTEST_ARGS)
	$(MAKE) test-cluster

test-cluster: setup  ## the end-to-end exactness test with every Spark job on a local Spark standalone cluster (restarts the stack in that mode; leaves it down, set back to the mode it had)
	$(LAMBDACTL) down
	@workers=$$($(VENV)/bin/python -c "$(SETTINGS_WORKERS)"); \
	LAMBDA_SPARK__CLUSTER__WORKERS=$(CLUSTER_WORKERS) $(LAMBDACTL) up \
	&& LAMBDA_SPARK__CLUSTER__WORKERS=$(CLUSTER_WORKERS) $(VENV)/bin/pytest $(CLUSTER_TESTS) $(PYTEST_ARGS); \
	status=$$?; $(LAMBDACTL) down; \
	LAMBDA_SPARK__CLUSTER__WORKERS=$$workers $(VENV)/bin/python -c "$(SETTINGS_PERSIST)" \
	&& echo "spark.cluster.workers persisted back to $$workers"; exit $$status

unit: setup  ## the tests that need no service (tests/unit), in about four minutes
	$(VENV)/bin/pytest -n $(UNIT_WORKERS) tests/unit $(PYTEST_ARGS)

lint: setup  ## ruff lint and format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

types: setup  ## mypy over the platform's packages
	$(VENV)/bin/mypy

format: setup  ## rewrite the code in the house format (ruff)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

lock:  ## rewrite the lock files with hashes (uv, in a throwaway venv); pins stay unless LOCK_ARGS moves them
	bash infra/lock/compile.sh $(LOCK_ARGS)

up: setup  ## start the local stack
	$(LAMBDACTL) up

down:  ## stop the local stack
	$(LAMBDACTL) down

status:  ## every service, restarts, and each view's batch version and staleness
	$(LAMBDACTL) status

bench: setup  ## the benchmarks in bench/ against the running stack
	$(LAMBDACTL) up
	$(VENV)/bin/python bench/run_all.py

clean: down  ## stop the stack and delete its state
	rm -rf .lambda/state
