"""Stored form out of messages, send properties and batch bodies, and the append's position
fields. Part of the stored codec (see the package docstring); ``*_py`` are the Python twins of the
C functions in ``protocol/_native/``.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol.batch import iter_entries
from orbitmq.protocol.message import (
    HOST_V6_BITS,
    TRANSACTION_TYPE_MASK,
    MessageSysFlag,
    PropertyKey,
)
from orbitmq.protocol.native import NATIVE
from orbitmq.protocol.properties import (
    PROPERTIES_SIZE_MAX,
    encode_properties,
    parse_properties,
)
from orbitmq.protocol.stored._layout import (
    _BORN_V6,
    _CRC_MASK,
    _HEADERS,
    _HOST_KIND_SHIFT,
    _HOST_V4_SIZE,
    _HOST_V6_SIZE,
    _I16,
    _I32,
    _I64,
    _STORE_V6,
    MAGIC_CODE,
    POSITION_FIELDS_END,
    QUEUEOFFSET_AT,
    STORETIMESTAMP_AT_V4,
    STORETIMESTAMP_AT_V6,
    SYSFLAG_AT,
    _header,
    _topic_part,
    body_crc,
    pack_host,
)
from orbitmq.protocol.stored._layout import (
    crc32 as _crc32,
)

_QOFF_PHY = struct.Struct(">qq")  # QUEUEOFFSET and PHYSICALOFFSET are adjacent
_NO_QUEUE_ENTRY_TYPES = (int(MessageSysFlag.TRANSACTION_PREPARED_TYPE),
                         int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE))
_ROUTED = (PropertyKey.DELAY, PropertyKey.TRAN_MSG)  # properties the broker must act on


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
    crc32 = _crc32
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


def _wire_parts(topic: str, born_host: tuple[str, int],
                store_host: tuple[str, int]) -> tuple[bytes, bytes, bytes]:
    """``_wire_context``'s parts, or its refusal raised as RemoteProtocolError."""
    ctx = _wire_context(topic, born_host, store_host)
    if isinstance(ctx, str):
        raise RemoteProtocolError(ctx)
    return ctx


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
    ctx = _wire_parts(topic, born_host, store_host)
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
    ctx = _wire_parts(topic, born_host, store_host)
    out = _encode_batch(body, ctx[0], queue_id, sys_flag, born_timestamp, ctx[1], ctx[2],
                        reconsume_times, max_message_size, max_blob_size)
    if out is None:
        return None
    return EncodedBatch(topic, queue_id, ctx[2], out[0], out[1])


def check_wire_batch(
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
) -> tuple[int, int] | None:
    """What ``encode_wire_batch`` with the same arguments would check, refuse or decline, with
    nothing encoded: (the number of entries, how many have no UNIQ_KEY), or None where it would
    return None. For a body that is stored in another form first (a transaction batch's half
    message) and encoded later.

    Raises:
        RemoteProtocolError: as ``encode_wire_batch``.
    """
    ctx = _wire_parts(topic, born_host, store_host)
    return _check_batch(body, ctx[0], queue_id, sys_flag, born_timestamp, ctx[1], ctx[2],
                        reconsume_times, max_message_size, max_blob_size)


def _check_context(topic_part: bytes, born_host: bytes, store_host: bytes) -> int:
    """The host kind bits of the hosts given; ValueError for arguments no caller should pass."""
    if len(topic_part) < 2 or topic_part[0] != len(topic_part) - 1:
        raise ValueError("topic_part must be the u8 length and the topic")
    sizes = (_HOST_V4_SIZE, _HOST_V6_SIZE)
    if len(born_host) not in sizes or len(store_host) not in sizes:
        raise ValueError("hosts must be packed ip + port (8 or 20 bytes)")
    return (_BORN_V6 if len(born_host) == _HOST_V6_SIZE else 0) | (
        _STORE_V6 if len(store_host) == _HOST_V6_SIZE else 0)


_I32_MIN, _I32_MAX, _I64_MIN, _I64_MAX = -(2**31), 2**31 - 1, -(2**63), 2**63 - 1


