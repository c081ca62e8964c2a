"""Flush services: making appended bytes durable, and recording how far they are.

- ASYNC_FLUSH: ``AsyncFlushService`` syncs the commit log every ``flush_interval_commitlog_ms``.
- ``GroupCommitService``: a request "durable up to offset N" gets a Future. One sync covers every
  request waiting when it starts, and requests that arrive during a sync are served by the next
  one (group commit). Under SYNC_FLUSH the broker asks for every put it acknowledges, and the
  service also syncs every 10 ms on its own; under ASYNC_FLUSH it serves whoever asks.
- ``FlushConsumeQueueService`` syncs consume queues and index files, then writes the checkpoint.
- ``PageReleaseService`` unmaps cold file pages five times a second, so that RSS stays flat.

A sync of the commit log that fails (EIO, ENOSPC) is never reported as durable: its waiters hear
False (FLUSH_DISK_TIMEOUT), the store refuses puts (RunningFlags FLUSH_FAILED) and the sync is tried
again once a second, the unsynced range made dirty again first (MappedFile.flush), until it
succeeds. A failing sync of queues or index leaves the checkpoint where it was and is logged.
"""

from __future__ import annotations

import concurrent.futures
import logging
import mmap
import threading
import time
from collections.abc import Callable, Iterable

from orbitmq.store.checkpoint import StoreCheckpoint
from orbitmq.store.commit_log import CommitLog
from orbitmq.store.consume_queue import ConsumeQueue
from orbitmq.store.file_ops import FileOps
from orbitmq.store.fs_sync import FileSystemSync
from orbitmq.store.mapped_file import MappedFile
from orbitmq.store.running_flags import LOG_INTERVAL_S, RetryGate
from orbitmq.store.service import ServiceThread

__all__ = ["AsyncFlushService", "GroupCommitService", "FlushConsumeQueueService",
           "PageReleaseService", "SmallFolios"]

log = logging.getLogger(__name__)


def flush_failed_remark(error: BaseException) -> str:
    """The remark of puts refused after a failed sync of the commit log (FLUSH_FAILED)."""
    return (f"disk error: syncing the commit log failed ({error}); sends are refused until a "
            "sync succeeds")


def flush_commit_log(commit_log: CommitLog, gate: RetryGate | None) -> int:
    """``commit_log.flush()`` with its failures held in ``gate`` (retried at the gate's pace;
    until then nothing is synced); -1 when nothing was known durable this time."""
    if gate is None:
        return commit_log.flush()
    if not gate.claim():
        return -1
    try:
        flushed = commit_log.flush()
    except Exception as e:
        gate.failed(flush_failed_remark(e))
        return -1
    gate.passed()
    return flushed


class AsyncFlushService(ServiceThread):
    """Syncs the commit log on an interval (a failure goes to ``gate``, see module docstring)."""

    def __init__(self, commit_log: CommitLog, interval_ms: int, gate: RetryGate | None = None) -> None:
        super().__init__("orbitmq-flush-commitlog", interval_ms / 1000)
        self.commit_log = commit_log
        self.gate = gate

    def run_once(self) -> None:
        flush_commit_log(self.commit_log, self.gate)


INLINE_SYNC_MAX_S = 0.005  # a caller's thread syncs inline (try_run_once) only below this


def _advise(segment: MappedFile | None, advice: int) -> None:
    """``madvise`` over a segment's whole mapping (a simulated one, not an mmap, is left be)."""
    if segment is not None and isinstance(segment.buf, mmap.mmap) and not segment.destroyed:
        try:
            segment.buf.madvise(advice)
        except (OSError, ValueError):  # closed meanwhile, or an advice the kernel lacks
            pass


def _hold(segment: MappedFile, hold: bool) -> None:
    try:
        segment.hold_descriptor(hold)
    except OSError as e:  # its syncs open the file each time, as before
        log.warning("cannot hold a descriptor for syncs path=%s err=%s", segment.path, e)


