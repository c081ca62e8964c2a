"""A transactional producer in a child process whose local database is SQLite, for crash tests.

    python -m orbitmq.testing.tx_producer_child execute NAMESRV GROUP DB TOPIC KEY commit|fail
    python -m orbitmq.testing.tx_producer_child check NAMESRV GROUP DB TOPIC
    python -m orbitmq.testing.tx_producer_child execute-batch NAMESRV GROUP DB TOPIC KEY commit|fail

``execute`` sends one transactional message (keys=[KEY]); its local transaction inserts the order
row ``(tx_id, KEY)`` into DB and commits it (``commit``) or fails and rolls the SQLite transaction
back (``fail``). Either way it then prints ``local-done TX_ID`` and blocks before returning its
verdict, i.e. before END_TRANSACTION: the test kills it with SIGKILL there.

``execute-batch`` does the same for a transaction batch of three messages (keys KEY-0, KEY-1,
KEY-2; bodies ``order KEY-i``): its local transaction inserts ``(batch tx_id, KEY)``.

``check`` starts a producer of the same group that only answers the broker's checks (of single
transactions and of batches), from DB: a row for the transaction -> COMMIT, none -> ROLLBACK. It prints ``ready`` once it heartbeats the
brokers of TOPIC, then ``checked TX_ID STATE`` per check, and exits when its stdin closes.

Output lines are flushed one by one; nothing else goes to stdout (logs go to stderr).
"""

from __future__ import annotations

import logging
import sqlite3
import sys
import threading

from orbitmq.client import (
    LocalTransactionState,
    TransactionBatch,
    TransactionListener,
    TransactionProducer,
    transaction_id,
)
from orbitmq.protocol.message import Message, MessageExt

__all__ = ["OrderDatabase", "main"]

HEARTBEAT_INTERVAL_S = 0.5


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class OrderDatabase:
    """The producer's local database: one table of orders keyed by transaction id."""

    def __init__(self, path: str) -> None:
        self.path = path
        with self._connect() as db:
            db.execute("CREATE TABLE IF NOT EXISTS orders (tx_id TEXT PRIMARY KEY, order_key TEXT)")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=10)

    def place(self, tx_id: str, key: str, *, fail: bool) -> None:
        """The local transaction: insert the order and commit, or fail and roll it back."""
        db = self._connect()
        try:
            db.execute("INSERT INTO orders VALUES (?, ?)", (tx_id, key))
            if fail:
                raise RuntimeError("payment declined")
            db.commit()
        except RuntimeError:
            db.rollback()
        finally:
            db.close()

    def has(self, tx_id: str) -> bool:
        db = self._connect()
        try:
            return db.execute("SELECT 1 FROM orders WHERE tx_id = ?", (tx_id,)).fetchone() is not None
        finally:
            db.close()


class _Executor(TransactionListener):
    def __init__(self, db: OrderDatabase, fail: bool) -> None:
        self.db = db
        self.fail = fail

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        tx_id = transaction_id(msg)
        assert tx_id is not None
        self.db.place(tx_id, str(arg), fail=self.fail)
        say(f"local-done {tx_id}")
        threading.Event().wait()  # the test kills us here, before END_TRANSACTION
        raise AssertionError("unreachable")

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN  # this process dies before any check

    def execute_local_transaction_batch(self, batch: TransactionBatch,
                                        arg: object) -> LocalTransactionState:
        self.db.place(batch.transaction_id, str(arg), fail=self.fail)
        say(f"local-done {batch.transaction_id}")
        threading.Event().wait()  # the test kills us here, before END_TRANSACTION_BATCH
        raise AssertionError("unreachable")


class _Checker(TransactionListener):
    def __init__(self, db: OrderDatabase) -> None:
        self.db = db

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        raise AssertionError("the checker sends nothing")

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return self._verdict(transaction_id(msg) or "")

    def check_local_transaction_batch(self, batch: TransactionBatch) -> LocalTransactionState:
        return self._verdict(batch.transaction_id)

    def _verdict(self, tx_id: str) -> LocalTransactionState:
        state = LocalTransactionState.COMMIT if self.db.has(tx_id) else LocalTransactionState.ROLLBACK
        say(f"checked {tx_id} {state.name}")
        return state


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    mode, namesrv, group, db_path, topic = argv[:5]
    db = OrderDatabase(db_path)
    if mode == "execute":
        key, outcome = argv[5], argv[6]
        listener: TransactionListener = _Executor(db, fail=outcome == "fail")
        with TransactionProducer(group, namesrv, listener=listener) as producer:
            producer.send_in_transaction(Message(topic, f"order {key}".encode(), keys=[key]), key)
        return 1  # never reached: killed inside the local transaction
    if mode == "execute-batch":
        key, outcome = argv[5], argv[6]
        with TransactionProducer(group, namesrv, listener=_Executor(db, outcome == "fail")) as tp:
            tp.send_batch_in_transaction(
                [Message(topic, f"order {key}-{i}".encode(), keys=[f"{key}-{i}"]) for i in range(3)],
                key)
        return 1  # never reached: killed inside the local transaction
    if mode == "check":
        with TransactionProducer(group, namesrv, listener=_Checker(db), topics=[topic],
                                 heartbeat_broker_interval=HEARTBEAT_INTERVAL_S):
            say("ready")
            sys.stdin.read()  # until the test closes our stdin
        return 0
    sys.stderr.write(f"unknown mode {mode!r}\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
