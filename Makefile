# OrbitMQ developer tasks. `make run` installs what running needs (the servers, the CLI, the web
# console); `make test` and the other targets install everything else too (test, lint, Spark,
# PostgreSQL and chaos extras, the client venvs of the compatibility tests), so each works alone
# on a fresh machine.
# The interpreter of the project's venv: the system's /usr/bin/python3 when it is 3.11 or newer
# (Debian and Ubuntu build it with PGO and LTO: one producer published 1.3x faster on it than on
# a plain source build of 3.11, docs/performance.md), else the first python3 on the PATH.
# `make PYTHON=...` picks another (an existing .venv keeps the one it was made with).
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	2>/dev/null && echo /usr/bin/python3 || echo python3)
endif
VENV := .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# `make test` spreads the suite over this many pytest processes (pytest-xdist), a test file to a
# process (its module fixtures stay shared): most tests wait on servers and disks, not the CPU.
# TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
PYTEST_WORKERS := -n $(TEST_WORKERS) --dist loadfile

.PHONY: install install-run system-deps run dist test lint fuzz sanitize bench bench-scale bench-peers pipeline console-screenshots chaos clean

install: system-deps $(STAMP)

# The servers, the CLI and the console: the package and its own dependencies, nothing else.
install-run: $(RUN_STAMP)

# What the system lacks, through apt when we are root (Java 17 for PySpark, PostgreSQL, Chromium
# for the console tests, a C compiler). `make run` asks only for the C compiler.
system-deps:
	@PYTHON=$(PYTHON) bash scripts/system-deps.sh

