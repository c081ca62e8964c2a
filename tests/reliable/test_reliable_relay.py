"""The outbox relay against a real embedded cluster, on SQLite and PostgreSQL: delivery in key
order, a broker that is down while the business commits, several relays, transactional sends."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid
from collections import defaultdict

from reliable_support import create_topic, outbox_ids, read_topic, wait_until

from orbitmq import Message, MessageExt
from orbitmq.client.producer.transaction_state import LocalTransactionState
from orbitmq.config import TEST_MIN_STORE
from orbitmq.reliable import (
    AsyncOutboxRelay,
    Database,
    Outbox,
    OutboxRelay,
    OutboxStatus,
    OutboxTransactionListener,
    RelayConfig,
)
from orbitmq.testing import EmbeddedCluster

FAST = RelayConfig(poll_interval=0.05, lease=10.0, backoff_base=0.1, backoff_max=0.5,
                   send_timeout=4.0, batch_size_max=50)
PRODUCER = {"send_timeout": 2.0, "unreachable_broker_backoff": 0.0}


def _topic() -> str:
    return f"Outbox-{uuid.uuid4().hex[:10]}"


def _fill(db_url: str, topic: str, rows: int, keys: int, unkeyed_every: int = 0) -> Outbox:
    outbox = Outbox()
    with Database(db_url) as db, db.transaction() as h:
        outbox.create_table(h)
        for i in range(rows):
            key = None if unkeyed_every and i % unkeyed_every == 0 else f"key-{i % keys}"
            outbox.add(h, Message(topic, f"{i}".encode(), tags="t", keys=key))
    return outbox


def _all_sent(db_url: str, outbox: Outbox, rows: int) -> bool:
    with Database(db_url) as db:
        return outbox.counts(db.handle())[OutboxStatus.SENT] == rows


def _check_delivery(messages: list[MessageExt], rows: int, *, exactly_once: bool,
                    one_queue: bool = True) -> None:
    """Every row arrived (once, if asked); a key's messages share one queue (unless sent as
    transactions, which take no queue selector) and were stored in id order."""
    ids = outbox_ids(messages)
    assert set(ids) == set(range(1, rows + 1))
    if exactly_once:
        assert len(ids) == rows, "a row was sent twice"
    by_key: dict[str, list[MessageExt]] = defaultdict(list)
    for m in messages:
        if m.keys:
            by_key[m.keys[0]].append(m)
    for key, msgs in by_key.items():
        assert not one_queue or len({m.queue_id for m in msgs}) == 1, f"{key} spread over queues"
        in_queue = [int(m.properties["ORBITMQ_OUTBOX_ID"])
                    for m in sorted(msgs, key=lambda m: m.commit_log_offset)]
        firsts = list(dict.fromkeys(in_queue))  # a duplicate resend may repeat an id
        assert firsts == sorted(firsts), f"{key} out of order: {in_queue}"


def test_relay_sends_rows_in_key_order(db_url, cluster):
    topic = _topic()
    create_topic(cluster.namesrv, topic)
    outbox = _fill(db_url, topic, rows=120, keys=6, unkeyed_every=10)
    with OutboxRelay(db_url, namesrv=cluster.namesrv, config=FAST, **PRODUCER) as relay:
        wait_until(lambda: _all_sent(db_url, outbox, 120), 30, "all rows sent")
    assert relay.sent_total == 120 and relay.failed_total == 0
    _check_delivery(read_topic(cluster, topic), 120, exactly_once=True)
    with Database(db_url) as db:
        row = outbox.get(db.handle(), 7)
        assert row is not None and row.msg_id and row.sent_at and row.attempts == 1


def _after_barrier(run_once, barrier: threading.Barrier):
    """``run_once`` whose first call first waits for every party of ``barrier``."""
    first = [True]

    def gated() -> int:
        if first[0]:
            first[0] = False
            barrier.wait()
        return run_once()

    return gated


def test_several_relays_never_send_a_row_twice(db_url, cluster):
    topic = _topic()
    create_topic(cluster.namesrv, topic)
    rows = 600
    outbox = _fill(db_url, topic, rows=rows, keys=40)
    relays = [OutboxRelay(db_url, namesrv=cluster.namesrv, config=dataclasses.replace(
        FAST, batch_size_max=20), **PRODUCER) for _ in range(3)]
    # Each relay's first round waits until all three are at it, so they really contend (on a
    # loaded machine one thread could otherwise send all 600 rows before the others ran at all).
    start_together = threading.Barrier(len(relays), timeout=30)
    for relay in relays:
        relay.run_once = _after_barrier(relay.run_once, start_together)  # type: ignore[method-assign]
        relay.start()
    try:
        wait_until(lambda: _all_sent(db_url, outbox, rows), 60, "all rows sent")
    finally:
        for r in relays:
            r.stop()
    assert sum(r.sent_total for r in relays) == rows
    assert sum(1 for r in relays if r.sent_total > 0) >= 2, [r.sent_total for r in relays]
    _check_delivery(read_topic(cluster, topic), rows, exactly_once=True)


def test_broker_down_while_the_business_commits(db_url, tmp_path):
    store = dataclasses.replace(TEST_MIN_STORE, mapped_file_size_commitlog=8 * 1024 * 1024)
    with EmbeddedCluster(tmp_path / "cluster", store=store) as cluster:
        topic = _topic()
        create_topic(cluster.namesrv, topic)
        outbox = _fill(db_url, topic, rows=0, keys=1)
        with OutboxRelay(db_url, namesrv=cluster.namesrv, config=FAST, **PRODUCER) as relay:
            cluster.stop_broker(0)
            with Database(db_url) as db, db.transaction() as h:  # the business commits anyway
                for i in range(40):
                    outbox.add(h, Message(topic, f"{i}".encode(), keys=f"user-{i % 4}"))
            relay.wake()

            def tried_and_failed() -> bool:
                with Database(db_url) as db:
                    head = outbox.get(db.handle(), 1)
                    return head is not None and head.attempts >= 2 and bool(head.last_error)

            wait_until(tried_and_failed, 30, "failed attempts while the broker is down")
            with Database(db_url) as db:
                assert outbox.counts(db.handle())[OutboxStatus.SENT] == 0
            assert relay.failed_total >= 2 and relay.sent_total == 0
            cluster.start_broker(0)
            wait_until(lambda: _all_sent(db_url, outbox, 40), 60, "delivery after the broker came back")
        _check_delivery(read_topic(cluster, topic), 40, exactly_once=False)


def test_transactional_relay_commits_through_the_outbox(db_url, cluster):
    topic = _topic()
    create_topic(cluster.namesrv, topic)
    outbox = _fill(db_url, topic, rows=30, keys=3)
    with OutboxRelay(db_url, namesrv=cluster.namesrv, group="outbox-tx-relay", transactional=True,
                     config=FAST, **PRODUCER):
        wait_until(lambda: _all_sent(db_url, outbox, 30), 30, "all rows sent")
    wait_until(lambda: len(read_topic(cluster, topic)) == 30, 15, "committed messages visible")
    messages = read_topic(cluster, topic)
    _check_delivery(messages, 30, exactly_once=True, one_queue=False)
    with Database(db_url) as db:
        for m in messages:  # the row records the transaction that delivered it
            row = outbox.get(db.handle(), int(m.properties["ORBITMQ_OUTBOX_ID"]))
            assert row is not None and row.msg_id == m.uniq_key


def test_transaction_checks_are_answered_from_the_table(db_url):
    outbox = Outbox()
    with Database(db_url) as db:
        with db.transaction() as h:
            outbox.create_table(h)
            sent_id = outbox.add(h, Message("T", b"a", keys="k"))
            pending_id = outbox.add(h, Message("T", b"b", keys="k2"))
        with db.transaction() as h:
            outbox.claim(h, "relay", 10, 10_000)
            outbox.mark_sent(h, "relay", [(sent_id, "TX-1")])
        listener = OutboxTransactionListener(db, outbox)

        def check(row_id: int | None, txid: str) -> LocalTransactionState:
            props = {"UNIQ_KEY": txid}
            if row_id is not None:
                props["ORBITMQ_OUTBOX_ID"] = str(row_id)
            return listener.check_local_transaction(MessageExt("T", b"x", properties=props))

        assert check(sent_id, "TX-1") is LocalTransactionState.COMMIT
        assert check(sent_id, "TX-OLD") is LocalTransactionState.ROLLBACK  # sent by another try
        assert check(pending_id, "TX-2") is LocalTransactionState.UNKNOWN  # its relay may be at it
        assert check(999, "TX-3") is LocalTransactionState.ROLLBACK
        assert check(None, "TX-4") is LocalTransactionState.ROLLBACK


def test_async_relay(tmp_path, cluster):
    db_url = f"sqlite:///{tmp_path / 'async.db'}"
    topic = _topic()
    create_topic(cluster.namesrv, topic)
    outbox = _fill(db_url, topic, rows=10, keys=2)

    async def main() -> None:
        async with AsyncOutboxRelay(db_url, namesrv=cluster.namesrv, config=FAST, **PRODUCER) as r:
            r.wake()
            for _ in range(300):
                if _all_sent(db_url, outbox, 10):
                    return
                await asyncio.sleep(0.05)
            raise AssertionError("async relay did not send every row in 15 s")

    asyncio.run(main())
    _check_delivery(read_topic(cluster, topic), 10, exactly_once=True)
