"""Under SYNC_FLUSH consumers are served only what is synced (BrokerController._read_bound):
a power cut takes what is not, and the offset of a message a consumer read could then hold
another one (the chaos run's ``power-all`` cluster saw a queue offset read with two values).
The store runs without its threads here, so that nothing syncs behind the test's back."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from orbitmq.broker.controller import BrokerController
from orbitmq.config import BrokerConfig, FlushDiskType
from orbitmq.config.store_config import TEST_MIN_STORE
from orbitmq.protocol.stored import decode_stored_message
from orbitmq.store import MessageInner


def _broker(tmp_path: Path, flush: FlushDiskType) -> BrokerController:
    store = dataclasses.replace(TEST_MIN_STORE, store_path=str(tmp_path), flush_disk_type=flush)
    broker = BrokerController(BrokerConfig(listen_port=0, grpc_listen_port=-1, store=store))
    broker.store.run_threads = False
    broker.store.start()
    return broker


def test_under_sync_flush_a_consumer_reads_a_message_once_it_is_synced(tmp_path: Path) -> None:
    broker = _broker(tmp_path, FlushDiskType.SYNC_FLUSH)
    store = broker.store
    told: list[int] = []
    store.add_flush_listener(told.append)
    try:
        put = store.put([MessageInner("T", 0, b"synced", {})])
        assert put.append is not None
        store.group_commit.run_once()
        store.put([MessageInner("T", 0, b"not yet", {})])
        assert store.dispatcher.dispatch_available()  # in its queue, not on the disk
        bound = broker.ctx.read_bound
        assert bound is not None
        end = put.append.wrote_offset + put.append.wrote_bytes
        assert bound() == end < store.max_physical_offset()
        got = store.get_message("g", "T", 0, 0, 32, max_physical_end=bound())
        assert [decode_stored_message(b).body for b in got.buffers] == [b"synced"]
        assert got.held_back_end == store.max_physical_offset()
        store.group_commit.run_once()  # the sync round
        assert told == [end, store.max_physical_offset()] and bound() == told[-1]
        got = store.get_message("g", "T", 0, 1, 32, max_physical_end=bound())
        assert [decode_stored_message(b).body for b in got.buffers] == [b"not yet"]
    finally:
        store.shutdown()


def test_under_async_flush_reads_have_no_bound(tmp_path: Path) -> None:
    broker = _broker(tmp_path, FlushDiskType.ASYNC_FLUSH)
    try:
        assert broker.ctx.read_bound is None  # pulls pay nothing for it
    finally:
        broker.store.shutdown()
