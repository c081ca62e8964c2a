"""A slave's copy, the facade's side: the store as a replica (puts refused, the master's bytes
taken at the master's offsets: replica_append.py), what a master streams, where a slave compares
its log with its master's, and a running replica's cut (replica_truncate.py). ``MessageStore``
(message_store.py) inherits it."""

from __future__ import annotations

import logging

from orbitmq.config import StoreConfig
from orbitmq.errors import StoreError
from orbitmq.protocol import stored
from orbitmq.store.commit_log import CommitLog
from orbitmq.store.consume_queue import ConsumeQueue
from orbitmq.store.corruption import CorruptionWatch
from orbitmq.store.dispatch import DispatchService
from orbitmq.store.flush import FlushConsumeQueueService
from orbitmq.store.index_service import IndexService
from orbitmq.store.log_cut import TruncateReport
from orbitmq.store.replica_append import (
    ReplicaAppendResult,
    ReplicaAppendStatus,
    ReplicaTail,
    frame_extent,
    replica_tail,
)
from orbitmq.store.replica_truncate import truncate_running_replica

__all__ = ["ReplicaCopy"]

log = logging.getLogger(__name__)


class ReplicaCopy:
    """A slave's side of the store (mixed into MessageStore, which sets these attributes)."""

    config: StoreConfig
    commit_log: CommitLog
    consume_queue_table: dict[tuple[str, int], ConsumeQueue]
    index: IndexService | None
    dispatcher: DispatchService
    flush_consume_queue: FlushConsumeQueueService
    _running: bool
    _replica: bool
    _writable: bool
    corruption: CorruptionWatch

    def load_queues(self, count_max: int | None = None) -> int:
        """Load the queues not used since the start (MessageStore's)."""
        raise NotImplementedError

    @property
    def replica(self) -> bool:
        """True for a slave's store: puts are refused, ``append_replicated`` takes the master's
        bytes at the master's offsets."""
        return self._replica

    def set_replica(self, replica: bool) -> None:
        """Make this store a slave's copy, or a master's store again (a role change)."""
        with self.commit_log.put_lock:
            self._replica = replica
            self._writable = self._running and not replica
            if replica:  # a queue of the master's may start anywhere: no guess of 0 stays
                table = self.commit_log.topic_queue_table
                for key in [k for k, v in table.items()
                            if v == 0 and k not in self.consume_queue_table]:
                    del table[key]

    def append_replicated(self, offset: int, data: bytes) -> ReplicaAppendResult:
        """One frame of the master's stream, checked whole and stored at ``offset`` (see
        replica_append.py); the caller runs ``wake`` afterwards, which dispatches it."""
        if not self._running or not self._replica:
            return ReplicaAppendResult(ReplicaAppendStatus.NOT_ACCEPTED, self.commit_log.max_offset,
                                       "the store is stopped" if not self._running
                                       else "the store is not a replica")
        return self.commit_log.append_replicated(offset, data)

    def replication_frame(self, offset: int, batch_max: int) -> tuple[bytes, int] | None:
        """What a master streams from ``offset``: (whole entries up to ``batch_max`` bytes, the
        offset the stream goes on from), or None when nothing is stored there yet."""
        data = self.commit_log.read_to_end(offset)
        if data is None:
            return None
        with data:
            size = self.config.mapped_file_size_commitlog
            length, advance = frame_extent(data, offset % size, size, batch_max)
            return bytes(data[:length]), offset + advance

    def replica_tail(self) -> ReplicaTail | None:
        """The last message and what follows it, for a slave to compare with its master's log
        before taking anything (None when the log holds no message in its last segment)."""
        end = self.commit_log.max_offset
        if end <= self.commit_log.min_offset:
            return None
        size = self.config.mapped_file_size_commitlog
        start = (end - 1) - (end - 1) % size
        hint = start  # a queue's last entry in the last segment is a closer message boundary
        for cq in list(self.consume_queue_table.values()):
            if start < cq.max_phy_end <= end:
                found = cq.entry(cq.max_offset - 1)
                if found is not None and start <= found[0] < end:
                    hint = max(hint, found[0])
        tail = replica_tail(self.commit_log.read, hint, end)
        if tail is not None and self._running and self._replica:
            bad = stored.verify(tail.entries[0], physical_offset=tail.offset)
            if bad is not None and self.corrupt_message_found(tail.offset, bad, "replication"):
                return self.replica_tail()  # cut before it: the message before is the tail now
        return tail

    def corrupt_message_found(self, offset: int, problem: str, found_by: str) -> bool:
        """A corrupt message at commit log ``offset`` (a checked read met it): counted and
        logged once (corruption.py); a running slave cuts its log there, and its HA client
        connects again from the new end, so that its master streams the rest again. True when
        the log was cut. A master keeps the bytes (it has no copy to take): its reads stop
        before them, and its master listeners are told (controller mode hands the set over to
        a member with a copy)."""
        replica = self._replica and self._running
        self.corruption.found(offset, problem, replica=self._replica, found_by=found_by)
        if not replica:
            if not self._replica:
                self.corruption.master_found(offset)
            return False
        try:
            report = self.truncate_replica(offset)
        except StoreError as e:  # it stopped or was promoted meanwhile: reads still stop there
            log.error("corrupt message at offset=%d not cut: %s", offset, e)
            return False
        if report.new_end > offset:
            return False
        self.corruption.cut(report.new_end, report.old_end)
        return True

    def truncate_replica(self, offset: int) -> TruncateReport:
        """Cut this running replica's log back to ``offset`` (replica_truncate.py).

        Raises:
            StoreError: the store is not a running replica, or the offset is negative.
        """
        if not self._running or not self._replica:
            raise StoreError("only a running replica's log is cut while it runs")
        if offset < 0:
            raise StoreError(f"cannot cut a commit log at {offset}")
        self.load_queues()  # every queue is cut: one loaded later would keep what the cut drops
        return truncate_running_replica(
            self.commit_log, self.dispatcher, self.consume_queue_table,
            self.index.truncate_after if self.index is not None else None,
            self.flush_consume_queue.flush_and_checkpoint, self.config.store_path, offset)
