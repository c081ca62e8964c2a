"""Queues loaded on first use: a start finds the queues on disk and loads none of them; each is
loaded (and cut against the start's recovery, as the start once cut them all) when a put, a
dispatch, a read or retention first needs it. What the start skips must never show: offsets
continue, reads see what was stored, deletes and retention reach queues never loaded, and a
stale entry of a queue not loaded in one run is still dropped after the next crash."""

from __future__ import annotations

from pathlib import Path

from store_fixtures import bodies, config, msg

from orbitmq.store import MessageStore


def _crash(store: MessageStore) -> None:
    """The process "dies": the abort file stays, nothing is closed or checkpointed again."""
    store.dispatcher.shutdown()
    store._release_lock()


def _filled(tmp_path: Path, topics: int = 20, queues: int = 4) -> MessageStore:
    store = MessageStore(config(tmp_path))
    store.start()
    for t in range(topics):
        for q in range(queues):
            assert store.put([msg(f"T{t}", q, f"{t}-{q}-{i}".encode()) for i in range(2)]).ok
    assert store.wait_dispatched()
    store.flush_consume_queue.flush_and_checkpoint()
    return store


def test_a_start_loads_no_queue_and_each_is_loaded_when_first_used(tmp_path: Path) -> None:
    _crash(_filled(tmp_path))
    with MessageStore(config(tmp_path)) as store:
        assert not store.consume_queue_table and store.queue_count() == 80
        assert store.topics() == {f"T{t}" for t in range(20)}
        assert store.queue_ids("T3") == [0, 1, 2, 3]
        # a read loads its queue only
        assert bodies(store.get_message("g", "T3", 1, 0, 8)) == [b"3-1-0", b"3-1-1"]
        assert list(store.consume_queue_table) == [("T3", 1)]
        # a put to a queue not loaded continues its offsets (the commit log asks the store)
        result = store.put([msg("T5", 2, b"5-2-2")])
        assert result.append is not None and result.append.queue_offset == 2
        assert store.wait_dispatched()
        assert bodies(store.get_message("g", "T5", 2, 0, 8)) == [b"5-2-0", b"5-2-1", b"5-2-2"]
        assert store.get_max_offset_in_queue("T7", 0) == 2 and store.get_min_offset_in_queue(
            "T7", 0) == 0
        assert store.get_max_offset_in_queue("Nowhere", 0) == 0
        assert ("Nowhere", 0) not in store.consume_queue_table  # a miss loads and makes nothing
        # a delete reaches queues never loaded
        assert store.delete_topics(["T9"]) == 4
        assert "T9" not in store.topics() and store.queue_count() == 76
        assert not (Path(store.config.store_path) / "consumequeue" / "T9").exists()
        # the rest loads in bounded shares (the clean service's rounds)
        left = store.queue_count() - len(store.consume_queue_table)
        assert store.load_queues(10) == left - 10
        assert store.load_queues() == 0 and len(store.consume_queue_table) == 76


def test_a_stale_entry_of_a_queue_not_loaded_is_dropped_after_a_second_crash(
        tmp_path: Path) -> None:
    """Run 1 leaves queue "Stale" an entry for a message that never reached the log (what a power
    loss leaves). Run 2 never loads it, appends over the place that entry points at and
    checkpoints past it, then dies too. Run 3 must still drop it: a queue is checked against the
    log whenever it is loaded, not only past the cut."""
    store = _filled(tmp_path, topics=2, queues=1)
    assert store.put([msg("Stale", 0, b"kept")]).ok and store.wait_dispatched()
    end = store.commit_log.max_offset
    cq = store.consume_queue("Stale", 0)
    assert cq is not None and cq.put(end + 40, 200, 0, 1)  # the lost message's entry
    store.flush_consume_queue.flush_and_checkpoint()
    _crash(store)
    store = MessageStore(config(tmp_path))
    store.start()
    assert ("Stale", 0) not in store.consume_queue_table
    for _ in range(30):  # past end + 40, in other queues only
        assert store.put([msg("T0", 0, b"y" * 50)]).ok
    assert store.wait_dispatched()
    store.flush_consume_queue.flush_and_checkpoint()
    assert store.recovery_report is not None
    _crash(store)
    with MessageStore(config(tmp_path)) as again:
        assert bodies(again.get_message("g", "Stale", 0, 0, 8)) == [b"kept"]
        assert again.get_max_offset_in_queue("Stale", 0) == 1
        result = again.put([msg("Stale", 0, b"next")])
        assert result.append is not None and result.append.queue_offset == 1
