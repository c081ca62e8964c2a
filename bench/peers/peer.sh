#!/bin/bash
# bench/peers/peer.sh start|stop|status redis|nats|rabbit
# One peer broker of `make bench` on 127.0.0.1 only, its data and logs under $PEER_DATA (default
# /tmp/orbitmq-bench-peers), its PID in $PEER_DATA/NAME.pid (stop signals exactly that PID).
# start also creates what the runs use, with mqload ($MQLOAD, default bench/mqload/build/mqload):
# the NATS stream BENCH, the RabbitMQ queues bench-classic and bench-quorum. Used by
# bench/systems.py; the servers come from Debian (make bench-peers).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DATA=${PEER_DATA:-/tmp/orbitmq-bench-peers}
MQLOAD=${MQLOAD:-$HERE/../mqload/build/mqload}
START_MAX_S=${START_MAX_S:-120}
op=${1:-} name=${2:-}
case "$op" in start|stop|status) ;; *) echo "usage: $0 start|stop|status redis|nats|rabbit" >&2; exit 2 ;; esac
case "$name" in redis|nats|rabbit) ;; *) echo "usage: $0 start|stop|status redis|nats|rabbit" >&2; exit 2 ;; esac
mkdir -p "$DATA"
pidf=$DATA/$name.pid

running() { [ -s "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; }

# Waits until 127.0.0.1:PORT accepts a connection, for at most SECONDS.
await_port() {
  local port=$1 end=$((SECONDS + $2))
  while [ "$SECONDS" -lt "$end" ]; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "$name: 127.0.0.1:$port closed after $2 s (logs in $DATA)" >&2
  return 1
}

# Runs mqload setup until it succeeds (the server may accept connections before it serves), 30 s at most.
setup() {
  local end=$((SECONDS + 30))
  until "$MQLOAD" "$@" -mode setup 2>"$DATA/$name-setup.err"; do
    if [ "$SECONDS" -ge "$end" ]; then cat "$DATA/$name-setup.err" >&2; return 1; fi
    sleep 1
  done
}

rabbit_env() {
  local dir=$DATA/rabbit
  mkdir -p "$dir/mnesia" "$dir/log"
  cp "$HERE/rabbitmq.conf" "$dir/rabbitmq.conf"
  # Debian's rabbitmq-server runs the broker as user rabbitmq when root starts it.
  if [ "$(id -u)" = 0 ] && id rabbitmq >/dev/null 2>&1; then chown -R rabbitmq:rabbitmq "$dir"; fi
  export RABBITMQ_NODENAME=rabbit@localhost RABBITMQ_MNESIA_BASE=$dir/mnesia \
    RABBITMQ_LOG_BASE=$dir/log RABBITMQ_PID_FILE=$dir/rabbit.pid \
    RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf RABBITMQ_DIST_PORT=25672 ERL_EPMD_ADDRESS=127.0.0.1 \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
}

start() {
  if running; then echo "$name already running, pid $(cat "$pidf")"; return 0; fi
  case $name in
  redis)
    mkdir -p "$DATA/redis"
    redis-server "$HERE/redis.conf" --dir "$DATA/redis" --logfile "$DATA/redis.log" &
    echo $! >"$pidf"
    await_port 6379 "$START_MAX_S" ;;
  nats)
    mkdir -p "$DATA/nats"
    nats-server -a 127.0.0.1 -p 4222 -js -sd "$DATA/nats" -l "$DATA/nats.log" &
    echo $! >"$pidf"
    await_port 4222 "$START_MAX_S"
    setup -sys nats ;;
  rabbit)
    # epmd is started by the broker when absent; remember to stop it only if so
    pgrep -x epmd >/dev/null || echo start >"$DATA/epmd.ours"
    rabbit_env
    rm -f "$RABBITMQ_PID_FILE"
    rabbitmq-server >"$DATA/rabbit-start.log" 2>&1 &
    local end=$((SECONDS + START_MAX_S))
    until [ -s "$RABBITMQ_PID_FILE" ]; do
      if [ "$SECONDS" -ge "$end" ]; then echo "rabbit: no pid file; see $DATA/rabbit-start.log" >&2; exit 1; fi
      sleep 0.1
    done
    cp "$RABBITMQ_PID_FILE" "$pidf"
    await_port 5672 "$START_MAX_S"
    if [ -f "$DATA/epmd.ours" ]; then pgrep -x epmd >"$DATA/epmd.ours" || rm -f "$DATA/epmd.ours"; fi
    setup -sys rabbit -q bench-classic
    setup -sys rabbit -q bench-quorum ;;
  esac
  echo "$name running on 127.0.0.1, pid $(cat "$pidf"), data in $DATA"
}

stop() {
  if ! running; then echo "$name not running"; rm -f "$pidf"; return 0; fi
  local pid; pid=$(cat "$pidf")
  kill "$pid"
  local end=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then echo "$name: pid $pid still alive 30 s after TERM, killing"; kill -9 "$pid"; fi
  rm -f "$pidf"
  echo "$name stopped (pid $pid)"
  if [ "$name" = rabbit ] && [ -s "$DATA/epmd.ours" ]; then
    local epid; epid=$(cat "$DATA/epmd.ours")
    rm -f "$DATA/epmd.ours"
    if ! epmd -names 2>/dev/null | grep -q '^name '; then kill "$epid" 2>/dev/null || true; fi
  fi
}

status() { if running; then echo "$name running, pid $(cat "$pidf")"; else echo "$name not running"; fi; }

"$op"