class SmallFolios:
    """Keeps the page cache of the segment being written in 4 KiB pages (SYNC_FLUSH).

    Linux (6.x) caches a file in large folios, up to 2 MiB, once faults through the mapping
    look sequential (the fault readahead grows the folio order), and a store through the
    mapping marks the *whole* folio dirty: measured here, one 1 KiB message + fdatasync
    wrote 2,048 KiB once 200 MB of a segment had been written (4 KiB on a fresh segment),
    and the sync took 0.6-2 ms instead of 0.1 (bench/journal/PROFILE.md). ``MADV_RANDOM`` on the
    mapping turns the fault readahead off, so the writer's pages come one by one and a sync
    writes what was written. A segment the writer has left gets ``MADV_NORMAL`` again:
    readers of cold data keep their readahead. The newest segment also holds a descriptor
    for its syncs (OsRegion.hold_descriptor: no open and close per sync).
    """

    def __init__(self, commit_log: CommitLog) -> None:
        self._files: Callable[[], list[MappedFile]] = lambda: commit_log.mfq.files
        self._current: MappedFile | None = None
        self._lock = threading.Lock()  # the sync rounds' thread and the page warming's

    def check(self) -> None:
        """Advise the newest segment when it changed (a check per sync round: cheap)."""
        files = self._files()
        newest = files[-1] if files else None
        if newest is self._current:
            return
        with self._lock:
            if newest is self._current:
                return
            if self._current is not None:
                _advise(self._current, mmap.MADV_NORMAL)
                _hold(self._current, False)
            if newest is not None:
                _advise(newest, mmap.MADV_RANDOM)
                _hold(newest, True)
            self._current = newest


