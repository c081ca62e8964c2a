#!/usr/bin/env bash
# The C speedups built with AddressSanitizer + UndefinedBehaviorSanitizer, and the tests that feed
# them valid, malformed, mangled and truncated input (the stored codec's twin tests, the verdict
# tests, the store and broker send/pull tests) run against that build. A copy of src/ in a
# temporary directory holds the sanitized module, so the tree's own build is left alone.
#   bash scripts/sanitize-speedups.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r src "$work/src"
inc=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
suffix=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
rm -f "$work"/src/orbitmq/protocol/_speedups*.so
gcc -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    -fPIC -shared -Wall -Wno-unused-parameter -I"$inc" src/orbitmq/protocol/_speedups.c \
    -o "$work/src/orbitmq/protocol/_speedups$suffix"
export PYTHONPATH="$work/src"
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$PY" -c "from orbitmq.protocol.native import NATIVE; assert NATIVE is not None; print(NATIVE.__file__)"
"$PY" -m pytest -p no:cacheprovider -q tests/unit/test_stored_twins.py \
    tests/unit/test_native_speedups.py tests/integration/test_broker_malformed_messages.py \
    tests/unit/test_store_put_get.py tests/unit/test_store_recovery.py \
    tests/integration/test_broker_send_pull.py tests/integration/test_broker_cpp_frames.py \
    tests/integration/test_store_bulk.py "$@"
