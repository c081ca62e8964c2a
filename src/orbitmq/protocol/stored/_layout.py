"""The stored layout: field offsets, header structs, and the checks every reader makes of a
stored message (``_read``), so that a malformed one gets one verdict everywhere. Part of the
stored codec (see the package docstring); nothing outside ``orbitmq.protocol.stored`` knows these.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from typing import Any

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol.message import HOST_V6_BITS, MessageSysFlag
from orbitmq.protocol.native import NATIVE
from orbitmq.protocol.properties import parse_properties

MAGIC_CODE = -626843481  # 0xDAA320A7 as a signed i32
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194 as a signed i32
BLANK_ENTRY_SIZE = 8  # TOTALSIZE + MAGICCODE: the least a segment keeps free for its end marker
TOPIC_SIZE_MAX = 127  # bytes; RocketMQ's limit (the u8 length field would allow 255)

# -- field offsets ------------------------------------------------------------------------------
# Fixed up to BORNHOST; after it they depend on the host kinds (sysFlag BORNHOST_V6 / STOREHOST_V6).
TOTALSIZE_AT = 0
MAGICCODE_AT = 4
BODYCRC_AT = 8
QUEUEID_AT = 12
FLAG_AT = 16
QUEUEOFFSET_AT = 20
PHYSICALOFFSET_AT = 28
SYSFLAG_AT = 36
BORNTIMESTAMP_AT = 40
BORNHOST_AT = 48
_HOST_V4_SIZE = 4 + 4  # IPv4 address + port
_HOST_V6_SIZE = 16 + 4
STORETIMESTAMP_AT_V4 = BORNHOST_AT + _HOST_V4_SIZE  # after a v4 born host
STORETIMESTAMP_AT_V6 = BORNHOST_AT + _HOST_V6_SIZE
POSITION_FIELDS_END = STORETIMESTAMP_AT_V6 + 8  # every field patch_positions reads or writes
_TAIL_MIN = 1 + 1 + 2  # topic length, at least one topic byte, properties length
_BODY_TAIL = 1 + 2  # what must follow the body besides the topic: its length and the props length

SCAN_BLANK, SCAN_BAD = 1, 2  # scan's stops besides 0, "limit or count reached"

# Header layouts (TOTALSIZE .. body length) by host kind: born v6 + 2 * store v6.
_HEADERS = [
    struct.Struct(">iiiiiqqiq" + ("16s" if born6 else "4s") + "iq" + ("16s" if store6 else "4s")
                  + "iiqi")
    for store6 in (False, True)
    for born6 in (False, True)
]
HEADER_SIZE_V4 = _HEADERS[0].size  # 88
MIN_STORED_SIZE = HEADER_SIZE_V4 + _TAIL_MIN
_BORN_V6 = int(MessageSysFlag.BORNHOST_V6)
_STORE_V6 = int(MessageSysFlag.STOREHOST_V6)
_HOST_KIND_SHIFT = 4  # (sys_flag & HOST_V6_BITS) >> 4 == born v6 + 2 * store v6
_PREFIX = struct.Struct(">ii")  # TOTALSIZE, MAGICCODE
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_CRC_MASK = 0x7FFFFFFF
_COMPRESSED = int(MessageSysFlag.COMPRESSED)


def _header(sys_flag: int) -> struct.Struct:
    return _HEADERS[(sys_flag & HOST_V6_BITS) >> _HOST_KIND_SHIFT]


def _store_ts_at(sys_flag: int) -> int:
    return STORETIMESTAMP_AT_V6 if sys_flag & _BORN_V6 else STORETIMESTAMP_AT_V4


# zlib's CRC-32 (of a whole buffer); the C speedups' carry-less one when built, several times
# faster on the large bodies of transaction batches (equal values: test_native_speedups.py).
crc32: Any = NATIVE.crc32 if NATIVE is not None else zlib.crc32


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """BODYCRC: CRC-32 of the body with the sign bit cleared, as RocketMQ's UtilAll.crc32."""
    crc: int = crc32(body)
    return crc & _CRC_MASK


@functools.lru_cache(maxsize=1024)
def pack_host(host: str) -> tuple[bytes, bool]:
    """The address bytes of a literal IP and whether it is IPv6 (cached: hosts repeat).

    Raises:
        ClientError: ``host`` is not an IP literal.
    """
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ClientError(f"not an IP address: {host!r}") from None
    return addr.packed, addr.version == 6


def _host_text(ip: bytes, port: int) -> tuple[str, int]:
    if len(ip) == 4:  # IPv4, nearly always: without building an ipaddress object per message
        return f"{ip[0]}.{ip[1]}.{ip[2]}.{ip[3]}", port
    return str(ipaddress.ip_address(ip)), port


