"""What keeps a SYNC_FLUSH send to one round trip plus one small fdatasync:

- the segment being written is mapped with MADV_RANDOM (flush.SmallFolios), so that its page
  cache stays in 4 KiB pages and a sync writes what was written, not a 2 MiB folio (a 1 KiB
  send + fdatasync wrote 2,053 KiB once the segment held 100 MB: bench/journal/PROFILE.md); a
  segment the writer has left is mapped for readahead again; the segment being written holds a
  descriptor for its syncs (no open and close per sync), the others none;
- ``DurableSave.sync_alone``: a lone producer's save is synced in the caller's thread and its
  status known at once (no group future, no timer), only when it is the iteration's only append
  and the last iteration had one at most; with more, the iteration's appends share one sync.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_fixtures import config, msg

from orbitmq.broker.durable_save import DurableSave, durability_conditions
from orbitmq.config import BrokerConfig, FlushDiskType
from orbitmq.store import MessageStore, PutMessageStatus, flush


def _vm_flags(path: str) -> set[str] | None:
    """The VmFlags of this process's mapping of ``path`` (/proc/self/smaps), None if unmapped."""
    flags, inside = None, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if len(head) >= 5 and "-" in head[0] and not line.startswith("VmFlags"):
                inside = line.rstrip("\n").endswith(path)
            elif inside and line.startswith("VmFlags:"):
                flags = set(line.split()[1:])
    return flags


