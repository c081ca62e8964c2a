"""The stored message format of RocketMQ 4.x: what the CommitLog holds and a pull response carries.

One stored message, big-endian (``v4`` hosts; an IPv6 host takes 16 address bytes instead of 4 and
sets its sysFlag bit)::

    TOTALSIZE i32 | MAGICCODE i32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 | QUEUEOFFSET i64
    | PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST (ip + port i32)
    | STORETIMESTAMP i64 | STOREHOST (ip + port i32) | RECONSUMETIMES i32
    | PREPAREDTRANSACTIONOFFSET i64 | BODY (i32 length + bytes) | TOPIC (u8 length + bytes)
    | PROPERTIES (i16 length + ``k\\x01v\\x02...``)

BODYCRC is ``zlib.crc32(body) & 0x7FFFFFFF``. A segment's unused tail starts with an 8-byte entry
(TOTALSIZE = bytes left, BLANK_MAGIC_CODE). Pure code: bytes in, values out; anything malformed in
input we decode raises ``RemoteProtocolError``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import ipaddress
import struct
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol.java_hash import java_string_hash

__all__ = [
    "MAGIC_CODE",
    "BLANK_MAGIC_CODE",
    "BLANK_ENTRY_SIZE",
    "MessageSysFlag",
    "PropertyKey",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "PROPERTIES_SIZE_MAX",
    "TOPIC_SIZE_MAX",
    "encode_properties",
    "decode_properties",
    "properties_well_formed",
    "find_property",
    "Message",
    "MessageExt",
    "header_struct",
    "stored_size",
    "body_crc",
    "pack_host",
    "offset_msg_id",
    "encode_stored_message",
    "decode_stored_message",
    "iter_stored_messages",
    "java_string_hash",
    "tags_hash",
    "transaction_type",
]

MAGIC_CODE = -626843481  # 0xDAA320A7 as a signed i32
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194 as a signed i32
BLANK_ENTRY_SIZE = 8  # TOTALSIZE + MAGICCODE: the least a segment keeps free for its end marker
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
PROPERTIES_SIZE_MAX = 32767  # the i16 length field
TOPIC_SIZE_MAX = 127  # RocketMQ's limit; the u8 length field would allow 255


class MessageSysFlag(enum.IntFlag):
    """Bits of SYSFLAG. The transaction type is the two bits under ``TRANSACTION_ROLLBACK_TYPE``."""

    TRANSACTION_NOT_TYPE = 0
    COMPRESSED = 1
    MULTI_TAGS = 2
    TRANSACTION_PREPARED_TYPE = 4
    TRANSACTION_COMMIT_TYPE = 8
    TRANSACTION_ROLLBACK_TYPE = 12
    BORNHOST_V6 = 16
    STOREHOST_V6 = 32


def transaction_type(sys_flag: int) -> int:
    """The transaction type of a sysFlag: 0 (none), 4 (prepared), 8 (commit) or 12 (rollback)."""
    return sys_flag & 12


class PropertyKey:
    """Names of the message properties RocketMQ gives a meaning to."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT = "WAIT"
    DELAY = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    TRAN_MSG = "TRAN_MSG"
    PGROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    BUYER_ID = "BUYER_ID"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    TRANSFER_FLAG = "TRANSFER_FLAG"
    CORRECTION_FLAG = "CORRECTION_FLAG"
    MQ2_FLAG = "MQ2_FLAG"
    RECONSUME_TIME = "RECONSUME_TIME"
    MSG_REGION = "MSG_REGION"
    TRACE_ON = "TRACE_ON"
    UNIQ_KEY = "UNIQ_KEY"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIME = "CONSUME_START_TIME"
    TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    INSTANCE_ID = "INSTANCE_ID"
    CLUSTER = "CLUSTER"
    SHARDING_KEY = "__SHARDINGKEY"


KEY_SEPARATOR = " "  # KEYS holds several keys separated by spaces

# Names the system gives a meaning to (RocketMQ 4.x's MessageConst.STRING_HASH_SET): a producer's
# own properties may not use them, as RocketMQ's Message.putUserProperty refuses them. Setting
# UNIQ_KEY, say, would silently replace the message id.
RESERVED_PROPERTIES = frozenset({
    PropertyKey.TRACE_ON, PropertyKey.MSG_REGION, PropertyKey.KEYS, PropertyKey.TAGS,
    PropertyKey.WAIT, PropertyKey.DELAY, PropertyKey.RETRY_TOPIC, PropertyKey.REAL_TOPIC,
    PropertyKey.REAL_QID, PropertyKey.TRAN_MSG, PropertyKey.PGROUP, PropertyKey.MIN_OFFSET,
    PropertyKey.MAX_OFFSET, PropertyKey.BUYER_ID, PropertyKey.ORIGIN_MESSAGE_ID,
    PropertyKey.TRANSFER_FLAG, PropertyKey.CORRECTION_FLAG, PropertyKey.MQ2_FLAG,
    PropertyKey.RECONSUME_TIME, PropertyKey.UNIQ_KEY, PropertyKey.MAX_RECONSUME_TIMES,
    PropertyKey.CONSUME_START_TIME,
})
_RESERVED_HINTS = {
    PropertyKey.TAGS: "give tags=...", PropertyKey.KEYS: "give keys=...",
    PropertyKey.DELAY: "give delay_level=...",
}


