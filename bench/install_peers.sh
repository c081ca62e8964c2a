#!/bin/bash
# make bench-peers: the peer brokers of bench/run_bench.py from Debian's packages, their system
# services stopped and disabled (the bench starts each on 127.0.0.1 with ../shared/bench/peers/peer.sh,
# on the same ports). Idempotent.
set -euo pipefail
PKGS="redis-server rabbitmq-server nats-server python3-pika"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "bench-peers: need root (or sudo) for apt-get" >&2; exit 1; }
  SUDO=sudo
fi
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $missing
fi
for svc in redis-server rabbitmq-server nats-server; do
  if [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true
  elif command -v service >/dev/null; then
    $SUDO service "$svc" stop >/dev/null 2>&1 || true
  fi
done
echo "bench-peers: $PKGS installed; system services stopped"
