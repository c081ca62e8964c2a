#!/usr/bin/env bash
# Prepares .venv-rmq5: a venv of its own holding the official RocketMQ 5 Python client, PyPI
# `rocketmq-python-client` (gRPC, apache.rocketmq.v2), for tests/rmq5 and bench/grpc_bench.py,
# and grpcio-tools for scripts/regen_grpc.py. Called by `make install`; safe to run again (does
# nothing when the venv already imports the right version).
#
# Why a separate venv: the client's top-level package is `rocketmq`, the name the C++ client's
# wheel (.venv-compat) uses too, and it brings OpenTelemetry and requests, none of which OrbitMQ
# needs. The tests drive it as a child process (tests/rmq5/rmq5_driver.py).
#
# Environment: PYTHON (default python3), RMQ5_VENV (default <repo>/.venv-rmq5).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${RMQ5_VENV:-$REPO/.venv-rmq5}"
PKG_VERSION="5.1.2"
VPY="$VENV/bin/python"

die() { echo "rmq5-venv: $*" >&2; exit 1; }

venv_ready() {
  [ -x "$VPY" ] || return 1
  "$VPY" - "$PKG_VERSION" <<'PYEOF' 2>/dev/null
import sys
from importlib.metadata import version
import rocketmq  # noqa: F401
import grpc_tools  # noqa: F401
sys.exit(0 if version("rocketmq-python-client") == sys.argv[1] else 1)
PYEOF
}

if venv_ready; then
  echo "rmq5-venv: $VENV already has rocketmq-python-client==$PKG_VERSION (nothing to do)"
  exit 0
fi

command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found"
if [ ! -x "$VPY" ]; then
  "$PYTHON" -m venv "$VENV" || die "cannot create a venv with $PYTHON (Debian: apt-get install python3-venv)"
fi

pip_log="$(mktemp)"
trap 'rm -f "$pip_log"' EXIT
# The client's own pins decide grpcio/protobuf in this venv; grpcio-tools is one of its
# dependencies (scripts/regen_grpc.py uses it).
if ! "$VPY" -m pip install --quiet --disable-pip-version-check "rocketmq-python-client==$PKG_VERSION" \
    "grpcio-tools" >"$pip_log" 2>&1; then
  cat "$pip_log" >&2
  die "pip could not install rocketmq-python-client==$PKG_VERSION into $VENV"
fi

venv_ready || die "$VPY cannot import the client (try: $VPY -c 'import rocketmq')"
echo "rmq5-venv: prepared $VENV with rocketmq-python-client==$PKG_VERSION"