# -- properties -------------------------------------------------------------------------------


def encode_properties(properties: Mapping[str, str]) -> bytes:
    """``k\\x01v\\x02`` for every pair, as RocketMQ 4.x writes them (with the final separator).

    Raises:
        ClientError: a name or value contains a separator (it could not be read back) or a
            character UTF-8 cannot encode.
    """
    if not properties:
        return b""
    parts = []
    for name, value in properties.items():
        if "\x01" in name or "\x02" in name or "\x01" in value or "\x02" in value:
            raise ClientError(f"property {name!r} contains a reserved separator character")
        parts.append(f"{name}\x01{value}\x02")
    try:
        return "".join(parts).encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate, e.g. from a JSON "\ud800" escape
        raise ClientError(f"message properties are not encodable as UTF-8: {e}") from None


def decode_properties(data: bytes | bytearray | memoryview) -> dict[str, str]:
    """Parse a properties blob; lenient about a missing final separator, as RocketMQ readers are.

    Raises:
        RemoteProtocolError: the bytes are not UTF-8 or a pair has no name/value separator.
    """
    if not data:
        return {}
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise RemoteProtocolError(f"message properties are not UTF-8: {e}") from None
    result: dict[str, str] = {}
    for item in text.split("\x02"):
        if not item:
            continue
        name, sep, value = item.partition("\x01")
        if not sep:
            raise RemoteProtocolError(f"message property without a value separator: {item[:40]!r}")
        result[name] = value
    return result


def properties_well_formed(data: bytes | memoryview) -> bool:
    """Strict check of a blob this store wrote: no NUL byte, every pair named and terminated.

    Recovery uses it on messages past the last fsync, where a torn write may have left zeroed
    sectors inside properties that the body CRC does not cover.
    """
    raw = bytes(data)
    if not raw:
        return True
    if b"\x00" in raw or not raw.endswith(b"\x02"):
        return False
    return all(item.find(b"\x01") > 0 for item in raw[:-1].split(b"\x02"))


def find_property(data: bytes, name: bytes) -> str | None:
    """The value of one property in a raw blob without building a dict (dispatch's fast path).

    ``name`` is the property name as bytes followed by ``\\x01``, e.g. ``b"TAGS\\x01"``.
    """
    at = data.find(name)
    while at > 0 and data[at - 1] != 2:  # a longer name that merely ends like ours
        at = data.find(name, at + 1)
    if at < 0:
        return None
    start = at + len(name)
    end = data.find(b"\x02", start)
    return data[start : end if end >= 0 else len(data)].decode("utf-8", "replace")


# -- hashes -----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def tags_hash(tags: str | None) -> int:
    """ConsumeQueue tagsCode of a TAGS value (0 without tags); cached, tags repeat a lot."""
    return java_string_hash(tags) if tags else 0


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """BODYCRC: CRC-32 of the body with the sign bit cleared, as RocketMQ's UtilAll.crc32."""
    return zlib.crc32(body) & 0x7FFFFFFF


# -- SDK message ------------------------------------------------------------------------------


@dataclasses.dataclass
class Message:
    """A message as a producer builds it (the SDK's type).

    ``properties`` are the application's own: a name RESERVED_PROPERTIES holds is refused with a
    ClientError (tags, keys and the delay level have fields of their own).
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | list[str] | None = None
    flag: int = 0
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    delay_level: int = 0

    def __post_init__(self) -> None:
        reserved = sorted(name for name in self.properties if name in RESERVED_PROPERTIES)
        if reserved:
            name = reserved[0]
            hint = _RESERVED_HINTS.get(name, "use another name")
            raise ClientError(f"property name {name!r} is reserved by the system; {hint} "
                              f"(reserved: {', '.join(sorted(RESERVED_PROPERTIES))})")

    @classmethod
    def with_system_properties(cls, topic: str, body: bytes, *,
                               properties: Mapping[str, str], **fields: Any) -> Message:
        """A message whose properties may hold reserved names, for the SDK's own use: sending a
        stored message again as it was (a dead letter keeps its UNIQ_KEY, hence its id), or a
        half message's TRAN_MSG and PGROUP. Applications use the constructor."""
        msg = cls(topic, body, **fields)
        msg.properties = dict(properties)
        return msg

    def all_properties(self) -> dict[str, str]:
        """The properties sent on the wire: user ones plus TAGS, KEYS and DELAY."""
        props = dict(self.properties)
        if self.tags:
            props[PropertyKey.TAGS] = self.tags
        if self.keys:
            keys = [self.keys] if isinstance(self.keys, str) else self.keys
            props[PropertyKey.KEYS] = KEY_SEPARATOR.join(keys)
        if self.delay_level > 0:
            props[PropertyKey.DELAY] = str(self.delay_level)
        return props