def _check_ints(queue_id: int, sys_flag: int, born_timestamp: int, reconsume_times: int,
                flag: int = 0) -> None:
    """OverflowError, as the C twin's argument parsing raises, for a field its width cannot hold
    (the header parser range-checks them first; this keeps both twins alike)."""
    if not (_I32_MIN <= queue_id <= _I32_MAX and _I32_MIN <= sys_flag <= _I32_MAX
            and _I32_MIN <= reconsume_times <= _I32_MAX and _I32_MIN <= flag <= _I32_MAX
            and _I64_MIN <= born_timestamp <= _I64_MAX):
        raise OverflowError("a field is out of its width's range")


def _props_size_problem(size: int) -> str:
    return f"message properties take {size} bytes, over {PROPERTIES_SIZE_MAX}"


def _canonical(raw: bytes | memoryview) -> bytes:
    """Well-formed properties with their final separator (writers' form; readers accept it
    missing)."""
    raw = bytes(raw)
    return raw if not raw or raw[-1] == 2 else raw + b"\x02"


# The header with each host as its raw bytes (packed ip + port), by host kind.
_WIRE_HEADERS = [
    struct.Struct(">iiiiiqqiq" + ("20s" if born6 else "8s") + "q" + ("20s" if store6 else "8s")
                  + "iqi")
    for store6 in (False, True)
    for born6 in (False, True)
]


def _pack_one(out: bytearray, flag: int, body: bytes | memoryview, props: bytes,
              topic_part: bytes, queue_id: int, sys_flag: int, born_timestamp: int,
              born_host: bytes, store_host: bytes, reconsume_times: int) -> None:
    """One message in stored form appended to ``out`` (position fields zero)."""
    head = _WIRE_HEADERS[(len(born_host) == _HOST_V6_SIZE) + 2 * (len(store_host) == _HOST_V6_SIZE)]
    out += head.pack(head.size + len(body) + len(topic_part) + 2 + len(props), MAGIC_CODE,
                     _crc32(body) & _CRC_MASK, queue_id, flag, 0, 0, sys_flag, born_timestamp,
                     born_host, 0, store_host, reconsume_times, 0, len(body))
    out += body
    out += topic_part
    out += len(props).to_bytes(2, "big")
    out += props


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
    out = bytearray()
    _pack_one(out, flag, body, raw, topic_part, queue_id, flags, born_timestamp, born_host,
              store_host, reconsume_times)
    return out


_PlannedEntry = tuple[int, "bytes | memoryview", bytes]  # flag, body, properties as stored
_Planned = tuple[int, list[_PlannedEntry], int]


def _plan_batch_py(
    body: bytes | memoryview, topic_part: bytes, queue_id: int, sys_flag: int,
    born_timestamp: int, born_host: bytes, store_host: bytes, reconsume_times: int,
    max_message_size: int, max_blob_size: int,
) -> _Planned | None:
    """The checks of a batch body before it is stored, in ``encode_wire_batch_py``'s order:
    the sysFlag with the hosts' bits, every entry as it will be stored (flag, body, properties
    with the final separator) and how many entries have no UNIQ_KEY (or an empty one); None for
    the DELAY / TRAN_MSG decline."""
    _check_ints(queue_id, sys_flag, born_timestamp, reconsume_times)
    host_bits = _check_context(topic_part, born_host, store_host)
    entries = []
    routed = False
    without_uniq = 0
    for pos, flag, entry_body, raw in iter_entries(body):
        try:
            props = parse_properties(raw)
        except RemoteProtocolError as e:
            raise RemoteProtocolError(f"batch entry at {pos}: {e}") from None
        routed = routed or any(name in props for name in _ROUTED)
        without_uniq += not props.get(PropertyKey.UNIQ_KEY)
        entries.append((pos, flag, entry_body, raw))
    if not entries:
        raise RemoteProtocolError("empty batch")
    if routed:
        return None
    flags = (sys_flag & ~HOST_V6_BITS) | host_bits
    head_size = _header(flags).size
    planned: list[_PlannedEntry] = []
    size = 0
    for pos, flag, entry_body, raw in entries:
        if len(entry_body) > max_message_size:
            raise RemoteProtocolError(
                f"batch entry at {pos}: body of {len(entry_body)} bytes exceeds the limit "
                f"{max_message_size}")
        props_raw = _canonical(raw)
        if len(props_raw) > PROPERTIES_SIZE_MAX:
            raise RemoteProtocolError(
                f"batch entry at {pos}: {_props_size_problem(len(props_raw))}")
        size += head_size + len(entry_body) + len(topic_part) + 2 + len(props_raw)
        if size > max_blob_size:
            raise RemoteProtocolError(f"the batch takes more than {max_blob_size} bytes in "
                                      "stored form")
        planned.append((flag, entry_body, props_raw))
    return flags, planned, without_uniq


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
    plan = _plan_batch_py(body, topic_part, queue_id, sys_flag, born_timestamp, born_host,
                          store_host, reconsume_times, max_message_size, max_blob_size)
    if plan is None:
        return None
    flags, planned, _without_uniq = plan
    out, rels = bytearray(), []
    for flag, entry_body, props_raw in planned:
        rels.append(len(out))
        _pack_one(out, flag, entry_body, props_raw, topic_part, queue_id, flags, born_timestamp,
                  born_host, store_host, reconsume_times)
    return out, rels


