# The two commands of the README:
#   make demo   set everything up on a fresh machine and run the demo
#   make test   run the whole test suite against the real local stack
VENV ?= .venv
# Ingest buckets of a minute (the production default is an hour): batch cutoffs and the
# speed/batch boundary move every minute, so the demo and the tests see them move.
export LAMBDA_INGEST_BUCKET_S ?= 60
# ... and a 2-minute de-duplication window in the speed layer (10 minutes by default), so the
# accuracy reports' "duplicates beyond the window" can be produced within a test run.
export LAMBDA_SPEED__DEDUPE_WINDOW_S ?= 120
# The demo and the tests run in development mode, explicitly: the development token and Airflow
# password are accepted (anywhere else the API and Airflow refuse to start with them).
export LAMBDA_ENVIRONMENT ?= development
LAMBDACTL = $(VENV)/bin/lambdactl
PYTEST_ARGS ?=

.PHONY: setup demo test up down status bench clean

setup:
	bash infra/setup.sh

demo: setup
	$(LAMBDACTL) demo

test: setup
	$(LAMBDACTL) up
	$(VENV)/bin/pytest $(PYTEST_ARGS)

up: setup
	$(LAMBDACTL) up

down:
	$(LAMBDACTL) down

status:
	$(LAMBDACTL) status

bench: setup
	$(LAMBDACTL) up
	$(VENV)/bin/python bench/run_all.py

clean: down
	rm -rf .lambda/state
