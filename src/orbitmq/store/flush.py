"""Flush services: making appended bytes durable, and recording how far they are.

- ASYNC_FLUSH: ``AsyncFlushService`` syncs the commit log every ``flush_interval_commitlog_ms``.
- SYNC_FLUSH: ``GroupCommitService``; each append registers its end offset and gets a Future. One
  sync covers every request waiting when it starts, and requests that arrive during a sync are
  served by the next one (group commit).
- ``FlushConsumeQueueService`` syncs consume queues and index files, then writes the checkpoint.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Iterable

from orbitmq.store.checkpoint import StoreCheckpoint
from orbitmq.store.commit_log import CommitLog
from orbitmq.store.consume_queue import ConsumeQueue
from orbitmq.store.file_ops import FileOps
from orbitmq.store.service import ServiceThread

__all__ = ["AsyncFlushService", "GroupCommitService", "FlushConsumeQueueService"]

log = logging.getLogger(__name__)


class AsyncFlushService(ServiceThread):
    """Syncs the commit log on an interval."""

    def __init__(self, commit_log: CommitLog, interval_ms: int) -> None:
        super().__init__("orbitmq-flush-commitlog", interval_ms / 1000)
        self.commit_log = commit_log

    def run_once(self) -> None:
        self.commit_log.flush()


class GroupCommitService(ServiceThread):
    """Serves sync-flush requests in groups: one sync per round for all waiting requests."""

    def __init__(
        self,
        commit_log: CommitLog,
        timeout_ms: int,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__("orbitmq-group-commit", 0.01)
        self.commit_log = commit_log
        self.timeout_s = timeout_ms / 1000
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._requests: list[tuple[int, float, concurrent.futures.Future[bool]]] = []

    def submit(self, end_offset: int) -> concurrent.futures.Future[bool]:
        """Ask for bytes below ``end_offset`` to be durable; the Future says whether they are."""
        future: concurrent.futures.Future[bool] = concurrent.futures.Future()
        request = (end_offset, self._monotonic() + self.timeout_s, future)
        with self._lock:
            self._requests.append(request)
        self.wakeup()
        return future

    @property
    def pending(self) -> int:
        return len(self._requests)

    def run_once(self) -> None:
        with self._lock:
            requests, self._requests = self._requests, []
        if not requests:
            return
        try:
            flushed = self.commit_log.flush()
        except Exception:
            log.exception("sync flush failed; %d requests answered FLUSH_DISK_TIMEOUT", len(requests))
            flushed = -1
        now = self._monotonic()
        for end_offset, deadline, future in requests:
            future.set_result(flushed >= end_offset and now <= deadline)

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
    ) -> None:
        super().__init__("orbitmq-flush-consumequeue", interval_ms / 1000)
        self._commit_log = commit_log
        self._consume_queues = consume_queues
        self._dispatched_offset = dispatched_offset
        self._index_flush = index_flush
        self._file_ops = file_ops
        self._path = checkpoint_path
        self._clock = clock
        self._io_lock = threading.Lock()  # the service thread and shutdown's final round
        self.last: StoreCheckpoint | None = None

    def run_once(self) -> None:
        with self._io_lock:
            # Read first: every message below it already has its queue and index entries written.
            logics = self._dispatched_offset()
            for cq in list(self._consume_queues()):
                cq.flush()
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
