#!/bin/bash
# make bench-peers: the peer brokers of bench/run_bench.py and the client libraries mqload speaks
# to them with, all from Debian's packages (hiredis, the NATS C client, rabbitmq-c), then mqload
# built with them (bench/mqload/build.sh). The servers' system services are stopped and disabled:
# the bench starts each on 127.0.0.1 with bench/peers/peer.sh, on the same ports. Idempotent.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SERVERS="redis-server rabbitmq-server nats-server"
LIBS="gcc libc6-dev pkg-config libhiredis-dev libnats-dev librabbitmq-dev"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "bench-peers: need root (or sudo) for apt-get" >&2; exit 1; }
  SUDO=sudo
fi
missing=""
for p in $SERVERS $LIBS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $missing
fi
for svc in $SERVERS; do
  if [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true
  elif command -v service >/dev/null; then
    $SUDO service "$svc" stop >/dev/null 2>&1 || true
  fi
done
bash "$HERE/mqload/build.sh"
echo "bench-peers: $SERVERS installed; system services stopped"
