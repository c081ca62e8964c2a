# OrbitMQ developer tasks. `make run` and `make test` each install first, so either works alone
# on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install system-deps run test lint bench clean

install: system-deps $(STAMP)

# What the system lacks, through apt when we are root (Java 17 for PySpark, later PostgreSQL).
system-deps:
	@bash scripts/system-deps.sh

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[test,lint,spark]"
	@bash scripts/compat-venv.sh
	@touch $(STAMP)

run: install
	$(VENV)/bin/orbitmq standalone --store ./data/broker-a

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy src/orbitmq/protocol src/orbitmq/store
	$(VENV)/bin/lint-imports

BENCH_ARGS ?=

bench: install
	$(PY) bench/store_bench.py $(BENCH_ARGS)
	$(PY) bench/e2e_bench.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .venv-compat .pytest_cache .mypy_cache .ruff_cache