class GroupCommitService(ServiceThread):
    """Serves "durable up to offset" requests in groups: one sync per round for every request
    waiting (MessageStore.durable_up_to).

    Requests submitted before a round starts form one group and share one Future: a future costs
    about 10 us to make (its Condition), which was a sixth of a SYNC_FLUSH send. The group's answer
    is True when the sync covered its highest end offset before its first request's deadline;
    a request whose own deadline was later can thus hear False only when the round ended more
    than ``timeout_ms`` after the group began: the disk was failing anyway.

    ``submit`` wakes nobody: the caller runs the round in its own thread (``try_run_once``, what
    MessageStore.wake does), which saves the two thread hand-offs of a round trip through the
    service, or wakes the thread; the thread's interval is the backstop. With ``periodic`` (under
    SYNC_FLUSH) the thread also syncs every interval whatever was appended; without it (under
    ASYNC_FLUSH, where the AsyncFlushService syncs on its own pace) a round runs only for
    requests.
    """

    def __init__(
        self,
        commit_log: CommitLog,
        timeout_ms: int,
        monotonic: Callable[[], float] = time.monotonic,
        gate: RetryGate | None = None,
        *,
        periodic: bool = True,
        before_sync: Callable[[], None] | None = None,
    ) -> None:
        # Without periodic rounds the interval is only a backstop for a request nobody woke.
        super().__init__("orbitmq-group-commit", 0.01 if periodic else 1.0)
        self.commit_log = commit_log
        self.periodic = periodic
        self.gate = gate  # failed syncs: see the module docstring
        self.timeout_s = timeout_ms / 1000
        self._monotonic = monotonic
        self._lock = threading.Lock()  # guards the three _group fields
        self._round_lock = threading.Lock()  # one sync round at a time, thread or inline
        self._group: concurrent.futures.Future[bool] | None = None  # the next round's answer
        self._group_end = 0  # highest end offset asked for by the group
        self._group_deadline = 0.0  # monotonic deadline of the group's first request
        self._group_size = 0
        self.last_sync_s = 0.0  # how long the last round's sync took
        self._flushed_seen = -1  # the flushed offset when this thread last looked
        self._before_sync = before_sync  # each round's, before its sync (SmallFolios.check)
        # Told the duration (s) of each round that had requests waiting (the broker's metrics).
        self.on_sync: Callable[[float], None] | None = None
        # Told the new flushed offset after each round that moved it, in the thread that ran the
        # round (MessageStore.add_flush_listener).
        self.flush_listeners: list[Callable[[int], None]] = []
        self._flushed_told = -1

    def submit(self, end_offset: int) -> concurrent.futures.Future[bool]:
        """Ask for bytes below ``end_offset`` to be durable; the Future says whether they are.
        Wakes nobody (see the class docstring)."""
        with self._lock:
            future = self._group
            if future is None:
                future = self._group = concurrent.futures.Future()
                self._group_deadline = self._monotonic() + self.timeout_s
            if end_offset > self._group_end:
                self._group_end = end_offset
            self._group_size += 1
        return future

    @property
    def pending(self) -> int:
        """Requests waiting for the next round."""
        return self._group_size

    def has_work(self) -> bool:
        return self._group is not None

    def interval_round_due(self) -> bool:
        """The interval's sync is the backstop for bytes no request waits for; while rounds in
        the loop's thread (``sync_inline``, ``try_run_once``) move the flushed offset, they sync
        those bytes as well, and the round is left to them."""
        flushed = self.commit_log.flushed_offset
        seen, self._flushed_seen = self._flushed_seen, flushed
        return flushed == seen

    def run_once(self) -> None:
        """A round; without ``periodic``, only when requests wait for one."""
        if not self.periodic and self._group is None:
            return
        with self._round_lock:
            flushed = self._round()
        if flushed >= 0:
            self._flushed_seen = flushed

    def try_run_once(self) -> bool:
        """A round in the calling thread unless one is under way or the disk has turned slow
        (the last sync took over ``INLINE_SYNC_MAX_S``: an event loop must not stand still
        behind it; the thread takes the rounds until a sync is quick again); whether it ran."""
        return self.last_sync_s <= INLINE_SYNC_MAX_S and self._round_if_free() is not None

    def sync_inline(self, end_offset: int) -> bool | None:
        """"Durable up to ``end_offset``?" answered by a round in the calling thread, without a
        future: whether the sync covered it within ``timeout_ms``; None, nothing done, when the
        disk has turned slow (``try_run_once``'s rule: the caller waits for ``submit``'s future
        then). A round under way (the thread's periodic one) is waited for, up to
        ``INLINE_SYNC_MAX_S`` without the GIL: it may well cover the caller's bytes, and then
        this round syncs nothing; handing over to the thread cost 2-4x a lone send's latency.
        The round serves the waiting group as well."""
        if self.last_sync_s > INLINE_SYNC_MAX_S:
            return None
        deadline = self._monotonic() + self.timeout_s
        if not self._round_lock.acquire(timeout=INLINE_SYNC_MAX_S):
            return None
        try:
            flushed = self._round()
        finally:
            self._round_lock.release()
        return flushed >= end_offset and self._monotonic() <= deadline

    def _round_if_free(self) -> int | None:
        """``_round`` in the calling thread, or None when another one is under way."""
        if not self._round_lock.acquire(blocking=False):
            return None
        try:
            return self._round()
        finally:
            self._round_lock.release()

    def _round(self) -> int:
        """One sync for the group waiting now; returns the flushed offset (-1 on failure)."""
        with self._lock:
            future, end, deadline, size = (self._group, self._group_end, self._group_deadline,
                                           self._group_size)
            self._group, self._group_end, self._group_size = None, 0, 0
        if self._before_sync is not None:
            self._before_sync()
        started = self._monotonic()
        try:
            flushed = flush_commit_log(self.commit_log, self.gate)
        except Exception:  # only without a gate: with one the failure is held there
            log.exception("sync flush failed; %d requests answered FLUSH_DISK_TIMEOUT", size)
            flushed = -1
        else:
            if flushed < 0 and size:
                log.error("sync flush failed; %d requests answered FLUSH_DISK_TIMEOUT", size)
        self.last_sync_s = self._monotonic() - started
        if size and self.on_sync is not None:
            self.on_sync(self.last_sync_s)
        if future is not None:
            future.set_result(flushed >= end and self._monotonic() <= deadline)
        if flushed > self._flushed_told:  # rounds run one at a time (_round_lock)
            self._flushed_told = flushed
            for listener in self.flush_listeners:
                try:
                    listener(flushed)
                except Exception:
                    log.exception("a flush listener failed")
        return flushed

    def shutdown(self) -> None:
        super().shutdown()
        self.run_once()  # nobody waits forever: the last requests get the final sync


