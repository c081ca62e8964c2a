"""Helpers shared by the store tests: small configs, messages, a settable clock, counting files."""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path
from typing import Any

from orbitmq.config import TEST_MIN_STORE, StoreConfig, StoreType
from orbitmq.protocol.stored import decode_stored_message
from orbitmq.store import GetMessageResult, MessageInner, MessageStore
from orbitmq.store.compact_consume_queue import CompactConsumeQueue
from orbitmq.store.consume_queue import CQ_ENTRY, CQ_ENTRY_SIZE, ConsumeQueue
from orbitmq.store.file_ops import OsFileOps, OsRegion
from orbitmq.store.mapped_consume_queue import MappedConsumeQueue
from orbitmq.store.mapped_file import segment_name

# What the store tests run under besides their own changes: conftest.py sets it for the
# modules it runs under both store types (the consume queue accesses).
STORE_TYPE_CHANGES: dict[str, Any] = {}
# store_type compact with a switch to mapped files after 10 entries and 4 open descriptors: a
# test's queues then meet both accesses, the switch and the cache's evictions.
COMPACT_CHANGES: dict[str, Any] = dict(
    store_type=StoreType.COMPACT, compact_queue_bytes_max=10 * 20, compact_queue_fds_max=4)


def config(tmp_path: Path, **changes: Any) -> StoreConfig:
    """TEST_MIN_STORE in ``tmp_path`` with small segments (64 KiB commit log, 50-entry queues)."""
    base: dict[str, Any] = dict(STORE_TYPE_CHANGES)
    base.update(
        store_path=str(tmp_path / "store"),
        mapped_file_size_commitlog=64 * 1024,
        mapped_file_size_consume_queue=50 * 20,
        max_hash_slot_num=128,
        max_index_num=1024,
    )
    base.update(changes)
    return dataclasses.replace(TEST_MIN_STORE, **base)


def mapped_queue(cq: ConsumeQueue) -> MappedConsumeQueue:
    """The mapped access of a queue (a compact one's once it has switched)."""
    mapped = cq.mapped if isinstance(cq, CompactConsumeQueue) else cq
    assert isinstance(mapped, MappedConsumeQueue), "the queue is still compact"
    return mapped


def rewrite_entry(store: MessageStore, topic: str, queue_id: int, index: int, *,
                  phy: int | None = None, size: int | None = None) -> None:
    """Damage entry ``index`` of a queue in its file (pwrite: a mapped queue sees it through
    the page cache as a compact one does), keeping the fields not given."""
    cq = store.consume_queue(topic, queue_id)
    found = cq.entry(index) if cq is not None else None
    assert found is not None
    file_size = store.config.mapped_file_size_consume_queue
    at = index * CQ_ENTRY_SIZE
    path = os.path.join(store.config.store_path, "consumequeue", topic, str(queue_id),
                        segment_name(at - at % file_size))
    entry = CQ_ENTRY.pack(found[0] if phy is None else phy, found[1] if size is None else size,
                          found[2])
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, entry, at % file_size)
    finally:
        os.close(fd)


def msg(topic: str = "T", queue_id: int = 0, body: bytes = b"body", **props: str) -> MessageInner:
    return MessageInner(topic, queue_id, body, dict(props))


def bodies(result: GetMessageResult) -> list[bytes]:
    return [decode_stored_message(b).body for b in result.buffers]


class Clock:
    """A wall clock in ms that moves only when told."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


class CountingRegion:
    """An OsRegion that counts syncs and can be slowed down."""

    def __init__(self, inner: OsRegion, owner: CountingFileOps) -> None:
        self._inner = inner
        self._owner = owner
        self.buf = inner.buf

    def sync(self, start: int, end: int) -> None:
        with self._owner.lock:
            self._owner.syncs += 1
        if self._owner.sync_delay_s:
            self._owner.release.wait(self._owner.sync_delay_s)
        self._inner.sync(start, end)

    def allocate(self, start: int, end: int) -> None:
        self._inner.allocate(start, end)

    def mark_dirty(self, start: int, end: int) -> None:
        self._inner.mark_dirty(start, end)

    def data_ranges(self, start: int, end: int) -> list[tuple[int, int]]:
        return self._inner.data_ranges(start, end)

    def close(self) -> bool:
        return self._inner.close()


class CountingFileOps(OsFileOps):
    """The real file system, with sync counting, slow syncs, a fake disk ratio, failing creation."""

    def __init__(self) -> None:
        self.syncs = 0
        self.lock = threading.Lock()
        self.sync_delay_s = 0.0
        self.release = threading.Event()
        self.disk_ratio = 0.1
        self.fail_create = False

    def open_region(self, path: str, size: int, *, create: bool,  # type: ignore[override]
                    sparse: bool = False, sync_dir: bool = True) -> CountingRegion:
        if create and self.fail_create:
            raise OSError(28, "No space left on device (simulated)")
        region = super().open_region(path, size, create=create, sparse=sparse, sync_dir=sync_dir)
        return CountingRegion(region, self)

    def disk_used_ratio(self, path: str) -> float:
        return self.disk_ratio
