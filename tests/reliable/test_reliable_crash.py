"""Crashes with real processes (SIGKILL): a relay between sending and marking rows sent, a consumer
inside its handler. Messages may come twice; their effects are applied once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections import Counter
from pathlib import Path

from reliable_support import create_topic, outbox_ids, read_topic, wait_until

from orbitmq import ConsumeFrom, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from orbitmq.reliable import (
    ConsumeLog,
    ConsumeStatus,
    Database,
    Outbox,
    OutboxRelay,
    OutboxStatus,
    RelayConfig,
    SqlHandle,
    idempotent,
)

CHILD = Path(__file__).with_name("reliable_children.py")
FAST_CONSUMER = {"consume_from": ConsumeFrom.FIRST, "rebalance_interval_ms": 1000,
                 "persist_consumer_offset_interval_ms": 500}


class Child:
    """A child of reliable_children.py whose output lines are collected."""

    def __init__(self, *args: str) -> None:
        self.lines: list[str] = []
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, prefix: str, timeout: float) -> str:
        def seen() -> bool:
            if self.proc.poll() is not None and not self._reader.is_alive():
                raise AssertionError(f"child exited: {self.lines[-20:]}")
            return any(line.startswith(prefix) for line in self.lines)

        wait_until(seen, timeout, f"{prefix!r} from the child")
        return next(line for line in self.lines if line.startswith(prefix))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _effects_table(db_url: str) -> None:
    with Database(db_url) as db, db.transaction() as h:
        h.execute("CREATE TABLE effects (k TEXT PRIMARY KEY, n INTEGER NOT NULL)")


def _effects(db_url: str) -> dict[str, int]:
    with Database(db_url) as db:
        return {k: int(n) for k, n in db.handle().fetchall("SELECT k, n FROM effects")}


def _credit(msg: MessageExt, tx: SqlHandle) -> None:
    tx.execute("INSERT INTO effects (k, n) VALUES (?, 1) ON CONFLICT (k) DO UPDATE "
               "SET n = effects.n + 1", (msg.keys[0],))


class CountingListener:
    """@idempotent(_credit) that also counts acknowledged deliveries."""

    def __init__(self, log: ConsumeLog) -> None:
        self.inner = idempotent(log)(_credit)
        self.acked = 0
        self._lock = threading.Lock()

    def __call__(self, messages: list[MessageExt], context) -> ConsumeResult:  # noqa: ANN001
        result = self.inner(messages, context)
        if result is ConsumeResult.SUCCESS:
            with self._lock:
                self.acked += len(messages) if context.ack_index is None else context.ack_index + 1
        return result


def test_relay_killed_after_sending_before_marking(db_url, cluster):
    topic, group = f"Crash-{uuid.uuid4().hex[:8]}", f"crash-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.namesrv, topic)
    _effects_table(db_url)
    outbox = Outbox()
    with Database(db_url) as db, db.transaction() as h:
        outbox.create_table(h)
        for i in range(5):
            outbox.add(h, Message(topic, b"+1", keys=f"user-{i}"))
    child = Child("relay", "--db", db_url, "--namesrv", cluster.namesrv, "--lease", "3")
    try:
        assert child.wait_line("SENT", 30) == "SENT 5"
    finally:
        child.kill()  # the broker has the messages; the rows are still unsent and claimed
    with Database(db_url) as db:
        assert outbox.counts(db.handle())[OutboxStatus.SENT] == 0
    config = RelayConfig(poll_interval=0.05, lease=10, send_timeout=4)
    with OutboxRelay(db_url, namesrv=cluster.namesrv, config=config) as relay:
        wait_until(lambda: relay.sent_total == 5, 30, "the rows sent again after the lease")
    assert Counter(outbox_ids(read_topic(cluster, topic))) == {i: 2 for i in range(1, 6)}
    log = ConsumeLog(db_url)
    listener = CountingListener(log)
    consumer = PushConsumer(group, namesrv=cluster.namesrv, **FAST_CONSUMER)
    consumer.subscribe(topic, "*", listener)
    with consumer:
        wait_until(lambda: listener.acked >= 10, 30, "both copies of every message consumed")
    assert _effects(db_url) == {f"user-{i}": 1 for i in range(5)}
    assert log.counts()[ConsumeStatus.DONE] == 5
    log.close()


def test_consumer_killed_inside_its_handler(db_url, cluster):
    topic, group = f"Crash-{uuid.uuid4().hex[:8]}", f"crash-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.namesrv, topic, queues=2)
    _effects_table(db_url)
    setup_log = ConsumeLog(db_url)
    setup_log.create_table()
    setup_log.close()
    child = Child("consumer", "--db", db_url, "--namesrv", cluster.namesrv, "--topic", topic,
                  "--group", group, "--lease", "3")
    try:
        child.wait_line("READY", 30)
        with Producer("crash-producer", namesrv=cluster.namesrv) as producer:
            for key in ("a", "c"):
                producer.send(Message(topic, b"ok", keys=key))
            wait_until(lambda: _effects(db_url) == {"a": 1, "c": 1}, 30, "the first messages")
            producer.send(Message(topic, b"die", keys="b"))
            child.wait_line("IN HANDLER", 30)
    finally:
        child.kill()  # mid-transaction: the credit for b is rolled back, b's row PROCESSING
    assert _effects(db_url) == {"a": 1, "c": 1}
    log = ConsumeLog(db_url)
    listener = CountingListener(log)
    consumer = PushConsumer(group, namesrv=cluster.namesrv, **FAST_CONSUMER)
    consumer.subscribe(topic, "*", listener)
    with consumer:  # b comes again; once the dead claim's lease ran out it is applied
        wait_until(lambda: _effects(db_url).get("b") == 1, 40, "b applied after redelivery")
    assert _effects(db_url) == {"a": 1, "b": 1, "c": 1}
    by_key = {r.keys: r for r in log.records()}
    assert by_key["b"].status is ConsumeStatus.DONE and by_key["b"].consume_times == 2
    assert {by_key[k].consume_times for k in "ac"} == {1}
    log.close()
