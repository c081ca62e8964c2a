"""@idempotent listeners on SQLite and PostgreSQL: duplicates (also concurrent ones) applied once,
failures counted and parked, the business change sharing the status update's transaction, and
claims of dead consumers taken over after their lease."""

from __future__ import annotations

import threading
import time

import pytest

from orbitmq import ConsumeContext, ConsumeResult, MessageExt, MessageQueue
from orbitmq.reliable import ConsumeLog, ConsumeStatus, Database, Outcome, consume_once, idempotent


def _message(key: str, body: bytes = b"100", tags: str = "registered") -> MessageExt:
    return MessageExt("UserTopic", body, properties={"KEYS": key, "TAGS": tags,
                                                      "UNIQ_KEY": f"ID-{key}-{time.monotonic_ns()}"})


def _context() -> ConsumeContext:
    return ConsumeContext(MessageQueue("UserTopic", "broker-a", 0), "points-service")


def _points_table(db_url: str) -> None:
    with Database(db_url) as db, db.transaction() as h:
        h.execute("CREATE TABLE points (user_name TEXT PRIMARY KEY, balance INTEGER NOT NULL)")


def _balance(db_url: str, user: str) -> int | None:
    with Database(db_url) as db:
        row = db.handle().fetchone("SELECT balance FROM points WHERE user_name = ?", (user,))
    return None if row is None else int(row[0])


def _add_points(msg: MessageExt, tx) -> None:
    """The business change: credit the user named by the key (insert or add)."""
    user, amount = msg.keys[0], int(msg.body)
    if tx.execute("UPDATE points SET balance = balance + ? WHERE user_name = ?",
                  (amount, user)).rowcount == 0:
        tx.execute("INSERT INTO points (user_name, balance) VALUES (?, ?)", (user, amount))


def test_a_duplicate_of_a_done_message_is_acknowledged_without_running(db_url):
    _points_table(db_url)
    runs = []
    store = ConsumeLog(db_url)

    @idempotent(store)
    def on_registered(msg, tx):
        runs.append(msg.msg_id)
        _add_points(msg, tx)

    first, again = _message("ann"), _message("ann")  # a resend: same key, another message id
    assert on_registered([first], _context()) is ConsumeResult.SUCCESS
    assert on_registered([again], _context()) is ConsumeResult.SUCCESS
    assert on_registered([first], _context()) is ConsumeResult.SUCCESS
    assert len(runs) == 1 and _balance(db_url, "ann") == 100
    (record,) = store.records()
    assert (record.status, record.consume_times, record.version) == (ConsumeStatus.DONE, 1, 3)
    assert (record.consumer_group, record.topic, record.tags, record.keys) == (
        "points-service", "UserTopic", "registered", "ann")
    # another group, or another tag, is another consumption
    other = ConsumeContext(MessageQueue("UserTopic", "broker-a", 0), "audit-service")
    assert consume_once(store, first, other.group, _add_points) == Outcome.APPLIED
    assert _balance(db_url, "ann") == 200
    store.close()


