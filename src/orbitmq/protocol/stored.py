"""The stored message format: the bytes of the CommitLog and of a pull response, and the ONLY
Python code that knows them.

One stored message, big-endian (``v4`` hosts; an IPv6 host takes 16 address bytes instead of 4 and
sets its sysFlag bit, which moves every field after it)::

    TOTALSIZE i32 | MAGICCODE i32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 | QUEUEOFFSET i64
    | PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST (ip + port i32)
    | STORETIMESTAMP i64 | STOREHOST (ip + port i32) | RECONSUMETIMES i32
    | PREPAREDTRANSACTIONOFFSET i64 | BODY (i32 length + bytes) | TOPIC (u8 length + bytes)
    | PROPERTIES (i16 length + ``k\\x01v\\x02...``, see ``protocol.properties``)

BODYCRC is ``zlib.crc32(body) & 0x7FFFFFFF``. A segment's unused tail starts with an 8-byte entry
(TOTALSIZE = bytes left, BLANK_MAGIC_CODE).

What the module offers, by who needs it:

- encode: ``encode_messages`` (the store's general path: messages with a properties dict),
  ``encode_wire_single`` / ``encode_wire_batch`` (a send's properties text or batch body straight
  to stored form, no message object), ``encode_stored_message`` (one message, every field given);
  all but the last leave QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP to ``patch_positions``,
  which the CommitLog calls under its lock once it knows where the bytes went.
- scan and verify: ``scan`` (dispatch: what a queue entry and the index need of each message) and
  ``verify`` (recovery: the same checks, plus the offset field and the body CRC).
- peek: ``peek`` / ``iter_peek``, every field but the body, for the filters and bulk readers.
- decode: ``decode_stored_message`` / ``iter_stored_messages`` (MessageExt for the SDK and the
  broker), ``body_of`` (the body of a peeked message, for Spark's bulk decode).

Every reader checks a message the same way, so that a malformed one gets the same verdict
everywhere (``problem`` names it): the magic code, TOTALSIZE against the bytes present and the
header, non-negative queue id and queue offset, the body, topic and properties lengths adding up
to TOTALSIZE exactly, the topic (1..127 bytes of UTF-8 that can name a queue directory: no ``/``,
no NUL, not ``.`` or ``..``) and the properties rule. Readers of the body (recovery, decoding)
check its CRC too; dispatch and the filters do not read it.

The hot functions (``encode_wire_single``, ``encode_wire_batch``, ``patch_positions``, ``scan``)
have a C twin in ``_speedups.c`` that takes the same arguments and gives the same bytes and the
same refusals (tests/unit/test_stored_twins.py); ``*_py`` are the Python ones, and the module picks
the C twin unless it is missing or ``ORBITMQ_PURE_PYTHON=1``.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol.batch import iter_entries
from orbitmq.protocol.message import (
    HOST_V6_BITS,
    MessageExt,
    MessageSysFlag,
    PropertyKey,
    offset_msg_id,
    tags_hash,
    takes_queue_entry,
)
from orbitmq.protocol.native import NATIVE
from orbitmq.protocol.properties import (
    PROPERTIES_SIZE_MAX,
    encode_properties,
    parse_properties,
)

__all__ = [
    "MAGIC_CODE",
    "BLANK_MAGIC_CODE",
    "BLANK_ENTRY_SIZE",
    "MIN_STORED_SIZE",
    "POSITION_FIELDS_END",
    "TOPIC_SIZE_MAX",
    "SCAN_BLANK",
    "SCAN_BAD",
    "EncodedBatch",
    "PropertiesSizeError",
    "StoredPeek",
    "ScanRecord",
    "StorableMessage",
    "body_crc",
    "pack_host",
    "encode_messages",
    "encode_wire_single",
    "encode_wire_batch",
    "encode_stored_message",
    "patch_positions",
    "scan",
    "verify",
    "problem",
    "peek",
    "iter_peek",
    "body_of",
    "total_size",
    "is_blank_entry",
    "is_zero_entry",
    "write_blank_entry",
    "store_timestamp",
    "decode_stored_message",
    "iter_stored_messages",
]

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
_QOFF_PHY = struct.Struct(">qq")  # QUEUEOFFSET and PHYSICALOFFSET are adjacent
_CRC_MASK = 0x7FFFFFFF
_COMPRESSED = int(MessageSysFlag.COMPRESSED)
_ROUTED = (PropertyKey.DELAY, PropertyKey.TRAN_MSG)  # properties the broker must act on


def _header(sys_flag: int) -> struct.Struct:
    return _HEADERS[(sys_flag & HOST_V6_BITS) >> _HOST_KIND_SHIFT]


def _store_ts_at(sys_flag: int) -> int:
    return STORETIMESTAMP_AT_V6 if sys_flag & _BORN_V6 else STORETIMESTAMP_AT_V4


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """BODYCRC: CRC-32 of the body with the sign bit cleared, as RocketMQ's UtilAll.crc32."""
    return zlib.crc32(body) & _CRC_MASK


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


