#!/usr/bin/env bash
# The C speedups (orbitmq._native._speedups: the protocol's stored codec twins, column encoder and
# hashes, the store's dispatch plan, index put and queue runs, the broker's native fast path)
# under AddressSanitizer and UndefinedBehaviorSanitizer, two ways. A copy of src/ in a temporary
# directory holds the sanitized module, so the tree's own build is left alone. The sources are
# hatch_build.py's: src/orbitmq/_native/_speedups.c and src/orbitmq/*/_native/*.c.
#
#   bash scripts/sanitize-speedups.sh [extra pytest args]
#       gcc build; the tests that feed the module valid, malformed, mangled and truncated input
#       (the twins, the verdicts, the store's dispatch plan and index, pull bodies as columns,
#       column sets, the broker's sends and pulls, the fast path against the Python path) run
#       against it.
#   bash scripts/sanitize-speedups.sh --fuzz SECONDS [libFuzzer args]      (make fuzz)
#       clang build with libFuzzer coverage; fuzz/speedups_fuzz.c calls every native entry point
#       (FastPath.take with and without authentication, auth_check, allow, set_users, the
#       encoders, scan_stored, queue_runs, the hashes, HMAC-SHA1, and against their Python twins
#       through fuzz/fuzz_twins.py: dispatch_plan, index_put, stored_columns,
#       encode_batch_columns) from an embedded interpreter, on the seeds of fuzz/make_seeds.py,
#       for SECONDS; prints executions and coverage at the end.
#       FUZZ_CORPUS=DIR keeps the corpus it grows; a crash leaves its input in FUZZ_ARTIFACTS
#       (default: the current directory). Needs clang and libFuzzer (scripts/system-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
work=$(mktemp -d)
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$work"' EXIT
cp -r src "$work/src"
rm -f "$work"/src/orbitmq/_native/_speedups*.so
inc=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
suffix=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
module="$work/src/orbitmq/_native/_speedups$suffix"
# hatch_build.py's sources: the module, then each room's C (headers from src/orbitmq)
sources=(src/orbitmq/_native/_speedups.c src/orbitmq/protocol/_native/*.c
         src/orbitmq/store/_native/*.c src/orbitmq/broker/_native/*.c)
cflags=(-fPIC -shared -fvisibility=hidden -Wall -Wno-unused-parameter -I"$inc" -Isrc/orbitmq)
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

if [ "${1:-}" = "--fuzz" ]; then
  seconds=${2:-60}
  shift $(( $# < 2 ? $# : 2 ))
  CLANG=${CLANG:-$(command -v clang || command -v clang-14 || true)}
  if [ -z "$CLANG" ]; then
    echo "fuzz: no clang here (apt-get install clang-14 libclang-rt-14-dev, or set CLANG)" >&2
    exit 2
  fi
  libdir=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))")
  pylib=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('LDLIBRARY'))")
  pylib=${pylib#lib}; pylib=${pylib%%.so*}; pylib=${pylib%%.a}
  san="-g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
  "$CLANG" $san -fsanitize=fuzzer-no-link "${cflags[@]}" "${sources[@]}" -o "$module"
  "$CLANG" $san -fsanitize=fuzzer -I"$inc" fuzz/speedups_fuzz.c -L"$libdir" -l"$pylib" \
      -Wl,-rpath,"$libdir" -o "$work/speedups_fuzz"
  site=$("$PY" -c "import site; print(site.getsitepackages()[0])")
  PYTHONPATH="$work/src" "$PY" fuzz/make_seeds.py "$work/seeds"
  corpus=${FUZZ_CORPUS:-$work/corpus}
  mkdir -p "$corpus"
  PYTHONHOME=$("$PY" -c "import sys; print(sys.base_prefix)") PYTHONPATH="$work/src:$PWD/fuzz:$site" \
  PYTHONMALLOC=malloc ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 \
      "$work/speedups_fuzz" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
      -rss_limit_mb=4096 -artifact_prefix="${FUZZ_ARTIFACTS:-./}" "$@" "$corpus" "$work/seeds" \
      > "$work/fuzz.log" 2>&1 && status=0 || status=$?
  grep -E "^#[0-9]+ +(INITED|DONE)|ERROR|SUMMARY|WARNING|deadly|crash-" "$work/fuzz.log" || true
  runs=$(grep -o "stat::number_of_executed_units: [0-9]*" "$work/fuzz.log" | awk '{print $2}')
  cov=$(grep -oE "cov: [0-9]+ ft: [0-9]+" "$work/fuzz.log" | tail -1)
  echo "fuzz: ${runs:-0} executions in ${seconds} s, coverage ${cov:-unknown} (edges, features), exit ${status}"
  exit "$status"
fi

gcc -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    "${cflags[@]}" "${sources[@]}" -o "$module"
export PYTHONPATH="$work/src"
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
"$PY" -c "import orbitmq._native._speedups as m; from orbitmq.store.native import NATIVE; assert NATIVE is not None; print(m.__file__)"
"$PY" -m pytest -p no:cacheprovider -q tests/unit/protocol/test_stored_twins.py \
    tests/unit/_native/test_native_speedups.py tests/integration/test_broker_malformed_messages.py \
    tests/unit/store/test_store_put_get.py tests/unit/store/test_store_recovery.py \
    tests/integration/test_broker_send_pull.py tests/integration/test_broker_cpp_frames.py \
    tests/integration/test_store_bulk.py tests/integration/test_fast_path_differential.py \
    tests/unit/broker/test_fast_path.py tests/unit/broker/test_fast_path_peek.py \
    tests/unit/protocol/test_column_batch.py \
    tests/unit/broker/test_fast_path_signed.py tests/integration/test_fast_path_auth.py \
    tests/unit/store/test_dispatch_plan.py tests/unit/protocol/test_stored_columns.py \
    tests/unit/store/test_stored_layout_lint.py tests/integration/test_column_send.py "$@"