class FlushConsumeQueueService(ServiceThread):
    """Syncs consume queues and the index, then records the checkpoint."""

    def __init__(
        self,
        interval_ms: int,
        commit_log: CommitLog,
        consume_queues: Callable[[], Iterable[ConsumeQueue]],
        dispatched_offset: Callable[[], int],
        index_flush: Callable[[], None] | None,
        file_ops: FileOps,
        checkpoint_path: str,
        clock: Callable[[], int],
        fs_sync: FileSystemSync | None = None,
    ) -> None:
        super().__init__("orbitmq-flush-consumequeue", interval_ms / 1000)
        self._fs_sync = fs_sync  # store_type compact: many queues synced at once
        self._commit_log = commit_log
        self._consume_queues = consume_queues
        self._dispatched_offset = dispatched_offset
        self._index_flush = index_flush
        self._file_ops = file_ops
        self._path = checkpoint_path
        self._clock = clock
        self._io_lock = threading.Lock()  # the service thread and shutdown's final round
        self.last: StoreCheckpoint | None = None
        self.failing_since: float | None = None  # monotonic time of the first failed round
        self._logged_at = 0.0

    def run_once(self) -> None:
        """One round; a failed sync or checkpoint write is logged (at most every
        LOG_INTERVAL_S while it lasts) and leaves the checkpoint as it was."""
        try:
            self.flush_and_checkpoint()
        except OSError as e:
            now = time.monotonic()
            if self.failing_since is None:
                self.failing_since = self._logged_at = now
                log.error("syncing queues or writing the checkpoint failed err=%s", e)
            elif now - self._logged_at >= LOG_INTERVAL_S:
                self._logged_at = now
                log.error("syncing queues or writing the checkpoint still fails for=%.0fs err=%s",
                          now - self.failing_since, e)
            return
        if self.failing_since is not None:
            log.warning("queues synced and checkpoint written again after=%.1fs",
                        time.monotonic() - self.failing_since)
            self.failing_since = None

    def flush_and_checkpoint(self) -> None:
        """Sync queues and index, then save the checkpoint when it moved.

        Raises:
            OSError: a sync or the checkpoint write failed; nothing later in the round was done.
        """
        with self._io_lock:
            # Read first: every message below it already has its queue and index entries written.
            logics = self._dispatched_offset()
            queues = list(self._consume_queues())
            if self._fs_sync is not None:
                self._fs_sync.sync(queues)
            for cq in queues:
                cq.flush()
            for cq in queues:  # new files' names, after the data: the fsyncs share commits
                cq.sync_names()
            if self._index_flush is not None:
                self._index_flush()
            now = self._clock()
            physic = self._commit_log.flushed_offset
            ckpt = StoreCheckpoint(physic, logics, logics, now, now, now)
            if self.last is None or (physic, logics) != (
                self.last.physic_offset, self.last.logics_offset
            ):
                ckpt.save(self._file_ops, self._path)
                self.last = ckpt


class PageReleaseService(ServiceThread):
    """Calls ``release`` (MessageStore.release_cold_pages) every ``interval_ms``.

    Often, because consumers map old pages again as they read them: at 200 MB/s of pulls a
    round every 200 ms keeps what they bring in to about 40 MB. A round over segments whose pages
    are already released costs the kernel a walk of empty page tables, microseconds.
    """

    def __init__(self, release: Callable[[], None], interval_ms: int = 200) -> None:
        super().__init__("orbitmq-page-release", interval_ms / 1000)
        self._release = release

    def run_once(self) -> None:
        self._release()