def test_concurrent_duplicates_are_applied_once(db_url):
    _points_table(db_url)
    store = ConsumeLog(db_url)
    started = threading.Barrier(6)
    runs = []

    @idempotent(store)
    def on_registered(msg, tx):
        runs.append(1)
        _add_points(msg, tx)
        time.sleep(0.2)  # still running while the other deliveries arrive

    answers: list[ConsumeResult] = []

    def deliver() -> None:
        started.wait(10)
        answers.append(on_registered([_message("bob")], _context()))

    threads = [threading.Thread(target=deliver) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(runs) == 1
    assert answers.count(ConsumeResult.SUCCESS) >= 1
    # the ones told to come back later now find it done
    for _ in range(answers.count(ConsumeResult.RECONSUME_LATER)):
        assert on_registered([_message("bob")], _context()) is ConsumeResult.SUCCESS
    assert len(runs) == 1 and _balance(db_url, "bob") == 100
    store.close()


def test_failures_are_counted_then_parked_and_roll_back_the_business_change(db_url):
    _points_table(db_url)
    store = ConsumeLog(db_url)  # max_attempts=3
    runs = []

    @idempotent(store)
    def on_registered(msg, tx):
        runs.append(1)
        _add_points(msg, tx)  # written, then rolled back by the failure
        raise ValueError("points service misconfigured")

    msg = _message("cid")
    assert on_registered([msg], _context()) is ConsumeResult.RECONSUME_LATER
    (record,) = store.records()
    assert (record.status, record.consume_times) == (ConsumeStatus.FAILED, 1)
    assert record.last_error == "ValueError: points service misconfigured"
    assert on_registered([msg], _context()) is ConsumeResult.RECONSUME_LATER
    assert on_registered([msg], _context()) is ConsumeResult.SUCCESS  # parked: acknowledged
    assert on_registered([msg], _context()) is ConsumeResult.SUCCESS
    assert len(runs) == 3 and _balance(db_url, "cid") is None
    (record,) = store.records(ConsumeStatus.PARKED)
    assert record.consume_times == 3 and record.body == b"100"
    # an operator fixes the cause and retries: the next delivery runs the handler again
    assert store.reset(record.id) is not None
    assert consume_once(store, msg, "points-service", _add_points) == Outcome.APPLIED
    assert _balance(db_url, "cid") == 100
    store.close()


def test_a_claim_of_a_dead_consumer_is_taken_over_after_its_lease(db_url):
    _points_table(db_url)
    clock = [1000.0]
    store = ConsumeLog(db_url, processing_timeout=30, clock=lambda: clock[0])
    msg = _message("dan")
    dead = store.claim(msg, "points-service")  # a consumer that then died inside its handler
    assert consume_once(store, msg, "points-service", _add_points) == Outcome.RETRY
    clock[0] += 31
    assert consume_once(store, msg, "points-service", _add_points) == Outcome.APPLIED
    with store.database.transaction() as tx:  # the dead one cannot finish any more
        assert not store.complete(tx, dead)
    assert _balance(db_url, "dan") == 100
    store.close()


def test_a_consumer_that_keeps_dying_parks_its_message(tmp_path):
    clock = [1000.0]
    store = ConsumeLog(f"sqlite:///{tmp_path / 'c.db'}", processing_timeout=5, max_attempts=2,
                       clock=lambda: clock[0])
    msg = _message("eve")
    for _ in range(2):
        assert store.claim(msg, "g").result.value == "run"
        clock[0] += 6  # killed inside the handler; the lease runs out
    assert consume_once(store, msg, "g", _add_points) == Outcome.PARKED
    assert store.counts()[ConsumeStatus.PARKED] == 1
    store.close()


def test_a_failure_in_a_batch_acknowledges_the_messages_before_it(tmp_path):
    db_url = f"sqlite:///{tmp_path / 'b.db'}"
    _points_table(db_url)
    store = ConsumeLog(db_url, max_attempts=5)

    @idempotent(store, key=lambda m: m.body.decode())
    def handler(msg, tx):
        if msg.body == b"2":
            raise RuntimeError("bad")

    ctx = _context()
    batch = [_message("k", b"1"), _message("k", b"2"), _message("k", b"3")]
    assert handler(batch, ctx) is ConsumeResult.SUCCESS and ctx.ack_index == 0
    assert handler(batch[1:], _context()) is ConsumeResult.RECONSUME_LATER
    assert [r.keys for r in store.records(ConsumeStatus.DONE)] == ["1"]
    orderly = ConsumeContext(MessageQueue("UserTopic", "broker-a", 0), "points-service", orderly=True)
    assert handler(batch[1:], orderly) is ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
    store.close()


def test_bad_settings_are_refused(tmp_path):
    from orbitmq.errors import ClientError

    with pytest.raises(ClientError):
        ConsumeLog(f"sqlite:///{tmp_path / 'x.db'}", max_attempts=0)
