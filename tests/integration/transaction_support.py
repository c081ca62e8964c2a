"""Helpers of the transaction tests: a cluster with short check intervals, a listener that records
what it is asked, a consumer that long-polls in the background, producers in child processes,
and an asyncio producer that holds END_TRANSACTION back (to lose it, or to send it late).
"""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from orbitmq.client import Admin, PullConsumer
from orbitmq.client.admin.transactions import PendingTransaction
from orbitmq.client.producer.transaction_producer import (
    AsyncTransactionProducer,
    LocalTransactionState,
    TransactionBatch,
    TransactionListener,
    transaction_id,
)
from orbitmq.config import TEST_MIN_STORE
from orbitmq.errors import BrokerError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.message import Message, MessageExt, PropertyKey
from orbitmq.testing.embedded import EmbeddedCluster
from orbitmq.transport import LoopThread, RemotingClient

WAIT_S = 20.0
# Every delay level 1 s: a consumer's retry comes back after 1 s instead of 10 s.
FAST_RETRY_STORE = dataclasses.replace(TEST_MIN_STORE, message_delay_level=" ".join(["1s"] * 18))
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}x{time.monotonic_ns() % 100_000}"


def wait_until(predicate: Callable[[], Any], timeout: float = WAIT_S, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.02)
    return value


def check_times(msg: MessageExt) -> int:
    return int(msg.properties.get(PropertyKey.TRANSACTION_CHECK_TIMES, "0"))


class Recorder(TransactionListener):
    """Answers with fixed (changeable) verdicts and records every call.

    ``on_execute`` may be an exception instance, raised by the local transaction.
    """

    def __init__(self, on_execute: Any = LocalTransactionState.COMMIT,
                 on_check: LocalTransactionState | None = LocalTransactionState.COMMIT) -> None:
        self.on_execute = on_execute
        self.on_check = on_check
        self.executed: list[str | None] = []
        self.checks: list[MessageExt] = []
        self.batch_checks: list[TransactionBatch] = []
        self._lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: object) -> Any:
        """The verdict is ``arg`` when one is given, else ``on_execute``."""
        with self._lock:
            self.executed.append(transaction_id(msg))
        if isinstance(self.on_execute, BaseException):
            raise self.on_execute
        return self.on_execute if arg is None else arg

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState | None:
        with self._lock:
            self.checks.append(msg)
            return self.on_check

    def checks_of(self, msg_id: str) -> list[MessageExt]:
        with self._lock:
            return [m for m in self.checks if m.msg_id == msg_id]

    # transaction batches: the same verdicts, recorded apart
    def execute_local_transaction_batch(self, batch: TransactionBatch, arg: object) -> Any:
        with self._lock:
            self.executed.append(batch.transaction_id)
        if isinstance(self.on_execute, BaseException):
            raise self.on_execute
        return self.on_execute if arg is None else arg

    def check_local_transaction_batch(self, batch: TransactionBatch) -> LocalTransactionState | None:
        with self._lock:
            self.batch_checks.append(batch)
            return self.on_check

    def batch_checks_of(self, tx_id: str) -> list[TransactionBatch]:
        with self._lock:
            return [b for b in self.batch_checks if b.transaction_id == tx_id]