# The C speedups' sources (hatch_build.py): the module and each room's _native/ folder.
NATIVE_SOURCES := $(wildcard src/orbitmq/_native/_speedups.c src/orbitmq/*/_native/*.[ch])

$(RUN_STAMP): pyproject.toml constraints.txt hatch_build.py $(NATIVE_SOURCES)
	@PYTHON=$(PYTHON) bash scripts/system-deps.sh --run
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e .
	@touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP) scripts/compat-venv.sh scripts/rmq5-venv.sh
	$(PY) -m pip install --quiet -c constraints.txt -e ".[test,lint,spark,postgres,chaos]"
	@bash scripts/compat-venv.sh
	@bash scripts/rmq5-venv.sh
	@touch $(STAMP)

# `make run` is a development broker: SQL92 filtering on (README's Filtering examples need it),
# the store in ./data/broker-a, the console on 8080 and the gRPC endpoint on 8081 (README's other
# commands use other ports). tests/integration/test_docs_run.py starts a server with these
# flags (on free ports) and runs README's and docs' examples against it.
RUN_FLAGS := --enable-property-filter true --grpc-port 8081

run: install-run
	$(VENV)/bin/orbitmq standalone --store ./data/broker-a $(RUN_FLAGS)

# A wheel of this checkout in dist/ (with the C speedups when a compiler is there), to install
# elsewhere: pip install dist/orbitmq-*.whl (or 'dist/orbitmq-...whl[spark]' for the extras).
dist: install-run
	rm -rf dist
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir dist .
	@ls dist/*.whl

# The protocol, store and broker tests once more without the C speedups (about 5 minutes), so
# that the Python twins, which every install without a C compiler runs, cannot rot.
PURE_PYTHON_TESTS := tests/unit tests/integration/test_broker_*.py \
	tests/integration/test_store_bulk.py tests/sim tests/faults

test: install
	$(PY) -m pytest $(PYTEST_WORKERS) $(PYTEST_ARGS)
	@echo "==== pure-Python leg: ORBITMQ_PURE_PYTHON=1, protocol + store + broker tests ===="
	ORBITMQ_PURE_PYTHON=1 $(PY) -m pytest $(PYTEST_WORKERS) $(PYTEST_ARGS) $(PURE_PYTHON_TESTS)

# mypy over every package; strict for orbitmq.protocol and orbitmq.store (pyproject.toml).
lint: install
	$(VENV)/bin/ruff check src tests bench scripts chaos
	$(VENV)/bin/mypy src/orbitmq
	$(VENV)/bin/lint-imports

FUZZ_SECONDS ?= 300
FUZZ_ARGS ?=

# The native entry points (the fast path, the stored codec's C twins, the column encoder, the
# store's dispatch plan and index put: fuzz/speedups_fuzz.c, with fuzz/fuzz_twins.py's checks
# against the Python twins) under libFuzzer with AddressSanitizer + UndefinedBehaviorSanitizer
# for FUZZ_SECONDS; prints executions and coverage.
# `make test` runs 20 s of it (tests/fuzz); FUZZ_CORPUS=DIR keeps the corpus between runs.
fuzz: install
	bash scripts/sanitize-speedups.sh --fuzz $(FUZZ_SECONDS) $(FUZZ_ARGS)

# The tests that feed the C code, against a gcc ASan + UBSan build of it.
sanitize: install
	bash scripts/sanitize-speedups.sh

# The web console's browser tests once more, saving their screenshots into docs/img (which
# docs/console.md shows); `make test` keeps them in its temporary directories.
console-screenshots: install
	ORBITMQ_SCREENSHOT_DIR=docs/img $(PY) -m pytest -q tests/console

BENCH_ARGS ?=

# OrbitMQ next to the installed peers (bench/run_bench.py), the Python clients side by side, the
# store against the raw disk, disk and broker memory per 1,000 idle queues (both store types),
# Spark, the RocketMQ 5 client next to the SDK with 1 M pending timers (bench/grpc_bench.py), and
# replication (a SYNC_MASTER next to a lone SYNC_FLUSH master, a slave's catch-up rate), publish over TLS
# against plaintext on one broker (bench/tls_bench.py), metadata at scale (bench/scale_bench.py,
# also `make bench-scale`), the SDK producer with message trace on against off (bench/trace_bench.py).
# Never part of
# `make test`; BENCH_ARGS=--quick for a smoke run. The load tool, bench/mqload (C), is built on
# first use; without `make bench-peers` only the OrbitMQ rows run.
bench: install
	$(PY) bench/run_bench.py $(BENCH_ARGS)
	$(PY) bench/client_bench.py $(BENCH_ARGS)
	$(PY) bench/store_bench.py $(BENCH_ARGS)
	$(PY) bench/queues_bench.py $(BENCH_ARGS)
	$(PY) bench/spark_bench.py $(BENCH_ARGS)
	$(PY) bench/grpc_bench.py $(BENCH_ARGS)
	$(PY) bench/ha_bench.py $(BENCH_ARGS)
	$(PY) bench/tls_bench.py $(BENCH_ARGS)
	$(PY) bench/scale_bench.py $(BENCH_ARGS)
	$(PY) bench/trace_bench.py $(BENCH_ARGS)

# Metadata at scale alone (bench/scale_bench.py): create cost at 100, 10,000 and 100,000 topics,
# restart after kill -9 at the largest, broker RSS per 1,000 idle and lightly used queues (under
# both store_type values, default and compact), name server RSS with 100,000 topics on 2 broker
# sets. Most of an hour; BENCH_ARGS=--quick: < 1 min.
bench-scale: install
	$(PY) bench/scale_bench.py $(BENCH_ARGS)

# Redis, RabbitMQ and NATS from Debian (their services stopped: the bench starts its own on
# 127.0.0.1), the C client libraries the load tool speaks to them with (hiredis, libnats,
# rabbitmq-c) and the tool built with them (bench/mqload/build.sh), and the peers' Python clients
# for bench/client_bench.py (the `bench` extra).
bench-peers: install
	@bash bench/install_peers.sh
	$(PY) -m pip install --quiet -c constraints.txt -e ".[bench]"

CHAOS_MINUTES ?= 3
CHAOS_SEED ?=
CHAOS_ARGS ?=

# Real servers (standalone, a SYNC_MASTER set, controller mode with etcd) under a seeded schedule
# of faults (kill -9, SIGSTOP past the lease, partitions in network namespaces when root), every
# history judged by one checker (docs/chaos.md). CHAOS_MINUTES of faults; CHAOS_SEED=N replays a
# run's schedule (each run prints its seed). Exits non-zero when a promise is broken.
chaos: install
	CHAOS_MINUTES=$(CHAOS_MINUTES) CHAOS_SEED=$(CHAOS_SEED) $(PY) chaos/run.py $(CHAOS_ARGS)

PIPELINE_ARGS ?=

# The order pipeline (examples/order_pipeline): order service -> Spark stats job -> consumer, on a
# standalone broker; ends by itself with a summary check against SQLite.
pipeline: install
	$(PY) examples/order_pipeline/run.py $(PIPELINE_ARGS)

clean:
	rm -rf $(VENV) .venv-compat .venv-rmq5 dist .pytest_cache .mypy_cache .ruff_cache