# -- topics ---------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _topic_problem(raw: bytes) -> str | None:
    """Why stored topic bytes (length already checked) are not a topic, or None (cached: a
    store sees few topics). A topic names a consume queue directory."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return "topic is not UTF-8"
    if b"/" in raw or b"\x00" in raw or raw in (b".", b".."):
        return "topic cannot name a queue directory ('/', NUL, '.' or '..')"
    return None


@functools.lru_cache(maxsize=4096)
def _topic_part(topic: str) -> bytes | str:
    """TOPIC length byte + TOPIC as stored, or why the topic cannot be stored (cached: every
    append needs it)."""
    try:
        raw = topic.encode("utf-8")
    except UnicodeEncodeError:
        return "topic is not UTF-8"
    if not 0 < len(raw) <= TOPIC_SIZE_MAX:
        return f"topic must have 1..{TOPIC_SIZE_MAX} bytes, got {len(raw)}"
    problem_text = _topic_problem(raw)
    return problem_text if problem_text is not None else bytes((len(raw),)) + raw


@functools.lru_cache(maxsize=256)
def _topic_text(raw: bytes) -> str:
    return raw.decode("utf-8")  # checked by _topic_problem first


# -- the checks ------------------------------------------------------------------------------------


def _read(mv: memoryview, pos: int, end: int) -> tuple[tuple[Any, ...], bytes, dict[str, str]] | str:
    """The header fields, topic bytes and properties of the message at ``pos`` (lying below
    ``end``), or why it is not a message. The C ``scan_stored`` makes the same checks in the
    same order."""
    if end - pos < BLANK_ENTRY_SIZE:
        return "truncated message header"
    total, magic = _PREFIX.unpack_from(mv, pos)
    if magic != MAGIC_CODE:
        return f"bad magic code {magic & 0xFFFFFFFF:#010x}"
    if total < MIN_STORED_SIZE or total > end - pos:
        return f"impossible total size {total}"
    (sys_flag,) = _I32.unpack_from(mv, pos + SYSFLAG_AT)
    head = _header(sys_flag)
    head_size = head.size
    if total < head_size + _TAIL_MIN:
        return f"impossible total size {total}"
    fields = head.unpack_from(mv, pos)
    if fields[3] < 0 or fields[5] < 0:
        return "negative queue id or queue offset"
    body_len = fields[16]
    if body_len < 0 or head_size + body_len + _BODY_TAIL > total:
        return f"body length {body_len} overruns the message"
    at = pos + head_size + body_len
    topic_len = mv[at]
    if topic_len == 0 or topic_len > TOPIC_SIZE_MAX or (
            head_size + body_len + _BODY_TAIL + topic_len > total):
        return f"bad topic length {topic_len}"
    topic_raw = bytes(mv[at + 1 : at + 1 + topic_len])
    topic_problem = _topic_problem(topic_raw)
    if topic_problem is not None:
        return topic_problem
    at += 1 + topic_len
    (props_len,) = _I16.unpack_from(mv, at)
    if head_size + body_len + _BODY_TAIL + topic_len + props_len != total:
        return "field lengths disagree with the total size"
    try:
        props = parse_properties(mv[at + 2 : at + 2 + props_len])
    except RemoteProtocolError as e:
        return str(e)
    return fields, topic_raw, props


def _view(buf: Any) -> memoryview:
    mv = memoryview(buf)
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


def problem(buf: Any, pos: int = 0, end: int | None = None) -> str | None:
    """Why the bytes at ``pos`` (up to ``end``, default the buffer's end) are not a stored
    message by the checks every reader makes (body CRC aside), or None."""
    mv = _view(buf)
    got = _read(mv, pos, len(mv) if end is None else min(end, len(mv)))
    return got if isinstance(got, str) else None


def verify(buf: Any, pos: int = 0, *, end: int | None = None,
           physical_offset: int | None = None, check_crc: bool = True) -> str | None:
    """``problem``, then (recovery) PHYSICALOFFSET against where the message lies and the body
    CRC: why the message at ``pos`` is not valid, or None when it is."""
    mv = _view(buf)
    got = _read(mv, pos, len(mv) if end is None else min(end, len(mv)))
    if isinstance(got, str):
        return got
    fields = got[0]
    if physical_offset is not None and fields[6] != physical_offset:
        return f"physical offset field {fields[6]} differs from the position"
    if check_crc:
        at = pos + _header(fields[7]).size
        if crc32(mv[at : at + fields[16]]) & _CRC_MASK != fields[2]:
            return "body CRC mismatch"
    return None


# -- single fields -----------------------------------------------------------------------------------


def is_blank_entry(buf: Any, pos: int = 0) -> bool:
    """Whether the entry at ``pos`` is a segment's end marker (BLANK_ENTRY_SIZE bytes needed)."""
    magic: int = _PREFIX.unpack_from(buf, pos)[1]
    return magic == BLANK_MAGIC_CODE


def is_zero_entry(buf: Any, pos: int = 0) -> bool:
    """Whether TOTALSIZE and MAGICCODE at ``pos`` are both zero: where written data ends."""
    return _PREFIX.unpack_from(buf, pos) == (0, 0)


def write_blank_entry(buf: Any, pos: int, size: int) -> None:
    """Close a segment: the entry at ``pos`` says the ``size`` bytes left hold no message."""
    _PREFIX.pack_into(buf, pos + TOTALSIZE_AT, size, BLANK_MAGIC_CODE)


def total_size(buf: Any, pos: int = 0) -> int:
    """TOTALSIZE of the entry at ``pos`` (a message's size or a blank entry's), unchecked; the
    buffer needs BLANK_ENTRY_SIZE bytes there."""
    size: int = _I32.unpack_from(buf, pos + TOTALSIZE_AT)[0]
    return size


def physical_offset_span(pos: int = 0) -> tuple[int, int]:
    """(start, end) of the PHYSICALOFFSET field of the message at ``pos``: a header field every
    check of a stored message compares with where it lies (for the tools that damage one on
    purpose: orbitmq.testing.corrupt)."""
    return pos + PHYSICALOFFSET_AT, pos + PHYSICALOFFSET_AT + 8


def store_timestamp(buf: Any, pos: int = 0) -> int:
    """STORETIMESTAMP of the message at ``pos``, unchecked; the buffer needs
    POSITION_FIELDS_END bytes there."""
    (sys_flag,) = _I32.unpack_from(buf, pos + SYSFLAG_AT)
    timestamp: int = _I64.unpack_from(buf, pos + _store_ts_at(sys_flag))[0]
    return timestamp