@dataclasses.dataclass
class MessageExt:
    """Every field of a stored message, decoded."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    commit_log_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    body_crc: int = 0
    store_size: int = 0
    msg_id: str = ""
    offset_msg_id: str = ""

    @property
    def tags(self) -> str | None:
        """The TAGS property."""
        return self.properties.get(PropertyKey.TAGS)

    @property
    def keys(self) -> list[str]:
        """The KEYS property split into its keys."""
        return [k for k in self.properties.get(PropertyKey.KEYS, "").split(KEY_SEPARATOR) if k]

    @property
    def uniq_key(self) -> str | None:
        """The producer-assigned unique id (UNIQ_KEY), if any."""
        return self.properties.get(PropertyKey.UNIQ_KEY)


# -- layout helpers ---------------------------------------------------------------------------

_HEADERS = {
    (born6, store6): struct.Struct(
        ">iiiiiqqiq" + ("16s" if born6 else "4s") + "iq" + ("16s" if store6 else "4s") + "iiqi"
    )
    for born6 in (False, True)
    for store6 in (False, True)
}
_V6_BITS = MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6
_BORN_V6 = int(MessageSysFlag.BORNHOST_V6)
_STORE_V6 = int(MessageSysFlag.STOREHOST_V6)
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PREFIX = struct.Struct(">ii")  # TOTALSIZE, MAGICCODE
SYSFLAG_AT = 36  # offset of SYSFLAG in every header variant
MIN_STORED_SIZE = 88 + 1 + 2  # v4 header, empty body, topic and properties


def header_struct(sys_flag: int) -> struct.Struct:
    """The fixed part (TOTALSIZE .. body length) for the host kinds of ``sys_flag``."""
    flags = int(sys_flag)  # plain int arithmetic: IntFlag operators are slow on the hot path
    return _HEADERS[(bool(flags & _BORN_V6), bool(flags & _STORE_V6))]


def stored_size(sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int:
    """TOTALSIZE of a message with these lengths (bytes)."""
    return header_struct(sys_flag).size + body_len + 1 + topic_len + 2 + props_len


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


def offset_msg_id(store_ip: bytes, store_port: int, commit_log_offset: int) -> str:
    """RocketMQ's offset message id: hex upper of store ip + port i32 + commit log offset i64."""
    return (store_ip + struct.pack(">iq", store_port, commit_log_offset)).hex().upper()


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
    """One message in stored form (the store's append path packs the same layout in place).

    The host kind bits of ``sys_flag`` are set from the hosts given.

    Raises:
        ClientError: topic or properties too long for their length fields, or a host not an IP.
    """
    topic_raw = topic.encode("utf-8")
    props_raw = encode_properties(properties or {})
    if not 0 < len(topic_raw) <= TOPIC_SIZE_MAX:
        raise ClientError(f"topic must have 1..{TOPIC_SIZE_MAX} bytes, got {len(topic_raw)}")
    if len(props_raw) > PROPERTIES_SIZE_MAX:
        raise ClientError(f"properties take {len(props_raw)} bytes, over {PROPERTIES_SIZE_MAX}")
    born_ip, born6 = pack_host(born_host[0])
    store_ip, store6 = pack_host(store_host[0])
    sys_flag &= ~_V6_BITS
    sys_flag |= (MessageSysFlag.BORNHOST_V6 if born6 else 0) | (
        MessageSysFlag.STOREHOST_V6 if store6 else 0
    )
    head = header_struct(sys_flag)
    total = head.size + len(body) + 1 + len(topic_raw) + 2 + len(props_raw)
    return b"".join(
        (
            head.pack(
                total, MAGIC_CODE, body_crc(body), queue_id, flag, queue_offset, physical_offset,
                int(sys_flag), born_timestamp, born_ip, born_host[1], store_timestamp, store_ip,
                store_host[1], reconsume_times, prepared_transaction_offset, len(body),
            ),
            body,
            bytes((len(topic_raw),)),
            topic_raw,
            _I16.pack(len(props_raw)),
            props_raw,
        )
    )


