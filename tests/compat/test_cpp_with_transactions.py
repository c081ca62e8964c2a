"""The official C++ client keeps working for normal sends and pulls while transactions run.

A Python TransactionProducer commits, rolls back and leaves transactions for the broker to check
(checked every 0.3 s here), on a thread, while the C++ client sends single messages and a batch
through cpp_driver.py's scenarios; then the C++ client reads back exactly its own messages, and,
from the transactional topic, exactly the committed transactional messages: no rolled back one,
no half message, each once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from compat_support import CppClient, RawClient, Servers, tail, unique, wait_for_default_route
from test_cpp_client import assert_exactly, cpp_pull, sent_ok, spec, wait_route, wait_stored

from orbitmq import Admin, LocalTransactionState, Message, TransactionListener, TransactionProducer
from orbitmq.protocol.message import MessageExt
from orbitmq.testing import standalone_process

pytestmark = pytest.mark.compat

TRANSACTIONS = 45
VERDICTS = (LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.UNKNOWN)
WAIT_S = 30.0


@pytest.fixture(scope="module")
def servers(compat_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """Like conftest's, with transaction checks every 0.3 s for half messages older than 0.5 s."""
    proc = standalone_process(str(tmp_path_factory.mktemp("orbitmq-store")),
                              "--transaction-timeout-ms", "500",
                              "--transaction-check-interval-ms", "300")
    try:
        addrs = proc.wait_ready("namesrv", "broker", timeout=60)
        found = Servers(addrs["namesrv"], addrs["broker"], proc.output)
        wait_for_default_route(found)
        yield found
    finally:
        proc.stop()
        if proc.proc.stdout is not None:
            proc.proc.stdout.close()


class Orders(TransactionListener):
    """Verdicts by the body's prefix; an "unknown" transaction is committed when checked."""

    def execute_local_transaction(self, msg: Message, arg: object) -> Any:
        return arg

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.COMMIT if msg.body.startswith(b"UNKNOWN") else (
            LocalTransactionState.ROLLBACK)


class TransactionLoad(threading.Thread):
    """Sends TRANSACTIONS transactions, cycling through the verdicts, then stays up to answer
    the broker's checks until ``release`` is set."""

    def __init__(self, namesrv: str, topic: str) -> None:
        super().__init__(name="tx-load", daemon=True)
        self.namesrv, self.topic = namesrv, topic
        self.committed: list[bytes] = []
        self.rolled_back: list[bytes] = []
        self.error: BaseException | None = None
        self.started_sending = threading.Event()
        self.sent_all = threading.Event()
        self.release = threading.Event()

    def run(self) -> None:
        try:
            with TransactionProducer(unique("CompatTxProducer"), self.namesrv,
                                     listener=Orders()) as producer:
                for i in range(TRANSACTIONS):
                    verdict = VERDICTS[i % 3]
                    body = f"{verdict.name}-{i}".encode()
                    producer.send_in_transaction(Message(self.topic, body, tags="tx"), verdict)
                    self.started_sending.set()
                    (self.rolled_back if verdict is LocalTransactionState.ROLLBACK
                     else self.committed).append(body)
                self.sent_all.set()
                self.release.wait(WAIT_S)
        except BaseException as e:  # reported by the test
            self.error = e
        finally:
            self.started_sending.set()
            self.sent_all.set()


def test_cpp_sends_and_pulls_while_transactions_run(cpp: CppClient, raw: RawClient,
                                                    servers: Servers) -> None:
    tx_topic, topic = unique("CompatTx"), unique("CompatBeside")
    load = TransactionLoad(servers.namesrv, tx_topic)
    load.start()
    assert load.started_sending.wait(WAIT_S) and load.error is None, load.error
    singles = [spec(topic, i) for i in range(8)]
    sent_ok(cpp.run("send_sync", group=unique("CompatProducer"), messages=singles), 8)
    batch = [spec(topic, i, prefix="batch") for i in range(4)]
    sent_ok(cpp.run("send_batch", group=unique("CompatProducer"), batches=[batch]), 1)
    try:
        assert load.sent_all.wait(WAIT_S) and load.error is None, load.error
        wait_stored(raw, topic, 12)
        assert_exactly(cpp_pull(cpp, topic), singles + batch)
        with Admin(servers.namesrv) as admin:
            _wait_resolved(admin, tx_topic, servers)
    finally:
        load.release.set()
        load.join(WAIT_S)
    assert not load.is_alive() and load.error is None, load.error
    wait_route(raw, tx_topic)
    wait_stored(raw, tx_topic, len(load.committed))
    got = cpp_pull(cpp, tx_topic)
    assert sorted(m.body for m in got) == sorted(load.committed)  # each once, no rollback
    assert all(m.tags == "tx" and "REAL_TOPIC" not in m.properties for m in got)


def _wait_resolved(admin: Admin, topic: str, servers: Servers) -> None:
    deadline = time.monotonic() + WAIT_S
    while any(t.topic == topic for t in admin.list_transactions().transactions):
        if time.monotonic() > deadline:
            raise AssertionError(f"transactions of {topic} still pending:\n{tail(servers.output())}")
        time.sleep(0.05)
