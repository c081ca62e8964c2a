#!/usr/bin/env bash
# Installs the system packages OrbitMQ needs when they are missing, using apt when run as root.
# With --run, only what running needs (`make run`): the C compiler for the optional speedups.
set -euo pipefail
run_only=false
if [ "${1:-}" = "--run" ]; then run_only=true; fi
need=()
if ! $run_only; then
  command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
  # PostgreSQL for the orbitmq.reliable tests: they start their own server with initdb and pg_ctl.
  ls /usr/lib/postgresql/*/bin/pg_ctl /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  # Chromium for the web console's browser tests: Playwright drives Debian's build
  # (/usr/bin/chromium); it never downloads a browser of its own.
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  # etcd for controller mode's failover tests (tests/faults/test_failover_*.py start their own
  # servers from /usr/bin/etcd); the Debian package's own service is not needed by them.
  command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
  # libfuse 3 and fusermount3 for the power-loss layer (orbitmq.testing.lazyfs, through the
  # `chaos` extra's mfusepy): `make chaos` and tests/faults/test_power_cut_broker.py skip without them.
  ls /usr/lib/*/libfuse3.so.3 /usr/lib/libfuse3.so.3 >/dev/null 2>&1 || need+=(fuse3)
  # libfaketime for the chaos runs' clock skew of a broker (src/orbitmq/testing/clock.py; its
  # tests skip without it).
  ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || need+=(libfaketime)
fi
# A C compiler for the optional C speedups (hatch_build.py); without it OrbitMQ runs pure Python.
command -v "${CC:-cc}" >/dev/null 2>&1 || need+=(gcc libc6-dev)
# clang and libFuzzer for `make fuzz` and the short fuzzing run of `make test` (tests/fuzz skips
# without them).
if ! $run_only; then
  command -v clang >/dev/null 2>&1 || command -v clang-14 >/dev/null 2>&1 || need+=(clang-14)
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 \
    || need+=(libclang-rt-14-dev)
fi
# Python's headers, for the same build, when the interpreter is Debian's own (pyenv and
# python.org builds ship them).
PY="${PYTHON:-python3}"
inc="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)"
if [ -n "$inc" ] && [ ! -f "$inc/Python.h" ]; then need+=(python3-dev); fi
# Debian's own python3 keeps the venv's pip bootstrap (ensurepip) in a package of its own.
if command -v "$PY" >/dev/null 2>&1 && ! "$PY" -c 'import ensurepip' >/dev/null 2>&1; then
  need+=(python3-venv)
fi
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing system packages: ${need[*]} (run as root or install them with apt)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${need[@]}"