def _host(ip: bytes, port: int) -> tuple[str, int]:
    if len(ip) == 4:  # IPv4, nearly always: without building an ipaddress object per message
        return f"{ip[0]}.{ip[1]}.{ip[2]}.{ip[3]}", port
    return str(ipaddress.ip_address(ip)), port


def decode_stored_message(
    buf: bytes | bytearray | memoryview,
    offset: int = 0,
    *,
    check_crc: bool = True,
    decompress: bool = False,
) -> MessageExt:
    """Decode the stored message starting at ``offset`` of ``buf``.

    Args:
        check_crc: verify BODYCRC against the body.
        decompress: inflate a zlib body when sysFlag has COMPRESSED (the flag is then cleared).

    Raises:
        RemoteProtocolError: bad magic, impossible lengths, truncated input, CRC mismatch, or
            undecodable topic or properties.
    """
    try:
        return _decode(memoryview(buf), offset, check_crc, decompress)
    except (struct.error, IndexError, ValueError) as e:
        raise RemoteProtocolError(f"stored message at {offset} is malformed: {e}") from None


def _decode(mv: memoryview, pos: int, check_crc: bool, decompress: bool) -> MessageExt:
    total, magic = _PREFIX.unpack_from(mv, pos)
    if magic != MAGIC_CODE:
        raise RemoteProtocolError(f"stored message at {pos}: bad magic code {magic:#x}")
    if total < MIN_STORED_SIZE or pos + total > len(mv):
        raise RemoteProtocolError(f"stored message at {pos}: impossible total size {total}")
    (sys_flag,) = _I32.unpack_from(mv, pos + SYSFLAG_AT)
    head = header_struct(sys_flag)
    (
        _, _, crc, queue_id, flag, queue_offset, phy, _, born_ts, born_ip, born_port, store_ts,
        store_ip, store_port, reconsume, prepared, body_len,
    ) = head.unpack_from(mv, pos)
    at = pos + head.size
    end = pos + total
    if body_len < 0 or at + body_len + 3 > end:
        raise RemoteProtocolError(f"stored message at {pos}: body length {body_len} overruns it")
    body = bytes(mv[at : at + body_len])
    at += body_len
    if check_crc and body_crc(body) != crc:
        raise RemoteProtocolError(f"stored message at {pos}: body CRC mismatch")
    topic_len = mv[at]
    topic_raw = bytes(mv[at + 1 : at + 1 + topic_len])
    at += 1 + topic_len
    (props_len,) = _I16.unpack_from(mv, at)
    at += 2
    if props_len < 0 or at + props_len != end:
        raise RemoteProtocolError(f"stored message at {pos}: lengths disagree with total size")
    props = decode_properties(mv[at : at + props_len])
    try:
        topic = topic_raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RemoteProtocolError(f"stored message at {pos}: topic is not UTF-8") from None
    if decompress and sys_flag & MessageSysFlag.COMPRESSED:
        try:
            body = zlib.decompress(body)
        except zlib.error as e:
            raise RemoteProtocolError(f"stored message at {pos}: bad compressed body: {e}") from None
        sys_flag &= ~MessageSysFlag.COMPRESSED
    offset_id = offset_msg_id(store_ip, store_port, phy)
    return MessageExt(
        topic=topic,
        body=body,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        commit_log_offset=phy,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=_host(born_ip, born_port),
        store_timestamp=store_ts,
        store_host=_host(store_ip, store_port),
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        properties=props,
        body_crc=crc,
        store_size=total,
        msg_id=props.get(PropertyKey.UNIQ_KEY) or offset_id,
        offset_msg_id=offset_id,
    )


def iter_stored_messages(
    buf: bytes | bytearray | memoryview, *, check_crc: bool = True, **kwargs: Any
) -> Iterator[MessageExt]:
    """Decode messages lying back to back (a pull response body); stops at a blank entry.

    Raises:
        RemoteProtocolError: as ``decode_stored_message``, or trailing bytes too short for a message.
    """
    mv = memoryview(buf)
    pos = 0
    while pos < len(mv):
        if len(mv) - pos < BLANK_ENTRY_SIZE:
            raise RemoteProtocolError(f"{len(mv) - pos} trailing bytes after the last message")
        total, magic = _PREFIX.unpack_from(mv, pos)
        if magic == BLANK_MAGIC_CODE:
            return
        msg = decode_stored_message(mv, pos, check_crc=check_crc, **kwargs)
        yield msg
        pos += total
