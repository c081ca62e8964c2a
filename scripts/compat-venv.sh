#!/usr/bin/env bash
# Prepares .venv-compat: a venv of its own holding the official RocketMQ C++ client, PyPI `rocketmq`
# 0.4.4 (a ctypes wrapper around a bundled librocketmq.so), for tests/compat and
# tests/data/capture_golden.py. Called by `make install`; safe to run again (does nothing when the
# venv already imports the right version).
#
# Why a separate venv: the wheel is tagged py2.py3 manylinux1 and is pure ctypes, so it runs on the
# machine's python3 (3.11 here), but it has nothing to do with OrbitMQ's own dependencies.
# What it needs from the system: librocketmq.so links against libstdc++.so.6 and libgcc_s.so.1
# (Debian: libstdc++6, libgcc-s1) plus glibc; zlib is bundled in the wheel. When ldd reports one of
# those missing and we are root, apt-get installs it; otherwise we stop with a clear message.
#
# Environment: PYTHON (default python3), COMPAT_VENV (default <repo>/.venv-compat).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${COMPAT_VENV:-$REPO/.venv-compat}"
PKG_VERSION="0.4.4"
VPY="$VENV/bin/python"

die() { echo "compat-venv: $*" >&2; exit 1; }

# Prints "ok" when the venv imports rocketmq.client at the pinned version; nothing otherwise.
venv_ready() {
  [ -x "$VPY" ] || return 1
  "$VPY" - "$PKG_VERSION" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
import rocketmq.client  # noqa: F401  (loads librocketmq.so through ctypes)
sys.exit(0 if version("rocketmq") == sys.argv[1] else 1)
EOF
}

# Debian package that provides a shared library librocketmq.so may lack.
package_for() {
  case "$1" in
    libstdc++.so.*) echo libstdc++6 ;;
    libgcc_s.so.*) echo libgcc-s1 ;;
    libz.so.*) echo zlib1g ;;
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.*) echo libc6 ;;
    *) return 1 ;;
  esac
}

apt_install() {
  if [ "$(id -u)" -ne 0 ]; then
    die "missing system packages: $* (install them with apt-get as root, then rerun)"
  fi
  command -v apt-get >/dev/null 2>&1 || die "missing system packages: $* and no apt-get here"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "$@" >/dev/null || die "apt-get install $* failed"
  installed_pkgs+=("$@")
}

installed_pkgs=()

if venv_ready; then
  echo "compat-venv: $VENV already has rocketmq==$PKG_VERSION (nothing to do)"
  exit 0
fi

command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found; the C++ client needs a CPython 3 to load it"

if [ ! -x "$VPY" ]; then
  if ! "$PYTHON" -m venv "$VENV" >/dev/null 2>&1; then
    # Debian's own python3 keeps venv/ensurepip in a separate package.
    rm -rf "$VENV"
    apt_install python3-venv
    "$PYTHON" -m venv "$VENV" || die "cannot create a venv with $PYTHON"
  fi
fi

# pip's chatter (index warnings) is kept out of make's output unless the install fails.
pip_log="$(mktemp)"
trap 'rm -f "$pip_log"' EXIT
if ! "$VPY" -m pip install --quiet --disable-pip-version-check "rocketmq==$PKG_VERSION" >"$pip_log" 2>&1; then
  cat "$pip_log" >&2
  die "pip could not install rocketmq==$PKG_VERSION into $VENV"
fi

LIB="$("$VPY" -c 'import importlib.util, os; s = importlib.util.find_spec("rocketmq"); print(os.path.join(os.path.dirname(s.origin), "librocketmq.so"))')"
[ -f "$LIB" ] || die "the wheel has no librocketmq.so at $LIB (only Linux x86_64 wheels bundle it)"

if command -v ldd >/dev/null 2>&1; then
  missing="$(ldd "$LIB" | awk '/not found/ {print $1}')"
  if [ -n "$missing" ]; then
    pkgs=()
    for lib in $missing; do
      pkg="$(package_for "$lib")" || die "librocketmq.so needs $lib, which no known Debian package provides"
      pkgs+=("$pkg")
    done
    apt_install "${pkgs[@]}"
  fi
fi

venv_ready || die "$VPY cannot import rocketmq.client (try: $VPY -c 'import rocketmq.client')"

if [ ${#installed_pkgs[@]} -gt 0 ]; then
  echo "compat-venv: prepared $VENV with rocketmq==$PKG_VERSION (apt installed: ${installed_pkgs[*]})"
else
  echo "compat-venv: prepared $VENV with rocketmq==$PKG_VERSION"
fi
