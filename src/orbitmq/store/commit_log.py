"""The CommitLog: every message of every topic, appended in stored format to one segment queue.

Appends encode each message outside the lock (header, body, topic, properties, body CRC), then
under the lock take the store timestamp, the physical offset and the queue offsets, copy the bytes
into the segment in one write and patch the three position-dependent fields in place. A batch is
one contiguous blob and one write. When a message does not fit the rest of a segment, the rest is
closed with a blank entry and the message goes to the next segment.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from collections.abc import Callable, Sequence

from orbitmq.errors import ClientError
from orbitmq.protocol.message import (
    BLANK_ENTRY_SIZE,
    BLANK_MAGIC_CODE,
    MAGIC_CODE,
    PROPERTIES_SIZE_MAX,
    TOPIC_SIZE_MAX,
    MessageSysFlag,
    encode_properties,
    header_struct,
    pack_host,
)
from orbitmq.store.file_ops import FileOps
from orbitmq.store.mapped_file_queue import MappedFileQueue
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.status import AppendMessageResult, PutMessageStatus

__all__ = ["CommitLog", "EncodedBatch", "encode_messages"]

log = logging.getLogger(__name__)

_QOFF_PHY = struct.Struct(">qq")  # QUEUEOFFSET and PHYSICALOFFSET, adjacent at byte 20
_QOFF_AT = 20
_I64 = struct.Struct(">q")
_BLANK = struct.Struct(">ii")
_STORE_TS_AT_V4 = 56  # STORETIMESTAMP after a v4 born host
_STORE_TS_AT_V6 = 68
_NO_QUEUE_OFFSET_TYPES = (4, 12)  # prepared and rolled-back transaction messages
# Plain ints: IntFlag arithmetic costs microseconds per message on this path.
_BORN_V6 = int(MessageSysFlag.BORNHOST_V6)
_STORE_V6 = int(MessageSysFlag.STOREHOST_V6)
_V6_BITS = _BORN_V6 | _STORE_V6
# Header layouts by (born host v6) + 2 * (store host v6).
_HEADERS = [header_struct(_BORN_V6 * b + _STORE_V6 * s) for s in (0, 1) for b in (0, 1)]


def _topic_is_path_safe(topic: str) -> bool:
    """A topic names a consume queue directory: no separators, NULs or dot names."""
    return "/" not in topic and "\x00" not in topic and topic not in (".", "..")


class EncodedBatch:
    """Messages of one topic and queue encoded back to back, position fields left to patch."""

    __slots__ = ("blob", "rel_positions", "store_ts_ats", "counts_in_queue", "topic", "queue_id",
                 "id_prefix")

    def __init__(self, topic: str, queue_id: int, id_prefix: bytes) -> None:
        self.blob = bytearray()
        self.rel_positions: list[int] = []
        self.store_ts_ats: list[int] = []
        self.counts_in_queue: list[bool] = []  # prepared/rollback messages take no queue offset
        self.topic = topic
        self.queue_id = queue_id
        self.id_prefix = id_prefix


def encode_messages(
    msgs: Sequence[MessageInner], max_message_size: int, max_blob_size: int
) -> EncodedBatch | PutMessageStatus:
    """Encode ``msgs`` (one topic and queue) or say why they cannot be stored."""
    first = msgs[0]
    topic_raw = first.topic.encode("utf-8")
    if not 0 < len(topic_raw) <= TOPIC_SIZE_MAX or not _topic_is_path_safe(first.topic):
        return PutMessageStatus.MESSAGE_ILLEGAL
    try:
        store_ip, store6 = pack_host(first.store_host[0])
    except ClientError:
        return PutMessageStatus.MESSAGE_ILLEGAL
    batch = EncodedBatch(first.topic, first.queue_id, store_ip + first.store_host[1].to_bytes(4, "big"))
    topic_part = bytes((len(topic_raw),)) + topic_raw
    topic, queue_id = first.topic, first.queue_id
    store_port = first.store_host[1]
    blob = batch.blob
    rels, ts_ats, counts = batch.rel_positions, batch.store_ts_ats, batch.counts_in_queue
    for msg in msgs:
        if msg.topic != topic or msg.queue_id != queue_id:
            return PutMessageStatus.MESSAGE_ILLEGAL
        body = msg.body
        if len(body) > max_message_size:
            return PutMessageStatus.MESSAGE_ILLEGAL
        try:
            props = encode_properties(msg.properties)
            born_ip, born6 = pack_host(msg.born_host[0])
        except ClientError:
            return PutMessageStatus.MESSAGE_ILLEGAL
        if len(props) > PROPERTIES_SIZE_MAX:
            return PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
        if b"\x00" in props:  # recovery treats NUL in properties as a torn write
            return PutMessageStatus.MESSAGE_ILLEGAL
        sys_flag = (msg.sys_flag & ~_V6_BITS) | (_BORN_V6 if born6 else 0) | (_STORE_V6 if store6 else 0)
        head = _HEADERS[born6 + 2 * store6]
        total = head.size + len(body) + len(topic_part) + 2 + len(props)
        rels.append(len(blob))
        ts_ats.append(_STORE_TS_AT_V6 if born6 else _STORE_TS_AT_V4)
        counts.append(sys_flag & 12 not in _NO_QUEUE_OFFSET_TYPES)
        blob += head.pack(
            total, MAGIC_CODE, zlib.crc32(body) & 0x7FFFFFFF, queue_id, msg.flag, 0, 0, sys_flag,
            msg.born_timestamp, born_ip, msg.born_host[1], 0, store_ip, store_port,
            msg.reconsume_times, msg.prepared_transaction_offset, len(body),
        )
        blob += body
        blob += topic_part
        blob += len(props).to_bytes(2, "big")
        blob += props
        if len(blob) > max_blob_size:
            return PutMessageStatus.MESSAGE_ILLEGAL
    return batch


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
        # Next queue offset of each (topic, queue id); guarded by put_lock.
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.begin_time_in_lock = 0  # ms when the current append took the lock; 0 when idle

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

    # -- appending ------------------------------------------------------------------------------

    def append(self, batch: EncodedBatch) -> AppendMessageResult | PutMessageStatus:
        """Write an encoded batch (or single message) and assign its offsets.

        Returns the result, or CREATE_MAPPED_FILE_FAILED when a new segment cannot be made.
        """
        blob = batch.blob
        size = len(blob)
        key = (batch.topic, batch.queue_id)
        with self.put_lock:
            now = self._clock()
            self.begin_time_in_lock = now
            try:
                mf = self.mfq.last_file_for_append()
                if size + BLANK_ENTRY_SIZE > mf.remaining:
                    # Close the segment with a blank entry; the reader skips to the next one.
                    _BLANK.pack_into(mf.buf, mf.wrote_position, mf.remaining, BLANK_MAGIC_CODE)
                    mf.wrote_position = mf.file_size
                    mf = self.mfq.last_file_for_append()
            except OSError as e:
                self.begin_time_in_lock = 0
                log.error("cannot create commit log segment err=%s", e)
                return PutMessageStatus.CREATE_MAPPED_FILE_FAILED
            pos = mf.wrote_position
            phy = mf.file_from_offset + pos
            table = self.topic_queue_table
            first_qoff = qoff = table.get(key, 0)
            buf = mf.buf
            buf[pos : pos + size] = blob
            pack_qp, pack_ts = _QOFF_PHY.pack_into, _I64.pack_into
            counts = batch.counts_in_queue
            for i, rel in enumerate(batch.rel_positions):
                at = pos + rel
                if counts[i]:
                    pack_qp(buf, at + _QOFF_AT, qoff, phy + rel)
                    qoff += 1
                else:
                    pack_qp(buf, at + _QOFF_AT, 0, phy + rel)
                pack_ts(buf, at + batch.store_ts_ats[i], now)
            mf.wrote_position = pos + size  # publish: readers see whole messages only
            if qoff != first_qoff:
                table[key] = qoff
            self.begin_time_in_lock = 0
        offsets = [phy + rel for rel in batch.rel_positions]
        return AppendMessageResult(
            phy, size, now, first_qoff, len(offsets), offsets, batch.id_prefix
        )

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
        head = self.read(offset, 88)
        if head is None:
            return -1
        sys_flag = int.from_bytes(head[36:40], "big")
        at = _STORE_TS_AT_V6 if sys_flag & MessageSysFlag.BORNHOST_V6 else _STORE_TS_AT_V4
        return int.from_bytes(head[at : at + 8], "big", signed=True)

    def roll_next_file(self, offset: int) -> int:
        return self.mfq.roll_next_offset(offset)

    def close(self) -> None:
        self.mfq.close()
