"""The CommitLog: every message of every topic, appended in stored format to one segment queue.

Appends encode each message outside the lock (header, body, topic, properties, body CRC), then
under the lock take the store timestamp, the physical offset and the queue offsets, copy the bytes
into the segment in one write and patch the three position-dependent fields in place. A batch is
one contiguous blob and one write. When a message does not fit the rest of a segment, the rest is
closed with a blank entry and the message goes to the next segment.
"""

from __future__ import annotations

import functools
import logging
import os
import struct
import threading
import zlib
from collections.abc import Callable, Sequence
from typing import Any

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
from orbitmq.protocol.native import NATIVE
from orbitmq.store.file_ops import FileOps
from orbitmq.store.mapped_file import MappedFile
from orbitmq.store.mapped_file_queue import MappedFileQueue
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.status import AppendMessageResult, PutMessageStatus

__all__ = ["CommitLog", "EncodedBatch", "encode_messages", "encode_wire_batch", "encode_wire_single"]

log = logging.getLogger(__name__)

HOT_BYTES = 64 * 1024 * 1024  # newest commit log bytes left mapped by release_cold_pages
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


@functools.lru_cache(maxsize=4096)
def _topic_part(topic: str) -> bytes | None:
    """TOPIC length byte + TOPIC as stored, or None for a topic that may not be stored (cached:
    a broker sees few topics, and this runs for every append)."""
    raw = topic.encode("utf-8")
    if not 0 < len(raw) <= TOPIC_SIZE_MAX or not _topic_is_path_safe(topic):
        return None
    return bytes((len(raw),)) + raw