def check_wire_batch_py(
    body: bytes | memoryview, topic_part: bytes, queue_id: int, sys_flag: int,
    born_timestamp: int, born_host: bytes, store_host: bytes, reconsume_times: int,
    max_message_size: int, max_blob_size: int,
) -> tuple[int, int] | None:
    """``encode_wire_batch_py``'s checks and refusals with nothing encoded: (entries, entries
    without a UNIQ_KEY), or None for its decline; the Python twin of the C
    ``check_wire_batch``."""
    plan = _plan_batch_py(body, topic_part, queue_id, sys_flag, born_timestamp, born_host,
                          store_host, reconsume_times, max_message_size, max_blob_size)
    return None if plan is None else (len(plan[1]), plan[2])


# Where PREPAREDTRANSACTIONOFFSET lies from a message's start, by host kind (the header ends with
# it and the body length), and where the host bits of the big-endian sysFlag are.
_PREPARED_AT = [head.size - _I64.size - _I32.size for head in _HEADERS]
_SYSFLAG_LOW_BYTE_AT = SYSFLAG_AT + 3


def set_prepared_transaction_offset(batch: EncodedBatch, offset: int) -> None:
    """PREPAREDTRANSACTIONOFFSET of every message of ``batch`` set to ``offset`` (the half
    message a transaction commit re-stores them from, as RocketMQ records it). A commit of a
    batch patches thousands of messages: one byte read and one pack each.

    Raises:
        ValueError: a message's header lies outside the blob.
    """
    blob = batch.blob
    pack = _I64.pack_into
    try:
        for rel in batch.rel_positions:
            if rel < 0:
                raise IndexError
            kind = (blob[rel + _SYSFLAG_LOW_BYTE_AT] & HOST_V6_BITS) >> _HOST_KIND_SHIFT
            pack(blob, rel + _PREPARED_AT[kind], offset)
    except (IndexError, struct.error):
        raise ValueError("set_prepared_transaction_offset: position outside the blob") from None


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
        if sys_flag & TRANSACTION_TYPE_MASK not in _NO_QUEUE_ENTRY_TYPES:  # takes_queue_entry
            _QOFF_PHY.pack_into(buf, at + QUEUEOFFSET_AT, qoff, physical_offset + rel)
            qoff += 1
        else:
            _QOFF_PHY.pack_into(buf, at + QUEUEOFFSET_AT, 0, physical_offset + rel)
        _I64.pack_into(buf, at + (STORETIMESTAMP_AT_V6 if sys_flag & _BORN_V6 else
                                  STORETIMESTAMP_AT_V4), store_ts)
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


# The C twins when built (the encoders above call these).
_encode_single: Callable[..., bytearray | None] = encode_wire_single_py
_encode_batch: Callable[..., tuple[bytearray, list[int]] | None] = encode_wire_batch_py
_check_batch: Callable[..., tuple[int, int] | None] = check_wire_batch_py
if NATIVE is not None:
    _encode_single = NATIVE.encode_wire_single
    _encode_batch = NATIVE.encode_wire_batch
    _check_batch = NATIVE.check_wire_batch
