#!/bin/bash
# Builds mqload (bench/mqload/*.c) into bench/mqload/build/mqload with the system's C compiler.
# Each peer's part goes in where its client library is installed (pkg-config): hiredis (Redis),
# libnats (NATS JetStream), librabbitmq (RabbitMQ); `make bench-peers` installs all three. The
# OrbitMQ part needs nothing but the compiler (and the broker's HMAC-SHA1,
# src/orbitmq/protocol/_native/hmac_sha1.c, to sign as a client does). Prints the binary's path
# and the peers built in.
#   bench/mqload/build.sh [OUTPUT]        CC and CFLAGS are honoured.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${1:-$HERE/build/mqload}
CC=${CC:-cc}
mkdir -p "$(dirname "$OUT")"
defs=() libs=() with=()
if command -v pkg-config >/dev/null; then
  for spec in redis:hiredis nats:libnats rabbit:librabbitmq; do
    name=${spec%%:*} pkg=${spec#*:}
    if pkg-config --exists "$pkg"; then
      defs+=("-DWITH_${name^^}" $(pkg-config --cflags "$pkg"))
      libs+=($(pkg-config --libs "$pkg"))
      with+=("$name")
    fi
  done
fi
# shellcheck disable=SC2086
"$CC" -O2 -pthread -Wall -Wextra -Wno-unused-function -Wno-unused-parameter ${CFLAGS:-} \
  "${defs[@]}" "$HERE"/mqload.c "$HERE"/e2e.c "$HERE"/rocketmq.c "$HERE"/redis.c "$HERE"/nats.c \
  "$HERE"/rabbit.c -I"$HERE"/../../src/orbitmq \
  "$HERE"/../../src/orbitmq/protocol/_native/hmac_sha1.c -o "$OUT.$$.tmp" "${libs[@]}" -lm
mv "$OUT.$$.tmp" "$OUT"
echo "mqload built: $OUT (rocketmq${with:+ ${with[*]}})"
