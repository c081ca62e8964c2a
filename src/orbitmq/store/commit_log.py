"""The CommitLog: every message of every topic, appended in stored format to one segment queue.

Appends take messages already in stored form (``protocol.stored``: the send path encodes them
outside the lock), then under the lock take the store timestamp, the physical offset and the
queue offsets, copy the bytes into the segment in one write and let ``stored.patch_positions``
fill the three position-dependent fields in place. A batch is one contiguous blob and one write.
When a blob does not fit the rest of a segment, the rest is closed with a blank entry and the blob
goes to the next segment.

Invariants of an append (asserted; inputs were checked by the encoder): offsets only grow (an
append starts where the last one ended, or at a later segment's start), the blob is whole
messages (its first and last messages' TOTALSIZE fields end where the next message and the blob
end), and a (topic, queue) hands out each queue offset once, at most one per message (prepared
and rolled-back transaction messages take none), in order.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from orbitmq.errors import ClientError
from orbitmq.protocol import stored
from orbitmq.protocol.stored import (
    BLANK_ENTRY_SIZE,
    POSITION_FIELDS_END,
    EncodedBatch,
    PropertiesSizeError,
)
from orbitmq.store.file_ops import FileOps
from orbitmq.store.mapped_file import MappedFile
from orbitmq.store.mapped_file_queue import MappedFileQueue
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.replica_append import (
    ReplicaAppendResult,
    ReplicaAppendStatus,
    queue_offset_problem,
)
from orbitmq.store.status import AppendMessageResult, PutMessageStatus

__all__ = ["CommitLog", "EncodedBatch", "encode_messages"]

log = logging.getLogger(__name__)

HOT_BYTES = 64 * 1024 * 1024  # newest commit log bytes left mapped by release_cold_pages
R = TypeVar("R")
# write(segment buffer, write position, segment's first offset, store time ms, queue-offset
# table) -> (new write position, result): see CommitLog.append_in_place.
InPlaceWriter = Callable[[Any, int, int, int, dict[tuple[str, int], int]], tuple[int, R]]


def encode_messages(
    msgs: Sequence[MessageInner], max_message_size: int, max_blob_size: int
) -> EncodedBatch | PutMessageStatus:
    """``msgs`` (one topic and queue) in stored form (``stored.encode_messages``), or the status
    that says why they cannot be stored."""
    try:
        return stored.encode_messages(msgs, max_message_size, max_blob_size)
    except PropertiesSizeError:
        return PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    except ClientError:
        return PutMessageStatus.MESSAGE_ILLEGAL


class CommitLog:
    """The append-only log of every message, with the topic-queue offset table."""

    def __init__(
        self,
        store_path: str,
        file_size: int,
        file_ops: FileOps,
        clock: Callable[[], int],
    ) -> None:
        self.mfq = MappedFileQueue(os.path.join(store_path, "commitlog"), file_size, file_ops)
        self.file_size = file_size
        self._clock = clock
        self.put_lock = threading.Lock()
        # Next queue offset of each (topic, queue id) the store has loaded; guarded by put_lock.
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        # The store's loader of a queue the table lacks: its next offset once loaded, None when
        # it has none on disk (message_store.py loads queues on first use, not at start).
        self.queue_loader: Callable[[tuple[str, int]], int | None] = lambda key: None
        self.begin_time_in_lock = 0  # ms when the current append took the lock; 0 when idle
        self._append_end = 0  # where the last append ended (offsets only grow); under put_lock
        self.segment_error: OSError | None = None  # why the last segment creation failed
        self._topics: dict[bytes, str] = {}  # topic names a slave's appends met, decoded once

    # -- positions ------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.mfq.min_offset

    @property
    def max_offset(self) -> int:
        return self.mfq.max_offset

    @property
    def flushed_offset(self) -> int:
        return self.mfq.flushed_where

    def flush(self) -> int:
        """Make every appended byte durable; returns the flushed offset."""
        return self.mfq.flush()

    def release_cold_pages(self, hot_bytes: int = HOT_BYTES, *, newest: bool = False) -> None:
        """Drop the process's mappings of synced pages older than the last ``hot_bytes`` (see
        MappedFile.release_pages): without it the resident size grows with every byte stored,
        since a mapped segment's pages count as the broker's memory for as long as they stay
        in the page cache. Pulls of old data map pages again until the next call. ``newest``:
        the last two segments only (what the appender has just written), and none that a warm
        step or the release thread holds right now: the appender calls it, and must not wait."""
        keep_from = self.max_offset - hot_bytes
        for mf in self.mfq.files[-2:] if newest else self.mfq.files:
            if mf.file_from_offset >= keep_from:
                break
            mf.release_pages(keep_from - mf.file_from_offset, wait=not newest)

    def drop_cached_below(self, offset: int) -> None:
        """Drop synced pages below global ``offset`` from the page cache (MappedFile.drop_cached):
        the caller knows no reader needs them soon."""
        for mf in self.mfq.files:
            if mf.file_from_offset >= offset:
                break
            mf.drop_cached(offset - mf.file_from_offset)

    # -- appending ------------------------------------------------------------------------------

    def append(self, batch: EncodedBatch) -> AppendMessageResult | PutMessageStatus:
        """Write an encoded batch (or single message) and assign its offsets.

        Returns the result, or CREATE_MAPPED_FILE_FAILED when a new segment cannot be made.
        """
        blob = batch.blob
        size = len(blob)
        key = (batch.topic, batch.queue_id)
        rels = batch.rel_positions
        # The blob is whole messages: the last one ends where the blob ends, the first (of a
        # batch) where the second starts. Two reads of TOTALSIZE, not a walk: a hot path.
        assert (rels[0] == 0 and stored.total_size(blob, rels[-1]) == size - rels[-1]
                and (len(rels) == 1 or stored.total_size(blob) == rels[1])), \
            "the blob's sizes match its messages"
        with self.put_lock:
            now = self._clock()
            self.begin_time_in_lock = now
            files = self.mfq.files
            mf = files[-1] if files else None
            if mf is None or size + BLANK_ENTRY_SIZE > mf.file_size - mf.wrote_position:
                mf = self._segment_for(size)
                if mf is None:
                    self.begin_time_in_lock = 0
                    return PutMessageStatus.CREATE_MAPPED_FILE_FAILED
            pos = mf.wrote_position
            phy = mf.file_from_offset + pos
            assert phy >= self._append_end and pos + size <= mf.file_size, "offsets only grow"
            table = self.topic_queue_table
            first_qoff = table.get(key)
            if first_qoff is None:
                first_qoff = self._queue_known(key) or 0  # None: a new queue
            buf = mf.buf
            buf[pos : pos + size] = blob
            qoff = stored.patch_positions(buf, pos, phy, first_qoff, now, rels)
            # Prepared and rolled-back transaction messages take no queue offset.
            assert first_qoff <= qoff <= first_qoff + len(rels), "queue offsets handed out once"
            mf.wrote_position = pos + size  # publish: readers see whole messages only
            self._append_end = phy + size
            if qoff != first_qoff:
                table[key] = qoff
            self.begin_time_in_lock = 0
        return AppendMessageResult(phy, size, now, first_qoff, len(rels), rels, batch.id_prefix)

    def append_in_place(self, write: InPlaceWriter[R], running: Callable[[], bool]) -> R | None:
        """The native fast path's append: under the put lock, ``write`` stores whole messages
        into the last segment from its write position on, leaving the room of a blank end
        entry, patches their positions with the store time it is given and advances the
        queue-offset table itself; here its new write position is published. It rolls no
        segment: a message that does not fit is left to ``append``. None (nothing written)
        when there is no segment yet or ``running()`` is false (checked under the lock)."""
        with self.put_lock:
            files = self.mfq.files
            if not files or not running():
                return None
            mf = files[-1]
            pos = mf.wrote_position
            now = self._clock()
            self.begin_time_in_lock = now
            try:
                end, result = write(mf.buf, pos, mf.file_from_offset, now, self.topic_queue_table)
            finally:
                self.begin_time_in_lock = 0
            if end != pos:
                assert (mf.file_from_offset + pos >= self._append_end
                        and pos < end <= mf.file_size - BLANK_ENTRY_SIZE), "offsets only grow"
                mf.wrote_position = end  # publish: readers see whole messages only
                self._append_end = mf.file_from_offset + end
        return result

    def _segment_for(self, size: int) -> MappedFile | None:
        """The segment a blob of ``size`` goes to when the last one cannot take it (or there is
        none): the rest of a too-full segment is closed with a blank entry that readers skip.
        None when a new segment cannot be created. Called under ``put_lock``."""
        try:
            mf = self.mfq.last_file_for_append()
            if size + BLANK_ENTRY_SIZE > mf.remaining:
                stored.write_blank_entry(mf.buf, mf.wrote_position, mf.remaining)
                mf.wrote_position = mf.file_size
                mf = self.mfq.last_file_for_append()
        except OSError as e:  # the store tells a full disk (segment_error) from other failures
            self.segment_error = e
            log.debug("cannot create commit log segment err=%s", e)  # RunningFlags logs it
            return None
        return mf

    # -- a slave's appends (store/replica_append.py) ---------------------------------------------

    def append_replicated(self, offset: int, data: bytes) -> ReplicaAppendResult:
        """Store a frame of the master's stream at ``offset``, where this log must end (any
        segment boundary when it is empty); checked whole first, written only if it holds."""
        with self.put_lock:
            mfq = self.mfq
            end = mfq.max_offset if mfq.files else offset
            if offset != end or (not mfq.files and offset % self.file_size):
                return ReplicaAppendResult(ReplicaAppendStatus.OFFSET_MISMATCH, mfq.max_offset,
                                           f"the master streams from {offset}, this log ends "
                                           f"at {mfq.max_offset}")
            try:
                mf = mfq.last_file_for_append(offset)
            except OSError as e:
                self.segment_error = e
                return ReplicaAppendResult(ReplicaAppendStatus.SEGMENT_FAILED, end,
                                           f"cannot create a commit log segment: {e}")
            pos = offset - mf.file_from_offset
            run = stored.check_replica_entries(data, offset, mf.file_size - pos)
            problem = run.problem
            updates: dict[tuple[str, int], int] = {}
            if problem is None:
                problem, updates = queue_offset_problem(run.records, self.topic_queue_table,
                                                        self._topic_of, self._queue_known)
            if problem is not None:
                return ReplicaAppendResult(ReplicaAppendStatus.GARBLED, end, problem)
            assert offset >= self._append_end, "offsets only grow"
            mf.buf[pos:pos + len(data)] = data
            mf.wrote_position = mf.file_size if run.blank_total is not None else pos + len(data)
            self._append_end = mf.file_from_offset + mf.wrote_position
            self.topic_queue_table.update(updates)
            return ReplicaAppendResult(ReplicaAppendStatus.APPENDED, self._append_end)

    def appends_cut_at(self, offset: int) -> None:
        """The log was cut back to ``offset`` (a running replica's truncation,
        replica_truncate.py): the next append may start there. Offsets only grow between two
        cuts; a cut is the one step back, and the append mark must take it too, or the frame at
        the cut is refused for ever. Called under ``put_lock``."""
        assert offset == self.mfq.max_offset, "the mark follows the cut log's end"
        self._append_end = min(self._append_end, offset)

    def _queue_known(self, key: tuple[str, int]) -> int | None:
        """The next offset of a queue the table lacks, entered in the table once the store has
        loaded it; None when the store has no such queue. Called under ``put_lock``."""
        loaded = self.queue_loader(key)
        if loaded is not None:
            self.topic_queue_table[key] = loaded
        return loaded

    def _topic_of(self, raw: bytes) -> str:
        topic = self._topics.get(raw)
        if topic is None:
            topic = self._topics[raw] = raw.decode("utf-8", "replace")
        return topic

    # -- reading --------------------------------------------------------------------------------

    def read(self, offset: int, size: int) -> memoryview | None:
        """``size`` bytes at ``offset`` without copying, or None when not (or no longer) there."""
        mf = self.mfq.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + size > mf.wrote_position:
            return None
        try:
            return mf.slice(pos, size)
        except ValueError:  # the segment was deleted meanwhile
            return None

    def read_to_end(self, offset: int) -> memoryview | None:
        """Everything written from ``offset`` to the end of its segment (replication's read)."""
        mf = self.mfq.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos >= mf.wrote_position:
            return None
        try:
            return mf.slice(pos, mf.wrote_position - pos)
        except ValueError:
            return None

    def store_timestamp_at(self, offset: int) -> int:
        """STORETIMESTAMP of the message at ``offset``; -1 when it cannot be read."""
        head = self.read(offset, POSITION_FIELDS_END)
        return -1 if head is None else stored.store_timestamp(head)

    def roll_next_file(self, offset: int) -> int:
        return self.mfq.roll_next_offset(offset)

    def close(self) -> None:
        self.mfq.close()
