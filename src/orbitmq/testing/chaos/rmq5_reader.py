"""A chaos POP reader through the official RocketMQ 5 Python client's SimpleConsumer (PyPI
``rocketmq-python-client`` in ``.venv-rmq5``) over OrbitMQ's gRPC endpoint: receive with an
invisible time (a lease), ack each message by its receipt handle, and say when everything
happened, for the lease checker (lease_checker.py).

Run under that venv's Python, never OrbitMQ's: it imports only the stdlib and the client. The
spec comes as JSON on stdin (``address``: the gRPC endpoint, ``topic``, ``group``, ``batch``,
``invisible_s``, ``await_s``, ``request_timeout_s``, ``skip_every``, ``ack_threads``,
``stop_file``, ``deadline_s``). Each line it prints is one JSON object, times from
``time.monotonic()`` (one clock for every process of the machine, so the harness puts them on
its own timeline):

- a delivery: ``{"k": "d", "v": body, "h": receipt handle, "a": attempt, "t0": receive sent,
  "t": answered, "inv": invisible s}``;
- an ack: ``{"k": "a", "v": body, "h": handle, "t0": sent, "t": answered, "o": "ok" |
  "refused" | "unknown", "m": why}`` (refused: the broker answered an error of the request,
  a 4xxxx code such as INVALID_RECEIPT_HANDLE; unknown: no answer, or a server-side error that
  may have come after the ack was applied);
- a receive that failed: ``{"k": "e", "t": time, "e": class, "m": text}``.

To see leases run out, the first delivery of every ``skip_every``-th value (by its counter) is
left unacked: it comes back once its invisible time passed and is acked then. It stops when
``stop_file`` exists or at ``deadline_s`` (a watchdog dumps the threads and exits).
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

STARTUP_WAIT_S = 60.0  # the consumer's start is tried again (a broker down) up to this long
_out_lock = threading.Lock()
_pending = threading.Condition()  # acks submitted and not answered yet
_pending_count = [0]


def emit(line: dict[str, Any]) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()


def skipped(value: str, attempt: int, skip_every: int) -> bool:
    """Whether this delivery is left unacked on purpose (a lease left to run out)."""
    counter = value.rpartition("-")[2]
    return (skip_every > 0 and attempt <= 1 and counter.isdigit()
            and int(counter) % skip_every == skip_every - 1)


def ack_one(consumer: Any, message: Any, value: str) -> None:
    try:
        _ack(consumer, message, value)
    finally:
        with _pending:
            _pending_count[0] -= 1
            _pending.notify_all()


def _ack(consumer: Any, message: Any, value: str) -> None:
    asked = time.monotonic()
    line: dict[str, Any] = {"k": "a", "v": value, "h": message.receipt_handle, "t0": asked}
    try:
        consumer.ack(message)
        line["o"] = "ok"
    except Exception as e:  # noqa: BLE001 - every outcome is a line of the history
        code = getattr(e, "code", None)
        refused = isinstance(code, int) and 40000 <= code < 50000
        line["o"] = "refused" if refused else "unknown"
        line["m"] = f"{type(e).__name__}: {str(e)[:160]}"
    line["t"] = time.monotonic()
    emit(line)


def main() -> None:
    spec = json.loads(sys.stdin.read())
    faulthandler.dump_traceback_later(float(spec["deadline_s"]), exit=True)
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    config = ClientConfiguration(spec["address"], Credentials("", ""),
                                 request_timeout=int(spec["request_timeout_s"]))
    started_by = time.monotonic() + STARTUP_WAIT_S
    while True:  # the broker may be down or paused by the schedule's first fault
        consumer: Any = SimpleConsumer(config, spec["group"],
                                       {spec["topic"]: FilterExpression()},
                                       await_duration=int(spec["await_s"]))
        try:
            consumer.startup()
            break
        except Exception as e:  # noqa: BLE001 - said, then tried again until the bound
            emit({"k": "e", "t": time.monotonic(), "e": type(e).__name__, "m": str(e)[:200]})
            if time.monotonic() > started_by:
                raise
            time.sleep(1.0)
    invisible_s = int(spec["invisible_s"])
    skip_every = int(spec["skip_every"])
    acks = ThreadPoolExecutor(int(spec["ack_threads"]))
    backlog_max = int(spec["batch"])
    while not os.path.exists(spec["stop_file"]):
        # As a consumer that acks what it processed before it takes more: a backlog of acks
        # would outlive the leases and turn every message into a redelivery.
        with _pending:
            _pending.wait_for(lambda: _pending_count[0] < backlog_max, timeout=float(
                spec["request_timeout_s"]) * 2)
        asked = time.monotonic()
        try:
            messages = consumer.receive(int(spec["batch"]), invisible_s)
        except Exception as e:  # noqa: BLE001 - a broker down: said, then tried again
            emit({"k": "e", "t": time.monotonic(), "e": type(e).__name__, "m": str(e)[:200]})
            time.sleep(0.5)
            continue
        answered = time.monotonic()
        for message in messages:
            value = bytes(message.body).decode("utf-8", "replace")
            attempt = int(message.delivery_attempt or 1)
            emit({"k": "d", "v": value, "h": message.receipt_handle, "a": attempt, "t0": asked,
                  "t": answered, "inv": invisible_s})
            if not skipped(value, attempt, skip_every):
                with _pending:
                    _pending_count[0] += 1
                acks.submit(ack_one, consumer, message, value)
    acks.shutdown(wait=True)
    sys.stdout.flush()
    os._exit(0)  # the client's threads would hold the interpreter's exit


if __name__ == "__main__":
    main()
