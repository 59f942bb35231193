# The two commands a newcomer needs:  make run   and   make test
PYTHON ?= python3
# DEBUG is off unless turned on; make run (demo mode) and make test turn it on, unless told otherwise.
DEBUG ?= 1
export DEBUG
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test install lint format bench bench-partition manage clean drill

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)

## Run the whole product: embedded Postgres + Redis (unless DATABASE_URL/REDIS_URL
## are set), web, worker, beat and the payment sandbox. Ctrl-C stops it all.
run: $(STAMP)
	$(PY) -m support.launcher

## Run the whole test suite (embedded servers unless DATABASE_URL/REDIS_URL are set), on one
## pytest-xdist worker per core and one more (at most 4: much of the suite waits on servers, workers
## and browsers), each with a database and a Redis database of its own (tests/parallel.py).
## TEST_WORKERS=0 runs it in one process; so does a RabbitMQ broker, which the workers would share.
## It ends with the 25 slowest tests: the suite is kept well under 20 minutes. Tests are handed out
## in the order tests/parallel.py gives (loadgroup would hand the largest groups out first, and a
## group of tests that commit could then run before the tests that need the migrations' rows).
TEST_WORKERS ?= $(if $(CELERY_BROKER_URL),0,$(shell echo $$(( $$(nproc) + 1 ))))
test: $(STAMP)
	$(PY) -m support.embedded -- $(PY) -m pytest -n $(TEST_WORKERS) --maxprocesses=4 --dist=loadgroup --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

## Any manage.py command against the embedded servers: make manage ARGS="createsuperuser"
manage: $(STAMP)
	$(PY) -m support.embedded -- $(PY) manage.py $(ARGS)

clean:
	rm -rf $(VENV) var

## Durable overhead of one agent turn beside DBOS and LangGraph (prints a table).
bench-overhead: $(STAMP)
	$(PY) -m pip install --quiet -r requirements-bench.txt
	$(PY) -m support.embedded -- $(PY) -m bench.overhead $(BENCH_ARGS)

## Every benchmark figure in one table (prints it and writes bench-results/bench.json).
bench: $(STAMP)
	$(PY) -m pip install --quiet -r requirements-bench.txt
	$(PY) -m support.embedded -- $(PY) -m bench $(BENCH_ARGS)

## Recovery after a network partition and first tokens over slow links, on test hosts in network
## namespaces (needs root and iproute2; prints p50/max).
bench-partition: $(STAMP)
	$(PY) -m bench.partition $(BENCH_ARGS)

## Crash drill: a fresh stack, customers over HTTP, workers SIGKILLed, the broker flushed, database
## connections dropped; then every invariant checked in SQL and at the payment provider (exit 1 if broken).
drill: $(STAMP)
	$(PY) -m support.embedded -- $(PY) -m drill $(DRILL_ARGS)
