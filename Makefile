# hamiadmin: `make run` and `make test` work on a fresh machine with Python 3.11 and make.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test chaos lint bench venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python manage.py demo --host $(HOST) --port $(PORT)

# The chaos suite (tests/chaos, marker `chaos`) is its own target: `make chaos`.
# TEST_WORKERS processes (pytest-xdist; each its own test database and Redis database,
# tests/xdist_env.py); TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -m "not chaos" -n $(TEST_WORKERS) $(PYTEST_ARGS)

# Faults, fuzzing, security table and concurrency figures (docs/reliability.md).
# CHAOS_SCALE=ci (default, what CI runs: about 2 minutes on 2 quiet cores) or full; loopback only;
# figures also in var/chaos-figures.jsonl.
CHAOS_SCALE ?= ci
chaos: $(STAMP)
	rm -f var/chaos-figures.jsonl
	CHAOS_SCALE=$(CHAOS_SCALE) CHAOS_FIGURES_FILE=var/chaos-figures.jsonl \
	  $(BIN)/python -m pytest tests/chaos -m chaos -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy scheduling/engine scheduling/pipeline scheduling/services kube scheduling/api cli
	$(BIN)/python manage.py check
	$(BIN)/python manage.py makemigrations --check --dry-run

bench: $(STAMP)
	$(BIN)/python -m bench.engine
	$(BIN)/python -m bench.pipeline
	$(BIN)/python -m bench.burst
	$(BIN)/python -m bench.wake
	$(BIN)/python -m bench.batch
	$(BIN)/python -m bench.preempt

clean:
	rm -rf $(VENV) var .pytest_cache .hypothesis