def encode_messages(
    msgs: Sequence[MessageInner], max_message_size: int, max_blob_size: int
) -> EncodedBatch | PutMessageStatus:
    """Encode ``msgs`` (one topic and queue) or say why they cannot be stored."""
    first = msgs[0]
    topic, queue_id = first.topic, first.queue_id
    topic_part = _topic_part(topic)
    if topic_part is None:
        return PutMessageStatus.MESSAGE_ILLEGAL
    try:
        store_ip, store6 = pack_host(first.store_host[0])
    except ClientError:
        return PutMessageStatus.MESSAGE_ILLEGAL
    store_port = first.store_host[1]
    batch = EncodedBatch(topic, queue_id, store_ip + store_port.to_bytes(4, "big"))
    blob = batch.blob
    rels, ts_ats, counts = batch.rel_positions, batch.store_ts_ats, batch.counts_in_queue
    tail_size = len(topic_part) + 2
    crc32 = zlib.crc32
    for msg in msgs:
        body = msg.body
        if msg.topic != topic or msg.queue_id != queue_id or len(body) > max_message_size:
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
        rels.append(len(blob))
        ts_ats.append(_STORE_TS_AT_V6 if born6 else _STORE_TS_AT_V4)
        counts.append(sys_flag & 12 not in _NO_QUEUE_OFFSET_TYPES)
        blob += head.pack(
            head.size + len(body) + tail_size + len(props), MAGIC_CODE,
            crc32(body) & 0x7FFFFFFF, queue_id, msg.flag, 0, 0, sys_flag,
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


def encode_wire_batch(
    topic: str,
    queue_id: int,
    body: bytes | memoryview,
    sys_flag: int,
    born_timestamp: int,
    born_host: tuple[str, int],
    store_host: tuple[str, int],
    reconsume_times: int,
    max_message_size: int,
    max_blob_size: int,
) -> EncodedBatch | None:
    """A SEND_BATCH_MESSAGE body straight to stored form, in one C pass without a message object
    per entry; None when the general path (``decode_batch`` then ``encode_messages``) must take
    it: no C speedups, or anything unusual in the body (it decides what is refused and why).

    Only properties that the general path would write back byte for byte are copied as they
    came, so both paths store the same bytes (a test compares them).
    """
    ctx = _wire_context(topic, sys_flag, born_host, store_host)
    if ctx is None:
        return None
    topic_part, flags, born_part, store_part, ts_at = ctx
    assert NATIVE is not None
    out = NATIVE.encode_wire_batch(body, topic_part, queue_id, flags, born_timestamp, born_part,
                                   store_part, reconsume_times, max_message_size, max_blob_size)
    if out is None:
        return None
    batch = EncodedBatch(topic, queue_id, store_part)
    batch.blob, batch.rel_positions = out
    n = len(batch.rel_positions)
    batch.store_ts_ats = [ts_at] * n
    batch.counts_in_queue = [True] * n
    return batch


def encode_wire_single(
    topic: str,
    queue_id: int,
    body: bytes | memoryview,
    properties: str | None,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: tuple[str, int],
    store_host: tuple[str, int],
    reconsume_times: int,
) -> EncodedBatch | None:
    """``encode_wire_batch`` for one message whose properties come as the header's text: no
    dict and no message object; None sends it down the general path (no speedups, properties
    that are not canonical or that hold DELAY or TRAN_MSG, which need the broker's attention)."""
    ctx = _wire_context(topic, sys_flag, born_host, store_host)
    if ctx is None:
        return None
    topic_part, flags, born_part, store_part, ts_at = ctx
    assert NATIVE is not None
    raw = properties.encode("utf-8", "surrogatepass") if properties else b""
    blob = NATIVE.encode_wire_single(body, raw, flag, topic_part, queue_id, flags, born_timestamp,
                                     born_part, store_part, reconsume_times)
    if blob is None:
        return None
    batch = EncodedBatch(topic, queue_id, store_part)
    batch.blob = blob
    batch.rel_positions.append(0)
    batch.store_ts_ats.append(ts_at)
    batch.counts_in_queue.append(True)
    return batch


def _wire_context(
    topic: str, sys_flag: int, born_host: tuple[str, int], store_host: tuple[str, int]
) -> tuple[bytes, int, bytes, bytes, int] | None:
    """(topic part, sys flag with the host bits, born host, store host, STORETIMESTAMP's
    position) for the C encoders; None without them or for a topic or host the general path
    must refuse."""
    if NATIVE is None:
        return None
    topic_part = _topic_part(topic)
    if topic_part is None:
        return None
    try:
        born_ip, born6 = pack_host(born_host[0])
        store_ip, store6 = pack_host(store_host[0])
    except ClientError:
        return None
    flags = (sys_flag & ~_V6_BITS) | (_BORN_V6 if born6 else 0) | (_STORE_V6 if store6 else 0)
    return (
        topic_part, flags, born_ip + born_host[1].to_bytes(4, "big"),
        store_ip + store_host[1].to_bytes(4, "big"), _STORE_TS_AT_V6 if born6 else _STORE_TS_AT_V4,
    )


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
        self.segment_error: OSError | None = None  # why the last segment creation failed

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

    def release_cold_pages(self, hot_bytes: int = HOT_BYTES) -> None:
        """Drop the process's mappings of synced pages older than the last ``hot_bytes`` (see
        MappedFile.release_pages): without it the resident size grows with every byte stored,
        since a mapped segment's pages count as the broker's memory for as long as they stay
        in the page cache. Pulls of old data map pages again until the next call."""
        keep_from = self.max_offset - hot_bytes
        for mf in self.mfq.files:
            if mf.file_from_offset >= keep_from:
                break
            mf.release_pages(keep_from - mf.file_from_offset)

    # -- appending ------------------------------------------------------------------------------

    def append(self, batch: EncodedBatch) -> AppendMessageResult | PutMessageStatus:
        """Write an encoded batch (or single message) and assign its offsets.

        Returns the result, or CREATE_MAPPED_FILE_FAILED when a new segment cannot be made.
        """
        blob = batch.blob
        size = len(blob)
        key = (batch.topic, batch.queue_id)
        rels = batch.rel_positions
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
            table = self.topic_queue_table
            first_qoff = qoff = table.get(key, 0)
            buf = mf.buf
            buf[pos : pos + size] = blob
            counts, ts_ats = batch.counts_in_queue, batch.store_ts_ats
            if len(rels) == 1:  # a single message: no loop
                if counts[0]:
                    _QOFF_PHY.pack_into(buf, pos + _QOFF_AT, qoff, phy)
                    qoff += 1
                else:
                    _QOFF_PHY.pack_into(buf, pos + _QOFF_AT, 0, phy)
                _I64.pack_into(buf, pos + ts_ats[0], now)
            else:
                qoff = self._patch_batch(buf, pos, phy, qoff, now, batch)
            mf.wrote_position = pos + size  # publish: readers see whole messages only
            if qoff != first_qoff:
                table[key] = qoff
            self.begin_time_in_lock = 0
        return AppendMessageResult(phy, size, now, first_qoff, len(rels), rels, batch.id_prefix)

    @staticmethod
    def _patch_batch(buf: Any, pos: int, phy: int, qoff: int, now: int,
                     batch: EncodedBatch) -> int:
        """Queue offset, physical offset and store time of each message of a batch; returns the
        next queue offset."""
        counts, ts_ats = batch.counts_in_queue, batch.store_ts_ats
        if NATIVE is not None and all(counts) and ts_ats.count(ts_ats[0]) == len(ts_ats):
            return NATIVE.patch_batch(buf, pos, phy, qoff, now, batch.rel_positions, ts_ats[0])
        pack_qp, pack_ts = _QOFF_PHY.pack_into, _I64.pack_into
        for i, rel in enumerate(batch.rel_positions):
            at = pos + rel
            if counts[i]:
                pack_qp(buf, at + _QOFF_AT, qoff, phy + rel)
                qoff += 1
            else:
                pack_qp(buf, at + _QOFF_AT, 0, phy + rel)
            pack_ts(buf, at + ts_ats[i], now)
        return qoff

    def _segment_for(self, size: int) -> MappedFile | None:
        """The segment a blob of ``size`` goes to when the last one cannot take it (or there is
        none): the rest of a too-full segment is closed with a blank entry that readers skip.
        None when a new segment cannot be created. Called under ``put_lock``."""
        try:
            mf = self.mfq.last_file_for_append()
            if size + BLANK_ENTRY_SIZE > mf.remaining:
                _BLANK.pack_into(mf.buf, mf.wrote_position, mf.remaining, BLANK_MAGIC_CODE)
                mf.wrote_position = mf.file_size
                mf = self.mfq.last_file_for_append()
        except OSError as e:  # the store tells a full disk (segment_error) from other failures
            self.segment_error = e
            log.debug("cannot create commit log segment err=%s", e)  # RunningFlags logs it
            return None
        return mf

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
