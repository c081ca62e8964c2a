"""Finding messages by KEYS and UNIQ_KEY through the index, across restarts and time ranges."""

from __future__ import annotations

from pathlib import Path

from store_fixtures import Clock, config, msg

from orbitmq.protocol.stored import decode_stored_message
from orbitmq.store import MessageStore


def test_query_by_key_and_uniq_key(tmp_path: Path) -> None:
    clock = Clock()
    start = clock.now_ms
    cfg = config(tmp_path)
    with MessageStore(cfg, clock=clock) as store:
        for i in range(600):  # several index files (1024 entries each, two keys per message)
            store.put([msg("K", i % 4, b"%d" % i, KEYS=f"order-{i % 300} all", UNIQ_KEY=f"U{i:06d}")])
            clock.advance(10)
        store.put([msg("Other", 0, b"other", KEYS="order-1")])
        assert store.wait_dispatched()
        assert len(store.index.files) > 1  # type: ignore[union-attr]
        assert sorted(m.body for m in store.query_message("K", "order-1", 10)) == [b"1", b"301"]
        assert [m.body for m in store.query_message("K", "U000042", 10)] == [b"42"]
        assert [m.body for m in store.query_message("Other", "order-1", 10)] == [b"other"]
        assert store.query_message("K", "missing", 10) == []
        assert len(store.query_message("K", "all", 32)) == 32
        window = store.query_message("K", "all", 1000, start + 5000, start + 5990)
        got = {int(m.body) for m in window}  # index times are whole seconds past a file start
        assert set(range(560, 590)) <= got <= set(range(400, 700))
        raw = store.query_message_raw("K", "U000007", 4)
        assert decode_stored_message(raw.buffers[0]).body == b"7"
        assert raw.index_last_update_phy_offset > 0
    with MessageStore(cfg, clock=clock) as store:
        assert [m.body for m in store.query_message("K", "U000599", 10)] == [b"599"]


def test_a_key_is_found_behind_colliding_keys(tmp_path: Path) -> None:
    """"Aa" and "BB" have one Java hash, so the index answers one for the other: a query still
    finds its own key's messages however many newer colliding entries come first."""
    with MessageStore(config(tmp_path)) as store:
        store.put([msg("K", 0, b"aa", KEYS="Aa")])
        for i in range(10):
            store.put([msg("K", 0, b"bb%d" % i, KEYS="BB")])
        assert store.wait_dispatched()
        assert [m.body for m in store.query_message("K", "Aa", 1)] == [b"aa"]
        assert len(store.query_message("K", "BB", 3)) == 3
