"""REGISTER_BROKER's compressed body (RocketMQ's ``RegisterBrokerBody.encode(true)``), and the
body checksum: sans-I/O, both sides.

At 100,000 topics a JSON registration body is ~14 MB, near the 16 MiB frame limit. RocketMQ's
broker (``compressedRegister = true``) sends instead a zlib stream (Java's
``DeflaterOutputStream``, best compression) of a binary layout, every integer a big-endian
int32 and every string UTF-8::

    [len][DataVersion JSON]
    [topic count] then per topic [len][TopicConfig.encode()]
    [len][filter server list JSON]
    [mapping count] then per mapping [len][TopicQueueMappingInfo JSON]

``TopicConfig.encode()`` is ``"name read write perm filterType"`` and, since RocketMQ 5, a sixth
space-separated field holding the attributes as JSON (``{}`` when none). That form carries
neither ``topicSysFlag`` nor ``order``: a name server reading it has them at 0 / false, as
RocketMQ's does. The header says ``compressed=true``; ``bodyCrc32`` is
``crc32(body) & 0x7FFFFFFF`` of the body as sent (0: not checked), answered SYSTEM_ERROR
"crc32 not match" by a name server when it differs.

A small frame must not inflate to gigabytes: :func:`decode_compressed` stops at
``decompressed_max_bytes`` (:class:`RegisterBodyTooLarge`), and checks every length against what
is left before it reads (RemoteProtocolError naming the field otherwise).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import orjson

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol._lenient import PERM_MASK
from orbitmq.protocol.bodies import DataVersion, TopicConfig, TopicConfigSerializeWrapper

__all__ = ["encode_compressed", "decode_compressed", "body_crc32", "RegisterBodyTooLarge",
           "TOPIC_NAME_MAX_BYTES", "QUEUE_NUMS_MAX_WIRE"]

_INT = struct.Struct(">i")
TOPIC_NAME_MAX_BYTES = 255  # RocketMQ caps topic names far below; one entry is never larger
QUEUE_NUMS_MAX_WIRE = 2**31 - 1
_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")


class RegisterBodyTooLarge(RemoteProtocolError):
    """A compressed registration body inflates past the receiver's bound."""