class Env:
    """A running EmbeddedCluster plus an admin client, a pull consumer and a loop for raw
    requests and asyncio producers."""

    def __init__(self, root: Path, **broker_overrides: Any) -> None:
        broker_overrides.setdefault("store", FAST_RETRY_STORE)
        self.cluster = EmbeddedCluster(root, **broker_overrides).start()
        self.ns = self.cluster.namesrv
        self.admin = Admin(self.ns).start()
        self.puller = PullConsumer(unique("tx-audit"), self.ns).start()
        self.loop = LoopThread("tx-test")
        self.raw = RemotingClient()
        wait_until(lambda: self.cluster.namesrv_server.routes.cluster_info()[0], what="registration")

    @property
    def broker_addr(self) -> str:
        return str(self.cluster.brokers[0].address)

    def close(self) -> None:
        try:
            self.loop.call(self.raw.close())
            self.loop.stop()
            self.puller.shutdown()
            self.admin.shutdown()
        finally:
            self.cluster.stop()

    def create_topic(self, topic: str, queues: int = 2) -> str:
        self.admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
        wait_until(lambda: topic in self.cluster.namesrv_server.routes.topics(), what=topic)
        return topic

    def pending(self) -> dict[str, PendingTransaction]:
        return {t.msg_id: t for t in self.admin.list_transactions().transactions}

    def wait_resolved(self, *msg_ids: str, timeout: float = WAIT_S) -> None:
        wait_until(lambda: not set(msg_ids) & set(self.pending()), timeout,
                   f"transactions {msg_ids} to be resolved")

    def stored(self, topic: str) -> list[MessageExt]:
        """Every message stored in the topic's queues now (read up to each queue's max offset)."""
        out: list[MessageExt] = []
        for mq in self.puller.fetch_queues(topic):
            out.extend(self._read_queue(mq))
        return out

    def _read_queue(self, mq: MessageQueue) -> list[MessageExt]:
        end, offset, out = self.admin.max_offset(mq), 0, []
        while offset < end:
            result = self.puller.pull(mq, offset, max_nums=64)
            out.extend(result.messages)
            offset = result.next_begin_offset
        return out

    def end_transaction(self, fields: dict[str, str]) -> RemotingCommand:
        """END_TRANSACTION as a request that gets an answer (producers send it oneway)."""
        cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, dict(fields))
        return self.loop.call(self.raw.invoke(self.broker_addr, cmd, 5.0), 10)


class Watcher:
    """A consumer long-polling every queue of a topic on a thread, from the queues' current ends,
    keeping all it sees: what a subscriber of the real topic would be handed."""

    def __init__(self, env: Env, topic: str) -> None:
        self.seen: list[MessageExt] = []
        self._consumer = PullConsumer(unique("tx-watch"), env.ns).start()
        self._queues = {mq: env.admin.max_offset(mq) for mq in self._consumer.fetch_queues(topic)}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="tx-watcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for mq, offset in list(self._queues.items()):
                try:
                    result = self._consumer.pull(mq, offset, max_nums=32, suspend=0.2)
                except BrokerError:
                    continue
                with self._lock:
                    self.seen.extend(result.messages)
                self._queues[mq] = result.next_begin_offset

    def ids(self) -> list[str]:
        with self._lock:
            return [m.msg_id for m in self.seen]

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(10)
        assert not self._thread.is_alive(), "watcher did not stop"
        self._consumer.shutdown()
        return self.ids()


class HoldingProducer(AsyncTransactionProducer):
    """Keeps every END_TRANSACTION of its own sends instead of sending it: it is lost unless the
    test sends it later (check answers still go out)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.held: list[RemotingCommand] = []

    async def _send_end_transaction(self, addr: str, cmd: RemotingCommand) -> None:
        self.held.append(cmd)


class Child:
    """A ``python -m orbitmq.testing.tx_producer_child`` process; its stdout lines are collected
    on a thread so that every wait is bounded."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orbitmq.testing.tx_producer_child", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.strip())
                self._cond.notify_all()

    def wait_line(self, prefix: str, timeout: float = WAIT_S) -> str:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = next((ln for ln in self.lines if ln.startswith(prefix)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    err = self.proc.stderr.read() if self.proc.poll() is not None and self.proc.stderr else ""
                    raise AssertionError(f"no {prefix!r} line from child (rc={self.proc.poll()}): "
                                         f"{self.lines}\n{err}")
                self._cond.wait(min(left, 0.2))

    def kill(self) -> None:
        """kill -9: no END_TRANSACTION, no unregistering, no flushing."""
        self.proc.kill()
        self.proc.wait(10)

    def finish(self) -> int:
        """Close stdin (the checker's signal to stop) and wait for the exit code."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            return self.proc.wait(15)
        finally:
            self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(5)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()


def children() -> Iterator[list[Child]]:
    """A list the test appends its children to; all of them are killed at the end."""
    started: list[Child] = []
    try:
        yield started
    finally:
        for child in started:
            child.close()
