# The two commands of the README:
#   make demo   set everything up on a fresh machine and run the demo
#   make test   run the whole test suite against the real local stack
VENV ?= .venv
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

clean: down
	rm -rf .lambda/state
