"""Drives the official RocketMQ 5 Python client (PyPI `rocketmq-python-client`) for the tests.

Runs under .venv-rmq5's Python, never under OrbitMQ's venv: it imports nothing from orbitmq. The
tests start it as a child process and talk to it over stdin/stdout, one JSON object per line:
a command ``{"op": ..., ...}`` in, one answer ``{"ok": true, ...}`` (or ``{"ok": false,
"error": class name, "message": text}``) out. Clients live in the driver under the ``id`` the
test gives them, so a test can send, receive, ack and change invisibility step by step, restart
the broker in between, and ask a push consumer what it consumed so far.

Ops: producer, send, send_many, recall, checks, simple, receive, ack, change, push, consumed, close,
quit (see each function). Message bodies travel as text; received ones come back with their fields.
"""

from __future__ import annotations

import copy
import faulthandler
import json
import sys
import threading
import time
import traceback
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

clients: dict[str, Any] = {}
held: dict[str, Any] = {}  # receipt handle -> Message (for ack and change)
checks: dict[str, list[str]] = {}  # producer id -> message ids the broker asked about
consumed: dict[str, list[dict[str, Any]]] = {}  # push consumer id -> what its listener saw


def describe(m: Any) -> dict[str, Any]:
    return {"id": m.message_id, "topic": m.topic, "body": m.body.decode("utf-8", "replace"),
            "tag": m.tag, "keys": sorted(m.keys), "properties": dict(m.properties),
            "attempt": m.delivery_attempt, "handle": m.receipt_handle, "group": m.message_group,
            "delivery_ms": m.delivery_timestamp, "corrupted": m.corrupted,
            "priority": m.priority, "type": m.message_type, "namespace": m.namespace}


def config(spec: dict[str, Any]) -> ClientConfiguration:
    """The client's configuration; ``ak``/``sk`` in the spec are its credentials (none: empty),
    ``namespace`` its namespace (none: "")."""
    credentials = Credentials(spec.get("ak", ""), spec.get("sk", ""))
    return ClientConfiguration(spec["endpoint"], credentials, namespace=spec.get("namespace", ""),
                               request_timeout=spec.get("timeout_s", 10))


class Checker(TransactionChecker):
    def __init__(self, pid: str, verdict: str) -> None:
        self.pid, self.verdict = pid, verdict

    def check(self, message: Any) -> Any:
        checks.setdefault(self.pid, []).append(message.message_id)
        return TransactionResolution.COMMIT if self.verdict == "commit" else TransactionResolution.ROLLBACK


def op_producer(spec: dict[str, Any]) -> dict[str, Any]:
    checker = Checker(spec["id"], spec.get("check_verdict", "commit"))
    producer = Producer(config(spec), tuple(spec.get("topics", ())), checker=checker,
                        tls_enable=bool(spec.get("tls")))
    producer.startup()
    clients[spec["id"]] = producer
    return {}


def op_send(spec: dict[str, Any]) -> dict[str, Any]:
    producer = clients[spec["id"]]
    msg = Message()
    msg.topic = spec["topic"]
    msg.body = spec["body"].encode()
    if spec.get("tag"):
        msg.tag = spec["tag"]
    for key in spec.get("keys") or ():
        msg.keys = key  # the setter adds one key per assignment
    for name, value in (spec.get("properties") or {}).items():
        msg.add_property(name, value)
    if spec.get("message_group"):
        msg.message_group = spec["message_group"]
    if spec.get("delivery_s"):
        msg.delivery_timestamp = int(spec["delivery_s"])  # the client sends whole seconds
    if spec.get("priority") is not None:
        msg.priority = int(spec["priority"])
    tx_mode = spec.get("transaction")
    if tx_mode:
        tx = producer.begin_transaction()
        receipt = producer.send(msg, tx)
        if tx_mode == "commit":
            tx.commit()
        elif tx_mode == "rollback":
            tx.rollback()
    else:
        receipt = producer.send(msg)
    return {"message_id": receipt.message_id, "offset": receipt.offset,
            "transaction_id": receipt.transaction_id, "recall_handle": receipt.recall_handle}


def op_recall(spec: dict[str, Any]) -> dict[str, Any]:
    """``producer.recall_message(topic, handle)``: the recalled message's id."""
    return {"message_id": clients[spec["id"]].recall_message(spec["topic"], spec["handle"])}


def op_send_many(spec: dict[str, Any]) -> dict[str, Any]:
    """``count`` messages (body ``body``, optional ``priority``) with send_async, at most
    ``window`` in flight; how many were sent and the seconds taken."""
    producer = clients[spec["id"]]
    window, pending, sent = int(spec.get("window", 64)), [], 0
    start = time.perf_counter()
    for _ in range(int(spec["count"])):
        msg = Message()
        msg.topic = spec["topic"]
        msg.body = spec["body"].encode()
        if spec.get("priority") is not None:
            msg.priority = int(spec["priority"])
        pending.append(producer.send_async(msg))
        if len(pending) >= window:
            pending.pop(0).result(60)
            sent += 1
    for future in pending:
        future.result(60)
        sent += 1
    return {"sent": sent, "seconds": time.perf_counter() - start}


