"""Bulk: 200,000 messages of mixed sizes over several topics and queues, small segments.

Every message is read back by queue offset with body and properties intact, again after a clean
restart, and found by key and by UNIQ_KEY.
"""

from __future__ import annotations

import random
from pathlib import Path

from orbitmq.config import StoreConfig
from orbitmq.protocol.stored import iter_stored_messages
from orbitmq.store import GetMessageStatus, MessageInner, MessageStore

TOTAL = 200_000
TOPICS = ("bulk-orders", "bulk-payments", "bulk-audit")
QUEUES = 4
SIZES = (0, 1, 16, 100, 256, 700, 1500, 4000)


def _message(i: int) -> MessageInner:
    rng = random.Random(i)
    size = rng.choice(SIZES)
    props = {"UNIQ_KEY": f"UNIQ{i:010d}", "KEYS": f"key-{i}", "TAGS": f"tag{i % 5}"}
    body = i.to_bytes(4, "big") * (size // 4) + bytes(size % 4)
    return MessageInner(TOPICS[i % 3], (i // 3) % QUEUES, body, props)


def _read_all(store: MessageStore) -> int:
    seen = 0
    for topic in TOPICS:
        for q in range(QUEUES):
            offset = 0
            max_offset = store.get_max_offset_in_queue(topic, q)
            while offset < max_offset:
                r = store.get_message("g", topic, q, offset, 32)
                assert r.status is GetMessageStatus.FOUND, (topic, q, offset, r.status)
                for m in iter_stored_messages(b"".join(r.buffers)):
                    i = int(m.properties["UNIQ_KEY"][4:])
                    want = _message(i)
                    assert (m.topic, m.queue_id, m.queue_offset) == (topic, q, offset)
                    assert m.body == want.body and m.properties == want.properties
                    offset += 1
                    seen += 1
    return seen


def test_bulk_write_read_restart_and_query(tmp_path: Path) -> None:
    cfg = StoreConfig(
        store_path=str(tmp_path / "store"),
        mapped_file_size_commitlog=4 * 1024 * 1024,
        mapped_file_size_consume_queue=20 * 20_000,
        max_hash_slot_num=50_000,
        max_index_num=200_000,
        disk_max_used_space_ratio=1.0,  # the host's disk use must not delete segments here
        disk_space_clean_forcibly_ratio=1.0,
    )
    with MessageStore(cfg) as store:
        for i in range(0, TOTAL, 50):
            batch_topic = i % 100 == 0
            if batch_topic:  # some puts as batches (same topic and queue)
                first = _message(i)
                batch = [m for m in (_message(j) for j in range(i, i + 50))
                         if (m.topic, m.queue_id) == (first.topic, first.queue_id)]
                rest = [m for m in (_message(j) for j in range(i, i + 50))
                        if (m.topic, m.queue_id) != (first.topic, first.queue_id)]
                assert store.put(batch).ok
                for m in rest:
                    assert store.put([m]).ok
            else:
                for j in range(i, i + 50):
                    assert store.put([_message(j)]).ok
        assert store.wait_dispatched(60)
        assert len(store.commit_log.mfq.files) > 10
        assert _read_all(store) == TOTAL
    with MessageStore(cfg) as store:
        report = store.recovery_report
        assert report is not None and report.last_exit_ok and report.truncated_from is None
        assert _read_all(store) == TOTAL
        for i in random.Random(7).sample(range(TOTAL), 50):
            want = _message(i)
            by_key = store.query_message(want.topic, f"key-{i}", 4)
            assert [m.body for m in by_key] == [want.body]
            by_uniq = store.query_message(want.topic, f"UNIQ{i:010d}", 4)
            assert [m.properties for m in by_uniq] == [want.properties]
