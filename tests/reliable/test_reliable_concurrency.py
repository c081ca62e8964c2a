"""4 relays and 3 consumers over 10,000 messages on PostgreSQL: every effect applied exactly once
(checked in the database), no row sent twice."""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter

from reliable_support import create_topic, outbox_ids, read_topic, wait_until

from orbitmq import ConsumeFrom, MessageExt, PushConsumer
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

ROWS = 10_000
KEYS = 500


def _credit(msg: MessageExt, tx: SqlHandle) -> None:
    tx.execute("INSERT INTO effects (msg_key, n) VALUES (?, 1) ON CONFLICT (msg_key) DO UPDATE "
               "SET n = effects.n + 1", (msg.keys[0],))


def test_four_relays_three_consumers_ten_thousand_messages(pg_url, cluster):
    topic, group = f"Bulk-{uuid.uuid4().hex[:8]}", f"bulk-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.namesrv, topic, queues=8)
    outbox = Outbox()
    with Database(pg_url) as db:
        with db.transaction() as h:
            outbox.create_table(h)
            h.execute("CREATE TABLE effects (msg_key TEXT PRIMARY KEY, n INTEGER NOT NULL)")
        with db.transaction() as h:  # a business key per message, 500 order keys
            h.executemany(
                'INSERT INTO orbitmq_outbox (topic, tags, "keys", order_key, body, properties, '
                "status, attempts, created_at, next_attempt_at) VALUES (?, 'bulk', ?, ?, ?, '{}', "
                "0, 0, 0, 0)",
                [(topic, f"m{i}", f"k{i % KEYS}", b"+1") for i in range(ROWS)])
    logs = [ConsumeLog(pg_url) for _ in range(3)]
    consumers = [PushConsumer(group, namesrv=cluster.namesrv, consume_from=ConsumeFrom.FIRST,
                              rebalance_interval_ms=1000, consume_thread_nums=8) for _ in range(3)]
    for consumer, log in zip(consumers, logs, strict=True):
        consumer.subscribe(topic, "*", idempotent(log)(_credit))
        consumer.start()
    config = RelayConfig(poll_interval=0.05, batch_size_max=200, send_timeout=5, lease=20)
    relays = [OutboxRelay(pg_url, namesrv=cluster.namesrv, config=dataclasses.replace(config))
              for _ in range(4)]
    try:
        for relay in relays:
            relay.start()

        def effects_done() -> bool:
            with Database(pg_url) as db:
                return db.handle().fetchone("SELECT COUNT(*) FROM effects")[0] == ROWS

        wait_until(effects_done, 100, "every effect applied")
    finally:
        for relay in relays:
            relay.stop()
        for consumer in consumers:
            consumer.shutdown()
    assert sum(r.sent_total for r in relays) == ROWS
    assert sum(1 for r in relays if r.sent_total) >= 2
    with Database(pg_url) as db:
        assert outbox.counts(db.handle())[OutboxStatus.SENT] == ROWS
        assert db.handle().fetchall("SELECT n, COUNT(*) FROM effects GROUP BY n") == [(1, ROWS)]
    assert logs[0].counts()[ConsumeStatus.DONE] == ROWS
    sent = Counter(outbox_ids(read_topic(cluster, topic)))
    assert len(sent) == ROWS and set(sent.values()) == {1}  # no row went out twice
    for log in logs:
        log.close()