def _open_descriptors(path: str) -> int:
    """How many of this process's descriptors name ``path``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == path
        except OSError:  # closed meanwhile (the listing's own descriptor)
            pass
    return count


def _sync_store(tmp_path: Path, flush: FlushDiskType = FlushDiskType.SYNC_FLUSH) -> MessageStore:
    return MessageStore(config(tmp_path, flush_disk_type=flush), run_threads=False)


def _put_synced(store: MessageStore, body: bytes) -> None:
    result = store.put([msg("T", 0, body)])
    assert result.append is not None
    synced = store.durable_up_to(result.append.end_offset)
    store.wake()
    assert synced.result(timeout=30)


def test_the_segment_being_written_is_mapped_for_random_access_under_sync_flush(
        tmp_path: Path) -> None:
    with _sync_store(tmp_path) as store:
        _put_synced(store, b"x" * 1000)
        first = store.commit_log.mfq.files[-1]
        assert "rr" in (_vm_flags(first.path) or set()), "no MADV_RANDOM on the written segment"
        held = _open_descriptors(first.path)  # the mapping's own (CPython dups one) + the held
        while len(store.commit_log.mfq.files) == 1:  # 64 KiB segments: roll to a second one
            _put_synced(store, b"y" * 1000)
        second = store.commit_log.mfq.files[-1]
        assert "rr" in (_vm_flags(second.path) or set())
        assert "rr" not in (_vm_flags(first.path) or set()), "a left segment keeps readahead"
        assert _open_descriptors(first.path) == held - 1, "a left segment holds no descriptor"
        assert _open_descriptors(second.path) == held
    assert _open_descriptors(second.path) == 0  # closed with the store


def test_async_flush_leaves_the_mapping_alone(tmp_path: Path) -> None:
    with _sync_store(tmp_path, FlushDiskType.ASYNC_FLUSH) as store:
        store.put([msg("T", 0, b"x" * 1000)])
        store.run_services_once()
        flags = _vm_flags(store.commit_log.mfq.files[-1].path)
        assert flags is not None and "rr" not in flags


@pytest.fixture
def sync_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MessageStore]:
    # A shared disk may take over INLINE_SYNC_MAX_S for a sync (the loop then leaves the rounds
    # to the group commit thread): these tests are about the rule, not about this disk.
    monkeypatch.setattr(flush, "INLINE_SYNC_MAX_S", 3600.0)
    with _sync_store(tmp_path) as s:
        yield s


def _saver(store: MessageStore) -> DurableSave:
    return DurableSave(store, durability_conditions(BrokerConfig(), store))


def test_a_lone_save_is_synced_at_once(sync_store: MessageStore) -> None:
    async def go() -> None:
        saver = _saver(sync_store)
        saver.start()
        result = sync_store.put([msg("T", 0, b"alone")])
        assert result.append is not None
        assert saver.sync_alone(result.append.end_offset) is PutMessageStatus.PUT_OK
        assert sync_store.flushed_physical_offset() >= result.append.end_offset
        saver.appended()
        assert saver._groups == {}  # no future, no timer
        saver.stop()

    asyncio.run(go())


def test_saves_of_a_busy_iteration_share_the_group_commit(sync_store: MessageStore) -> None:
    async def go() -> None:
        saver = _saver(sync_store)
        saver.start()
        first = saver.append([msg("T", 0, b"a")])  # an append of this iteration already
        second = sync_store.put([msg("T", 1, b"b")])
        assert second.append is not None
        assert saver.sync_alone(second.append.end_offset) is None, "not alone in its iteration"
        answers = [saver.answer(r, lambda r: r.status) for r in (first, second)]
        saver.appended()
        assert len(saver._groups) == 1  # both wait for the iteration's one sync
        assert await asyncio.gather(*answers) == [PutMessageStatus.PUT_OK] * 2  # type: ignore[arg-type]
        # The last iteration had two appends: the next one's first waits for the group too.
        third = sync_store.put([msg("T", 0, b"c")])
        assert third.append is not None
        assert saver.sync_alone(third.append.end_offset) is None
        saver.appended()
        await asyncio.sleep(0)  # the iteration's wake (call_soon) runs first: it had one append
        fourth = sync_store.put([msg("T", 0, b"d")])
        assert fourth.append is not None
        assert saver.sync_alone(fourth.append.end_offset) is PutMessageStatus.PUT_OK
        saver.stop()

    asyncio.run(go())


def test_a_lone_save_is_dispatched_in_the_next_iterations(sync_store: MessageStore) -> None:
    """Its answer left in the call: the dispatch follows at once, while the producer turns the
    answer around, not on a timer that would go off in the middle of its next send."""
    async def go() -> None:
        saver = _saver(sync_store)
        saver.start()
        for i in range(3):
            result = sync_store.put([msg("T", 0, b"%d" % i)])
            assert result.append is not None
            assert saver.sync_alone(result.append.end_offset) is PutMessageStatus.PUT_OK
            saver.appended()
            for _ in range(2):  # the iteration's wake (sync round), then the dispatch
                await asyncio.sleep(0)
            assert sync_store.get_max_offset_in_queue("T", 0) == i + 1
        saver.stop()

    asyncio.run(go())


def test_a_failed_lone_sync_answers_flush_disk_timeout(sync_store: MessageStore) -> None:
    class Failing:
        def __init__(self, region: object) -> None:
            self._region, self.buf = region, region.buf  # type: ignore[attr-defined]

        def sync(self, start: int, end: int) -> None:
            raise OSError(5, "Input/output error (injected)")

        def __getattr__(self, name: str) -> object:
            return getattr(self._region, name)

    async def go() -> None:
        saver = _saver(sync_store)
        saver.start()
        result = sync_store.put([msg("T", 0, b"doomed")])
        assert result.append is not None
        mf = sync_store.commit_log.mfq.files[-1]
        mf._region = Failing(mf._region)  # type: ignore[assignment]
        assert saver.sync_alone(result.append.end_offset) is PutMessageStatus.FLUSH_DISK_TIMEOUT
        saver.stop()

    asyncio.run(go())


class _SpyLock:
    """A lock that says when someone starts to acquire it (to wait for a blocked caller)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.asked = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self.asked.set()
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_a_lone_sync_waits_for_a_round_under_way_instead_of_handing_over(
        sync_store: MessageStore) -> None:
    """The group commit thread's periodic round may be syncing when a lone send comes: the
    send waits for it (that round likely covered it) rather than hand its wait to the thread."""
    group_commit = sync_store.group_commit
    spy = _SpyLock()
    group_commit._round_lock = spy  # type: ignore[assignment]
    result = sync_store.put([msg("T", 0, b"meanwhile")])
    assert result.append is not None
    got: list[bool | None] = []
    spy.acquire()  # a round under way
    waiter = threading.Thread(target=lambda: got.append(
        group_commit.sync_inline(result.append.end_offset)))  # type: ignore[union-attr]
    spy.asked.clear()
    waiter.start()
    assert spy.asked.wait(10), "sync_inline never asked for the round"
    group_commit._round()  # the round under way syncs the bytes
    spy.release()
    waiter.join(10)
    assert got == [True]
    assert sync_store.flushed_physical_offset() >= result.append.end_offset
