"""Reading stored messages: peek (every field but the body), decode (MessageExt), bulk reads of a
pull body, and dispatch's scan. Part of the stored codec (see the package docstring);
``scan_py`` is the Python twin of the C ``scan_stored``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any, NamedTuple

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.message import (
    MessageExt,
    PropertyKey,
    offset_msg_id,
    tags_hash,
    takes_queue_entry,
)
from orbitmq.protocol.stored._layout import (
    _COMPRESSED,
    _CRC_MASK,
    _PREFIX,
    BLANK_ENTRY_SIZE,
    BLANK_MAGIC_CODE,
    SCAN_BAD,
    SCAN_BLANK,
    _header,
    _host_text,
    _read,
    _topic_text,
    _view,
)
from orbitmq.protocol.stored._layout import (
    crc32 as _crc32,
)


class StoredPeek(NamedTuple):
    """Every field of a stored message but its body (``body_at``: where the body starts in the
    buffer peeked; ``body_of`` reads it)."""

    total_size: int
    magic_code: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_ip: bytes
    born_port: int
    store_timestamp: int
    store_ip: bytes
    store_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    body_len: int
    body_at: int
    topic: str
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(PropertyKey.TAGS)

    @property
    def tags_code(self) -> int:
        """The ConsumeQueue tags code: Java hashCode of TAGS (0 without tags)."""
        return tags_hash(self.properties.get(PropertyKey.TAGS))

    @property
    def keys(self) -> str | None:
        """The KEYS property as stored (space-separated keys)."""
        return self.properties.get(PropertyKey.KEYS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PropertyKey.UNIQ_KEY)

    @property
    def delay(self) -> str | None:
        return self.properties.get(PropertyKey.DELAY)

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_ip, self.store_port, self.physical_offset)

    @property
    def msg_id(self) -> str:
        """UNIQ_KEY when the producer set one, else the offset message id (RocketMQ's rule)."""
        return self.properties.get(PropertyKey.UNIQ_KEY) or self.offset_msg_id


def peek(buf: Any, pos: int = 0, *, end: int | None = None) -> StoredPeek:
    """Every field of the message at ``pos`` but its body (no copy of it, no CRC check).

    Raises:
        RemoteProtocolError: the bytes are not a stored message (see the module docstring).
    """
    mv = _view(buf)
    got = _read(mv, pos, len(mv) if end is None else min(end, len(mv)))
    if isinstance(got, str):
        raise RemoteProtocolError(f"stored message at {pos}: {got}")
    fields, topic_raw, props = got
    body_at = pos + _header(fields[7]).size
    return tuple.__new__(StoredPeek, (*fields, body_at, _topic_text(topic_raw), props))


def iter_peek(buf: Any) -> Iterator[StoredPeek]:
    """``peek`` of each message lying back to back (a pull response body); stops at a blank
    entry.

    Raises:
        RemoteProtocolError: as ``peek``, or trailing bytes too short for a message.
    """
    mv = _view(buf)
    pos, size = 0, len(mv)
    while pos < size:
        if size - pos < BLANK_ENTRY_SIZE:
            raise RemoteProtocolError(f"{size - pos} trailing bytes after the last message")
        if _PREFIX.unpack_from(mv, pos)[1] == BLANK_MAGIC_CODE:
            return
        p = peek(mv, pos)
        yield p
        pos += p.total_size


def body_of(buf: Any, p: StoredPeek, *, check_crc: bool = True, decompress: bool = False) -> bytes:
    """The body of a message ``peek`` read from ``buf``: CRC checked, and inflated when
    ``decompress`` and its sysFlag says COMPRESSED.

    Raises:
        RemoteProtocolError: CRC mismatch, or a compressed body that does not inflate.
    """
    body = bytes(_view(buf)[p.body_at : p.body_at + p.body_len])
    if check_crc and _crc32(body) & _CRC_MASK != p.body_crc:
        raise RemoteProtocolError(f"stored message at {p.body_at - _header(p.sys_flag).size}: "
                                  "body CRC mismatch")
    if decompress and p.sys_flag & _COMPRESSED:
        try:
            return zlib.decompress(body)
        except zlib.error as e:
            raise RemoteProtocolError(f"stored message: bad compressed body: {e}") from None
    return body


def decode_stored_message(buf: Any, offset: int = 0, *, check_crc: bool = True,
                          decompress: bool = False) -> MessageExt:
    """Decode the stored message starting at ``offset`` of ``buf``.

    Args:
        check_crc: verify BODYCRC against the body.
        decompress: inflate a zlib body when sysFlag has COMPRESSED (the flag is then cleared).

    Raises:
        RemoteProtocolError: the bytes are not a stored message (see the module docstring), a
            CRC mismatch, or a compressed body that does not inflate.
    """
    p = peek(buf, offset)
    body = body_of(buf, p, check_crc=check_crc, decompress=decompress)
    sys_flag = p.sys_flag & ~_COMPRESSED if decompress else p.sys_flag
    offset_id = offset_msg_id(p.store_ip, p.store_port, p.physical_offset)
    props = p.properties
    return MessageExt(
        topic=p.topic,
        body=body,
        queue_id=p.queue_id,
        flag=p.flag,
        queue_offset=p.queue_offset,
        commit_log_offset=p.physical_offset,
        sys_flag=sys_flag,
        born_timestamp=p.born_timestamp,
        born_host=_host_text(p.born_ip, p.born_port),
        store_timestamp=p.store_timestamp,
        store_host=_host_text(p.store_ip, p.store_port),
        reconsume_times=p.reconsume_times,
        prepared_transaction_offset=p.prepared_transaction_offset,
        properties=props,
        body_crc=p.body_crc,
        store_size=p.total_size,
        msg_id=props.get(PropertyKey.UNIQ_KEY) or offset_id,
        offset_msg_id=offset_id,
    )


def iter_stored_messages(buf: Any, *, check_crc: bool = True,
                         decompress: bool = False) -> Iterator[MessageExt]:
    """Decode messages lying back to back (a pull response body); stops at a blank entry.

    Raises:
        RemoteProtocolError: as ``decode_stored_message``, or trailing bytes too short for a
            message.
    """
    mv = _view(buf)
    pos, size = 0, len(mv)
    while pos < size:
        if size - pos < BLANK_ENTRY_SIZE:
            raise RemoteProtocolError(f"{size - pos} trailing bytes after the last message")
        total, magic = _PREFIX.unpack_from(mv, pos)
        if magic == BLANK_MAGIC_CODE:
            return
        msg = decode_stored_message(mv, pos, check_crc=check_crc, decompress=decompress)
        yield msg
        pos += msg.store_size


# -- dispatch's scan -----------------------------------------------------------------------------

# (position, total size, queue id, queue offset, store timestamp, topic bytes, tags code, KEYS,
#  UNIQ_KEY, DELAY): what a ConsumeQueue entry, the index and a delayed message's due time need.
ScanRecord = tuple[int, int, int, int, int, bytes, int, str | None, str | None, str | None]


def scan_py(buf: Any, pos: int, limit: int,
            count_max: int) -> tuple[list[ScanRecord], int, int, int]:
    """Read the stored messages of ``buf`` from ``pos`` while pos < limit and fewer than
    ``count_max`` were read; the Python twin of the C ``scan_stored``.

    Returns (records, position reached, messages read, stop): a record for each message that
    takes a queue entry (``takes_queue_entry``; the others are read and counted), stop 0 when
    the limit or the count was reached, SCAN_BLANK at a blank entry (the segment's end),
    SCAN_BAD at bytes that are not a message (``problem`` says why).
    """
    if pos < 0:
        raise ValueError("scan: negative position")
    mv = _view(buf)
    limit = min(limit, len(mv))
    records: list[ScanRecord] = []
    count = 0
    stop = 0
    while pos < limit and count < count_max:
        if limit - pos >= BLANK_ENTRY_SIZE and _PREFIX.unpack_from(mv, pos)[1] == BLANK_MAGIC_CODE:
            stop = SCAN_BLANK
            break
        got = _read(mv, pos, limit)
        if isinstance(got, str):
            stop = SCAN_BAD
            break
        fields, topic_raw, props = got
        count += 1
        if takes_queue_entry(fields[7]):
            get = props.get
            records.append((pos, fields[0], fields[3], fields[5], fields[11], topic_raw,
                            tags_hash(get(PropertyKey.TAGS)), get(PropertyKey.KEYS),
                            get(PropertyKey.UNIQ_KEY), get(PropertyKey.DELAY)))
        pos += fields[0]
    return records, pos, count, stop
