"""tests/rmq5/rmq5_driver.py with the official client's lite topic clients added.

Runs under .venv-rmq5's Python like rmq5_driver.py (same protocol, same ops) and adds:
lite_send (a message with ``lite_topic``), lite_simple (LiteSimpleConsumer), lite_push
(LitePushConsumer), subscribe_lite / unsubscribe_lite / subscribe_lite_all (the client's own
calls; subscribe_lite_all sends the client's whole set at once, which the client otherwise does
30 s after its start), lite_receive (receive with each message's lite topic).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import rmq5_driver as base
from rocketmq import ConsumeResult, LitePushConsumer, LiteSimpleConsumer, Message, MessageListener


def describe(m: Any) -> dict[str, Any]:
    return {**base.describe(m), "lite_topic": m.lite_topic}


def op_lite_send(spec: dict[str, Any]) -> dict[str, Any]:
    msg = Message()
    msg.topic = spec["topic"]
    msg.body = spec["body"].encode()
    msg.lite_topic = spec["lite_topic"]
    receipt = base.clients[spec["id"]].send(msg)
    return {"message_id": receipt.message_id}


def op_lite_simple(spec: dict[str, Any]) -> dict[str, Any]:
    consumer = LiteSimpleConsumer(spec["topic"], base.config(spec), spec["group"],
                                  await_duration=spec.get("await_s", 2))
    consumer.startup()
    base.clients[spec["id"]] = consumer
    # Unlike the push consumer, the simple one's startup does not wait for the broker's settings
    # (which carry the lite subscription quota): subscribe_lite before they came is refused.
    manager = consumer._LiteSimpleConsumer__subscription_manager  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while manager.lite_subscription_quota <= 0:
        if time.monotonic() > deadline:
            raise RuntimeError("no settings from the broker within 10 s")
        time.sleep(0.05)
    return {}


class LiteListener(MessageListener):
    def __init__(self, cid: str) -> None:
        self.cid, self.lock = cid, threading.Lock()

    def consume(self, message: Any) -> Any:
        with self.lock:
            base.consumed.setdefault(self.cid, []).append(describe(message))
        return ConsumeResult.SUCCESS


def op_lite_push(spec: dict[str, Any]) -> dict[str, Any]:
    consumer = LitePushConsumer(base.config(spec), spec["group"], spec["topic"],
                                LiteListener(spec["id"]), consumption_thread_count=4)
    consumer.startup()
    base.clients[spec["id"]] = consumer
    return {}


def op_subscribe_lite(spec: dict[str, Any]) -> dict[str, Any]:
    consumer = base.clients[spec["id"]]
    for name in spec["names"]:
        consumer.subscribe_lite(name)
    if spec.get("sync_all"):
        consumer.subscribe_lite_all()
    return {}


def op_unsubscribe_lite(spec: dict[str, Any]) -> dict[str, Any]:
    base.clients[spec["id"]].unsubscribe_lite(spec["name"])
    return {}


def op_lite_receive(spec: dict[str, Any]) -> dict[str, Any]:
    got = base.clients[spec["id"]].receive(spec.get("max", 32), spec.get("invisible_s", 10))
    for m in got:
        base.held[m.receipt_handle] = m
    return {"messages": [describe(m) for m in got], "at_ms": int(time.time() * 1000)}


base.OPS.update({name[3:]: fn for name, fn in list(globals().items()) if name.startswith("op_")})

if __name__ == "__main__":
    sys.exit(base.main())