def body_crc32(body: bytes | bytearray | memoryview) -> int:
    """RocketMQ's UtilAll.crc32: CRC-32 masked to 31 bits (never negative as a Java int)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def _chunk(data: bytes) -> bytes:
    return _INT.pack(len(data)) + data


def _topic_line(tc: TopicConfig) -> bytes:
    attributes = orjson.dumps(tc.attributes or {}).decode()
    return (f"{tc.topic_name} {tc.read_queue_nums} {tc.write_queue_nums} {tc.perm} "
            f"{tc.topic_filter_type} {attributes}").encode()


def encode_compressed(wrapper: TopicConfigSerializeWrapper,
                      filter_servers: Sequence[str] = ()) -> bytes:
    """The compressed body of a registration of ``wrapper`` (RocketMQ's layout, above)."""
    parts = [_chunk(wrapper.data_version.to_json()),
             _INT.pack(len(wrapper.topic_config_table))]
    parts.extend(_chunk(_topic_line(tc)) for tc in wrapper.topic_config_table.values())
    parts.append(_chunk(orjson.dumps(list(filter_servers))))
    parts.append(_INT.pack(0))  # no static topic mappings
    return zlib.compress(b"".join(parts), 9)


def _inflate(body: bytes | bytearray | memoryview, decompressed_max_bytes: int) -> bytes:
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(bytes(body), decompressed_max_bytes + 1)
    except zlib.error as e:
        raise RemoteProtocolError(f"compressed REGISTER_BROKER body is not zlib: {e}") from None
    if len(out) > decompressed_max_bytes or inflater.unconsumed_tail:
        raise RegisterBodyTooLarge(
            f"compressed REGISTER_BROKER body inflates past {decompressed_max_bytes} bytes "
            f"(register_body_decompressed_max_bytes)")
    if not inflater.eof:
        raise RemoteProtocolError("compressed REGISTER_BROKER body is truncated")
    return out


class _Reader:
    """Reads the inflated layout, every length checked against what is left."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def int(self, what: str) -> int:
        if self.at + 4 > len(self.data):
            raise RemoteProtocolError(f"compressed REGISTER_BROKER body ends before {what}")
        (value,) = _INT.unpack_from(self.data, self.at)
        self.at += 4
        if value < 0:
            raise RemoteProtocolError(f"compressed REGISTER_BROKER body: {what} is {value}")
        return int(value)

    def chunk(self, what: str) -> bytes:
        size = self.int(f"the length of {what}")
        if self.at + size > len(self.data):
            raise RemoteProtocolError(f"compressed REGISTER_BROKER body: {what} of {size} bytes "
                                      f"runs past its end")
        out = self.data[self.at:self.at + size]
        self.at += size
        return out


def _number(text: str, what: str, high: int) -> int:
    if not text.isdigit() or len(text) > 10 or int(text) > high:
        raise RemoteProtocolError(f"compressed REGISTER_BROKER body: {what} {text[:20]!r} is "
                                  f"not in 0..{high}")
    return int(text)


def _topic(line: bytes) -> TopicConfig:
    try:
        text = line.decode()
    except UnicodeDecodeError:
        raise RemoteProtocolError("compressed REGISTER_BROKER body: a topic is not UTF-8") from None
    fields = text.split(" ")
    if len(fields) < 5:
        raise RemoteProtocolError(f"compressed REGISTER_BROKER body: topic entry {text[:80]!r} "
                                  "has fewer than 5 fields")
    name = fields[0]
    if not name or len(name.encode()) > TOPIC_NAME_MAX_BYTES:
        raise RemoteProtocolError(f"compressed REGISTER_BROKER body: topic name {name[:80]!r}")
    if fields[4] not in _FILTER_TYPES:
        raise RemoteProtocolError(f"compressed REGISTER_BROKER body: topicFilterType "
                                  f"{fields[4][:20]!r} of {name}")
    attributes = None
    if len(fields) > 5:  # RocketMQ 5: JSON; as Java, a value that does not parse is left out
        try:
            parsed = orjson.loads(" ".join(fields[5:]))
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict) and parsed and all(
                isinstance(k, str) and isinstance(v, str) for k, v in parsed.items()):
            attributes = parsed
    return TopicConfig(name, _number(fields[1], "readQueueNums", QUEUE_NUMS_MAX_WIRE),
                       _number(fields[2], "writeQueueNums", QUEUE_NUMS_MAX_WIRE),
                       _number(fields[3], "perm", PERM_MASK), fields[4], attributes=attributes)


def decode_compressed(body: bytes | bytearray | memoryview, decompressed_max_bytes: int,
                      ) -> tuple[TopicConfigSerializeWrapper, list[str]]:
    """The topics and filter servers of a compressed body.

    Raises:
        RegisterBodyTooLarge: it inflates past ``decompressed_max_bytes``.
        RemoteProtocolError: it is not zlib, is truncated, or its layout is broken (named).
    """
    reader = _Reader(_inflate(body, decompressed_max_bytes))
    version = DataVersion.from_json(reader.chunk("the data version"))
    count = reader.int("the topic count")
    if count * 4 > len(reader.data) - reader.at:  # each entry has a length at least
        raise RemoteProtocolError(f"compressed REGISTER_BROKER body: {count} topics cannot fit")
    table: dict[str, TopicConfig] = {}
    for i in range(count):
        tc = _topic(reader.chunk(f"topic {i}"))
        table[tc.topic_name] = tc
    try:
        servers = orjson.loads(reader.chunk("the filter server list"))
    except orjson.JSONDecodeError as e:
        raise RemoteProtocolError(f"compressed REGISTER_BROKER body: filter servers: {e}") from None
    if not isinstance(servers, list) or not all(isinstance(s, str) for s in servers):
        raise RemoteProtocolError("compressed REGISTER_BROKER body: filter servers not strings")
    # Static topic mappings (RocketMQ 5) follow; OrbitMQ has none and reads none.
    return TopicConfigSerializeWrapper(table, version), servers