# -- encoding ----------------------------------------------------------------------------------


class EncodedBatch:
    """Messages of one topic and queue in stored form back to back, with QUEUEOFFSET,
    PHYSICALOFFSET and STORETIMESTAMP left for ``patch_positions``.

    ``rel_positions`` holds where each message starts in ``blob``; ``id_prefix`` the store host
    (ip + port), the first half of every offset message id.
    """

    __slots__ = ("blob", "rel_positions", "topic", "queue_id", "id_prefix")

    def __init__(self, topic: str, queue_id: int, id_prefix: bytes, blob: bytearray,
                 rel_positions: list[int]) -> None:
        self.blob = blob
        self.rel_positions = rel_positions
        self.topic = topic
        self.queue_id = queue_id
        self.id_prefix = id_prefix


class PropertiesSizeError(ClientError):
    """A message's properties take more than PROPERTIES_SIZE_MAX bytes."""


class StorableMessage(Protocol):
    """What ``encode_messages`` reads of a message (the store's MessageInner has it)."""

    @property
    def topic(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def body(self) -> bytes: ...
    @property
    def properties(self) -> Mapping[str, str]: ...
    @property
    def flag(self) -> int: ...
    @property
    def sys_flag(self) -> int: ...
    @property
    def born_timestamp(self) -> int: ...
    @property
    def born_host(self) -> tuple[str, int]: ...
    @property
    def store_host(self) -> tuple[str, int]: ...
    @property
    def reconsume_times(self) -> int: ...
    @property
    def prepared_transaction_offset(self) -> int: ...


def encode_messages(
    msgs: Sequence[StorableMessage], max_message_size: int, max_blob_size: int
) -> EncodedBatch:
    """``msgs`` (one topic and queue) in stored form, positions left to patch.

    The host kind bits of each sysFlag are set from the hosts given.

    Raises:
        PropertiesSizeError: a message's properties are over PROPERTIES_SIZE_MAX bytes.
        ClientError: no message, several topics or queues, a topic that cannot be stored, a body
            over ``max_message_size``, properties that could not be read back, a host that is
            not an IP, or more than ``max_blob_size`` bytes in all.
    """
    if not msgs:
        raise ClientError("no message to encode")
    first = msgs[0]
    topic, queue_id = first.topic, first.queue_id
    topic_part = _topic_part(topic)
    if isinstance(topic_part, str):
        raise ClientError(topic_part)
    store_ip, store6 = pack_host(first.store_host[0])
    store_port = first.store_host[1]
    blob = bytearray()
    rels: list[int] = []
    tail_size = len(topic_part) + 2
    crc32 = zlib.crc32
    for msg in msgs:
        body = msg.body
        if msg.topic != topic or msg.queue_id != queue_id:
            raise ClientError("the messages of one append share their topic and queue")
        if len(body) > max_message_size:
            raise ClientError(f"message body of {len(body)} bytes exceeds {max_message_size}")
        props = encode_properties(msg.properties)
        if len(props) > PROPERTIES_SIZE_MAX:
            raise PropertiesSizeError(
                f"message properties take {len(props)} bytes, over {PROPERTIES_SIZE_MAX}")
        born_ip, born6 = pack_host(msg.born_host[0])
        sys_flag = (msg.sys_flag & ~HOST_V6_BITS) | (_BORN_V6 if born6 else 0) | (
            _STORE_V6 if store6 else 0)
        head = _HEADERS[born6 + 2 * store6]
        rels.append(len(blob))
        blob += head.pack(
            head.size + len(body) + tail_size + len(props), MAGIC_CODE,
            crc32(body) & _CRC_MASK, queue_id, msg.flag, 0, 0, sys_flag,
            msg.born_timestamp, born_ip, msg.born_host[1], 0, store_ip, store_port,
            msg.reconsume_times, msg.prepared_transaction_offset, len(body),
        )
        blob += body
        blob += topic_part
        blob += len(props).to_bytes(2, "big")
        blob += props
        if len(blob) > max_blob_size:
            raise ClientError(f"the messages take more than {max_blob_size} bytes in stored form")
    return EncodedBatch(topic, queue_id, store_ip + store_port.to_bytes(4, "big"), blob, rels)


@functools.lru_cache(maxsize=4096)
def _wire_context(topic: str, born_host: tuple[str, int],
                  store_host: tuple[str, int]) -> tuple[bytes, bytes, bytes] | str:
    """(topic part, born host, store host) as the wire encoders take them (host = packed ip +
    i32 port), or why the send cannot be stored; cached: senders repeat all three."""
    topic_part = _topic_part(topic)
    if isinstance(topic_part, str):
        return topic_part
    try:
        born_ip, _ = pack_host(born_host[0])
        store_ip, _ = pack_host(store_host[0])
    except ClientError as e:
        return str(e)
    return (topic_part, born_ip + born_host[1].to_bytes(4, "big"),
            store_ip + store_host[1].to_bytes(4, "big"))


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
    """One SEND_MESSAGE(_V2) in stored form from its body and the header's properties text, with
    no dict and no message object (the hot path of a send).

    Returns None when a property needs the broker's attention (DELAY, TRAN_MSG): the caller then
    parses the properties (``parse_properties``) and goes through ``encode_messages``.

    Raises:
        RemoteProtocolError: malformed or oversized properties, or a topic or host that cannot
            be stored; the message is the remark to answer with.
    """
    ctx = _wire_context(topic, born_host, store_host)
    if isinstance(ctx, str):
        raise RemoteProtocolError(ctx)
    raw = properties.encode("utf-8", "surrogatepass") if properties else b""
    blob = _encode_single(body, raw, flag, ctx[0], queue_id, sys_flag, born_timestamp, ctx[1],
                          ctx[2], reconsume_times)
    if blob is None:
        return None
    return EncodedBatch(topic, queue_id, ctx[2], blob, [0])


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
    """A SEND_BATCH_MESSAGE body (``protocol.batch``) straight to stored form, without a message
    object per entry; each entry's properties are copied as they came once they pass the rule.

    Returns None when an entry holds DELAY or TRAN_MSG: the caller decodes the batch
    (``decode_batch``) and decides.

    Raises:
        RemoteProtocolError: a malformed entry, malformed or oversized properties, an empty
            batch, a body over ``max_message_size``, more than ``max_blob_size`` bytes in stored
            form, or a topic or host that cannot be stored.
    """
    ctx = _wire_context(topic, born_host, store_host)
    if isinstance(ctx, str):
        raise RemoteProtocolError(ctx)
    out = _encode_batch(body, ctx[0], queue_id, sys_flag, born_timestamp, ctx[1], ctx[2],
                        reconsume_times, max_message_size, max_blob_size)
    if out is None:
        return None
    return EncodedBatch(topic, queue_id, ctx[2], out[0], out[1])


def _check_context(topic_part: bytes, born_host: bytes, store_host: bytes) -> int:
    """The host kind bits of the hosts given; ValueError for arguments no caller should pass."""
    if len(topic_part) < 2 or topic_part[0] != len(topic_part) - 1:
        raise ValueError("topic_part must be the u8 length and the topic")
    sizes = (_HOST_V4_SIZE, _HOST_V6_SIZE)
    if len(born_host) not in sizes or len(store_host) not in sizes:
        raise ValueError("hosts must be packed ip + port (8 or 20 bytes)")
    return (_BORN_V6 if len(born_host) == _HOST_V6_SIZE else 0) | (
        _STORE_V6 if len(store_host) == _HOST_V6_SIZE else 0)


def _check_ints(queue_id: int, sys_flag: int, born_timestamp: int, reconsume_times: int,
                flag: int = 0) -> None:
    """OverflowError, as the C twin's argument parsing raises, for a field its width cannot hold
    (the header parser range-checks them first; this keeps both twins alike)."""
    for value in (queue_id, sys_flag, reconsume_times, flag):
        if not -(2**31) <= value < 2**31:
            raise OverflowError("a 32-bit field is out of range")
    if not -(2**63) <= born_timestamp < 2**63:
        raise OverflowError("a 64-bit field is out of range")


def _props_size_problem(size: int) -> str:
    return f"message properties take {size} bytes, over {PROPERTIES_SIZE_MAX}"


def _canonical(raw: bytes | memoryview) -> bytes:
    """Well-formed properties with their final separator (writers' form; readers accept it
    missing)."""
    raw = bytes(raw)
    return raw if not raw or raw[-1] == 2 else raw + b"\x02"


def _pack_one(flag: int, body: bytes | memoryview, props: bytes, topic_part: bytes,
              queue_id: int, sys_flag: int, born_timestamp: int, born_host: bytes,
              store_host: bytes, reconsume_times: int) -> bytes:
    head = _header(sys_flag)
    return b"".join((
        head.pack(head.size + len(body) + len(topic_part) + 2 + len(props), MAGIC_CODE,
                  zlib.crc32(body) & _CRC_MASK, queue_id, flag, 0, 0, sys_flag, born_timestamp,
                  born_host[:-4], int.from_bytes(born_host[-4:], "big", signed=True), 0,
                  store_host[:-4], int.from_bytes(store_host[-4:], "big", signed=True),
                  reconsume_times, 0, len(body)),
        body, topic_part, len(props).to_bytes(2, "big"), props,
    ))


def encode_wire_single_py(
    body: bytes | memoryview, properties: bytes, flag: int, topic_part: bytes, queue_id: int,
    sys_flag: int, born_timestamp: int, born_host: bytes, store_host: bytes,
    reconsume_times: int,
) -> bytearray | None:
    """The stored form of one message from its raw (UTF-8) properties; the Python twin of the C
    ``encode_wire_single`` (see ``encode_wire_single`` for the meaning). Order of refusals:
    properties over the size limit, then the properties rule, then (after the DELAY / TRAN_MSG
    decline) the size with the final separator added."""
    _check_ints(queue_id, sys_flag, born_timestamp, reconsume_times, flag)
    host_bits = _check_context(topic_part, born_host, store_host)
    if len(properties) > PROPERTIES_SIZE_MAX:
        raise RemoteProtocolError(_props_size_problem(len(properties)))
    props = parse_properties(properties)
    if any(name in props for name in _ROUTED):
        return None
    raw = _canonical(properties)
    if len(raw) > PROPERTIES_SIZE_MAX:
        raise RemoteProtocolError(_props_size_problem(len(raw)))
    flags = (sys_flag & ~HOST_V6_BITS) | host_bits
    return bytearray(_pack_one(flag, body, raw, topic_part, queue_id, flags, born_timestamp,
                               born_host, store_host, reconsume_times))


def encode_wire_batch_py(
    body: bytes | memoryview, topic_part: bytes, queue_id: int, sys_flag: int,
    born_timestamp: int, born_host: bytes, store_host: bytes, reconsume_times: int,
    max_message_size: int, max_blob_size: int,
) -> tuple[bytearray, list[int]] | None:
    """The stored form of every entry of a batch body, back to back, and where each starts;
    the Python twin of the C ``encode_wire_batch``. Order of refusals: entry by entry, its
    lengths then its properties (``protocol.batch.iter_entries``, ``parse_properties``); an
    empty batch; then the DELAY / TRAN_MSG decline; then entry by entry the body limit, the
    properties size (with the final separator) and the blob limit."""
    _check_ints(queue_id, sys_flag, born_timestamp, reconsume_times)
    host_bits = _check_context(topic_part, born_host, store_host)
    entries = []
    routed = False
    for pos, flag, entry_body, raw in iter_entries(body):
        try:
            props = parse_properties(raw)
        except RemoteProtocolError as e:
            raise RemoteProtocolError(f"batch entry at {pos}: {e}") from None
        routed = routed or any(name in props for name in _ROUTED)
        entries.append((pos, flag, entry_body, raw))
    if not entries:
        raise RemoteProtocolError("empty batch")
    if routed:
        return None
    flags = (sys_flag & ~HOST_V6_BITS) | host_bits
    head_size = _header(flags).size
    parts, rels, size = [], [], 0
    for pos, flag, entry_body, raw in entries:
        if len(entry_body) > max_message_size:
            raise RemoteProtocolError(
                f"batch entry at {pos}: body of {len(entry_body)} bytes exceeds the limit "
                f"{max_message_size}")
        props_raw = _canonical(raw)
        if len(props_raw) > PROPERTIES_SIZE_MAX:
            raise RemoteProtocolError(
                f"batch entry at {pos}: {_props_size_problem(len(props_raw))}")
        rels.append(size)
        size += head_size + len(entry_body) + len(topic_part) + 2 + len(props_raw)
        if size > max_blob_size:
            raise RemoteProtocolError(f"the batch takes more than {max_blob_size} bytes in "
                                      "stored form")
        parts.append(_pack_one(flag, entry_body, props_raw, topic_part, queue_id, flags,
                               born_timestamp, born_host, store_host, reconsume_times))
    return bytearray(b"".join(parts)), rels


def patch_positions_py(buf: Any, pos: int, physical_offset: int, queue_offset: int,
                       store_ts: int, rel_positions: list[int]) -> int:
    """QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP of every message of a blob appended at
    ``pos`` of ``buf`` (a segment) whose first byte has commit log offset ``physical_offset``;
    the Python twin of the C ``patch_positions``. Queue offsets count up from ``queue_offset``
    for the messages that take one (``takes_queue_entry``), the others get 0.

    Returns the next queue offset.

    Raises:
        ValueError: a message's position fields lie outside ``buf``.
    """
    size = len(buf)
    qoff = queue_offset
    for rel in rel_positions:
        at = pos + rel
        if pos < 0 or rel < 0 or at + POSITION_FIELDS_END > size:
            raise ValueError("patch_positions: position outside the buffer")
        (sys_flag,) = _I32.unpack_from(buf, at + SYSFLAG_AT)
        if takes_queue_entry(sys_flag):
            _QOFF_PHY.pack_into(buf, at + QUEUEOFFSET_AT, qoff, physical_offset + rel)
            qoff += 1
        else:
            _QOFF_PHY.pack_into(buf, at + QUEUEOFFSET_AT, 0, physical_offset + rel)
        _I64.pack_into(buf, at + _store_ts_at(sys_flag), store_ts)
    return qoff


def encode_stored_message(
    *,
    topic: str,
    body: bytes,
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: tuple[str, int] = ("127.0.0.1", 0),
    store_timestamp: int = 0,
    store_host: tuple[str, int] = ("127.0.0.1", 10911),
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    properties: Mapping[str, str] | None = None,
) -> bytes:
    """One message in stored form, every field given (the broker's own copies, tests).

    The host kind bits of ``sys_flag`` are set from the hosts given.

    Raises:
        ClientError: a topic that cannot be stored, properties too long or that could not be
            read back, or a host not an IP.
    """
    topic_part = _topic_part(topic)
    if isinstance(topic_part, str):
        raise ClientError(topic_part)
    props_raw = encode_properties(properties or {})
    if len(props_raw) > PROPERTIES_SIZE_MAX:
        raise PropertiesSizeError(_props_size_problem(len(props_raw)))
    born_ip, born6 = pack_host(born_host[0])
    store_ip, store6 = pack_host(store_host[0])
    flags = (int(sys_flag) & ~HOST_V6_BITS) | (_BORN_V6 if born6 else 0) | (
        _STORE_V6 if store6 else 0)
    head = _header(flags)
    total = head.size + len(body) + len(topic_part) + 2 + len(props_raw)
    return b"".join((
        head.pack(total, MAGIC_CODE, body_crc(body), queue_id, flag, queue_offset,
                  physical_offset, flags, born_timestamp, born_ip, born_host[1], store_timestamp,
                  store_ip, store_host[1], reconsume_times, prepared_transaction_offset,
                  len(body)),
        body, topic_part, _I16.pack(len(props_raw)), props_raw,
    ))


# -- reading: one set of checks ------------------------------------------------------------------


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
        if zlib.crc32(mv[at : at + fields[16]]) & _CRC_MASK != fields[2]:
            return "body CRC mismatch"
    return None


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
    if check_crc and zlib.crc32(body) & _CRC_MASK != p.body_crc:
        raise RemoteProtocolError(f"stored message at {p.body_at - _header(p.sys_flag).size}: "
                                  "body CRC mismatch")
    if decompress and p.sys_flag & _COMPRESSED:
        try:
            return zlib.decompress(body)
        except zlib.error as e:
            raise RemoteProtocolError(f"stored message: bad compressed body: {e}") from None
    return body


def is_blank_entry(buf: Any, pos: int = 0) -> bool:
    """Whether the entry at ``pos`` is a segment's end marker (BLANK_ENTRY_SIZE bytes needed)."""
    return _PREFIX.unpack_from(buf, pos)[1] == BLANK_MAGIC_CODE


def is_zero_entry(buf: Any, pos: int = 0) -> bool:
    """Whether TOTALSIZE and MAGICCODE at ``pos`` are both zero: where written data ends."""
    return _PREFIX.unpack_from(buf, pos) == (0, 0)


def write_blank_entry(buf: Any, pos: int, size: int) -> None:
    """Close a segment: the entry at ``pos`` says the ``size`` bytes left hold no message."""
    _PREFIX.pack_into(buf, pos + TOTALSIZE_AT, size, BLANK_MAGIC_CODE)


def total_size(buf: Any, pos: int = 0) -> int:
    """TOTALSIZE of the entry at ``pos`` (a message's size or a blank entry's), unchecked; the
    buffer needs BLANK_ENTRY_SIZE bytes there."""
    return _I32.unpack_from(buf, pos + TOTALSIZE_AT)[0]


def store_timestamp(buf: Any, pos: int = 0) -> int:
    """STORETIMESTAMP of the message at ``pos``, unchecked; the buffer needs
    POSITION_FIELDS_END bytes there."""
    (sys_flag,) = _I32.unpack_from(buf, pos + SYSFLAG_AT)
    return _I64.unpack_from(buf, pos + _store_ts_at(sys_flag))[0]


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


# -- the C twins, when built ---------------------------------------------------------------------

_encode_single: Callable[..., bytearray | None] = encode_wire_single_py
_encode_batch: Callable[..., tuple[bytearray, list[int]] | None] = encode_wire_batch_py
patch_positions: Callable[[Any, int, int, int, int, list[int]], int] = patch_positions_py
scan: Callable[[Any, int, int, int], tuple[list[ScanRecord], int, int, int]] = scan_py
if NATIVE is not None:
    _encode_single = NATIVE.encode_wire_single
    _encode_batch = NATIVE.encode_wire_batch
    patch_positions = NATIVE.patch_positions
    scan = NATIVE.scan_stored