def op_checks(spec: dict[str, Any]) -> dict[str, Any]:
    return {"checks": list(checks.get(spec["id"], []))}


def op_simple(spec: dict[str, Any]) -> dict[str, Any]:
    expr = FilterExpression(spec.get("tag") or "*")
    consumer = SimpleConsumer(config(spec), spec["group"], {spec["topic"]: expr},
                              await_duration=spec.get("await_s", 2), tls_enable=bool(spec.get("tls")))
    consumer.startup()
    clients[spec["id"]] = consumer
    return {}


def op_receive(spec: dict[str, Any]) -> dict[str, Any]:
    got = clients[spec["id"]].receive(spec.get("max", 32), spec.get("invisible_s", 10))
    for m in got:
        held[m.receipt_handle] = m
    return {"messages": [describe(m) for m in got], "at_ms": int(time.time() * 1000)}


def op_ack(spec: dict[str, Any]) -> dict[str, Any]:
    clients[spec["id"]].ack(held[spec["handle"]])
    return {}


def op_change(spec: dict[str, Any]) -> dict[str, Any]:
    msg = held[spec["handle"]]
    held[spec["handle"]] = copy.copy(msg)  # keeps the old handle (to ack with it: refused)
    clients[spec["id"]].change_invisible_duration(msg, spec["invisible_s"])
    held[msg.receipt_handle] = msg  # the client took the answer's new handle
    return {"handle": msg.receipt_handle}


class Listener(MessageListener):
    def __init__(self, cid: str, fail_first: int, hang: bool = False) -> None:
        self.cid, self.fail_first, self.lock = cid, fail_first, threading.Lock()
        self.hang = hang  # never return (nor ack): the process is killed meanwhile

    def consume(self, message: Any) -> Any:
        with self.lock:
            seen = consumed.setdefault(self.cid, [])
            seen.append(describe(message))
            fail = sum(1 for s in seen if s["id"] == message.message_id) <= self.fail_first
        if self.hang:
            threading.Event().wait()
        return ConsumeResult.FAILURE if fail else ConsumeResult.SUCCESS


def op_push(spec: dict[str, Any]) -> dict[str, Any]:
    expr = FilterExpression(spec.get("tag") or "*")
    listener = Listener(spec["id"], spec.get("fail_first", 0), bool(spec.get("hang")))
    consumer = PushConsumer(config(spec), spec["group"], listener,
                            {spec["topic"]: expr}, consumption_thread_count=4)
    consumer.startup()
    clients[spec["id"]] = consumer
    return {}


def op_consumed(spec: dict[str, Any]) -> dict[str, Any]:
    return {"consumed": list(consumed.get(spec["id"], []))}


def op_close(spec: dict[str, Any]) -> dict[str, Any]:
    client = clients.pop(spec["id"], None)
    if client is not None:
        client.shutdown()
    return {}


def op_bench_send(spec: dict[str, Any]) -> dict[str, Any]:
    """``count`` sync sends of ``size``-byte bodies (bench/grpc_bench.py); seconds taken."""
    producer = clients[spec["id"]]
    body = b"x" * int(spec.get("size", 1024))
    start = time.perf_counter()
    for _ in range(int(spec["count"])):
        msg = Message()
        msg.topic = spec["topic"]
        msg.body = body
        producer.send(msg)
    return {"seconds": time.perf_counter() - start}


def op_bench_receive(spec: dict[str, Any]) -> dict[str, Any]:
    """Receive (batches of 32) and ack each until ``count`` came; seconds taken."""
    consumer = clients[spec["id"]]
    want, got = int(spec["count"]), 0
    start = time.perf_counter()
    deadline = time.monotonic() + float(spec.get("deadline_s", 600))
    while got < want and time.monotonic() < deadline:
        for m in consumer.receive(32, 60):
            consumer.ack(m)
            got += 1
    return {"seconds": time.perf_counter() - start, "received": got}


OPS = {name[3:]: fn for name, fn in globals().items() if name.startswith("op_")}


def main() -> int:
    faulthandler.enable()
    for line in sys.stdin:
        if not line.strip():
            continue
        spec = json.loads(line)
        if spec.get("op") == "quit":
            break
        try:
            answer = {"ok": True, **OPS[spec["op"]](spec)}
        except Exception as e:  # noqa: BLE001 - reported to the test
            answer = {"ok": False, "error": type(e).__name__, "message": str(e),
                      "trace": traceback.format_exc()[-2000:]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    for cid in list(clients):
        try:
            clients.pop(cid).shutdown()
        except Exception:  # noqa: BLE001
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
