"""The body of a batch send: several messages of one topic in one request.

Layout per message, concatenated (big-endian; RocketMQ's ``MessageDecoder.encodeMessage``, which
the C++ client's ``BatchMessage::encode`` reproduces)::

    TOTALSIZE i32 | MAGICCODE i32 (0) | BODYCRC i32 (0) | FLAG i32 |
    BODY (i32 length + bytes) | PROPERTIES (i16 length + "k\\x01v\\x02" pairs, UTF-8)

The property encoding is repeated here (a few lines) so that this module stands alone.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from orbitmq.errors import ClientError, RemoteProtocolError

__all__ = ["BatchEntry", "encode_batch", "decode_batch", "ENTRY_OVERHEAD"]

_HEAD = struct.Struct(">iiiii")  # total size, magic code, body crc, flag, body length
_I16 = struct.Struct(">h")
ENTRY_OVERHEAD = _HEAD.size + _I16.size  # bytes of one entry besides body and properties
_PROPERTIES_LENGTH_MAX = 0x7FFF  # Java writes the length as a signed short
_NAME_VALUE_SEPARATOR = "\x01"
_PROPERTY_SEPARATOR = "\x02"


class BatchEntry(NamedTuple):
    """One message of a batch; a plain (flag, body, properties) tuple."""

    flag: int
    body: bytes
    properties: dict[str, str]


def _encode_properties(properties: Mapping[str, str]) -> bytes:
    text = "".join(f"{k}\x01{v}\x02" for k, v in properties.items())
    if text.count(_NAME_VALUE_SEPARATOR) != len(properties) or text.count(
        _PROPERTY_SEPARATOR
    ) != len(properties):
        raise ClientError("message property names and values must not contain \\x01 or \\x02")
    try:
        return text.encode()
    except UnicodeEncodeError as exc:
        raise ClientError(f"message properties are not encodable as UTF-8: {exc}") from None


def _decode_properties(raw: memoryview) -> dict[str, str]:
    try:
        text = str(raw, "utf-8")
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"batch message properties are not UTF-8: {exc}") from None
    properties: dict[str, str] = {}
    for item in text.split(_PROPERTY_SEPARATOR):
        key, separator, value = item.partition(_NAME_VALUE_SEPARATOR)
        if separator and key:  # like Java, an item without a separator is dropped
            properties[key] = value
    return properties


def encode_batch(messages: Iterable[tuple[int, bytes | memoryview, Mapping[str, str]]]) -> bytes:
    """Encodes (flag, body, properties) triples into one batch body.

    Raises:
        ClientError: a message's properties exceed 32767 bytes or contain a separator byte.
    """
    parts: list[bytes | memoryview] = []
    for flag, body, properties in messages:
        raw_properties = _encode_properties(properties or {})
        if len(raw_properties) > _PROPERTIES_LENGTH_MAX:
            raise ClientError(f"message properties of {len(raw_properties)} bytes exceed 32767")
        body_size = body.nbytes if isinstance(body, memoryview) else len(body)
        total = ENTRY_OVERHEAD + body_size + len(raw_properties)
        try:
            head = _HEAD.pack(total, 0, 0, flag, body_size)
        except struct.error as exc:
            raise ClientError(f"batch message does not fit its 32-bit fields: {exc}") from None
        parts += (head, body, _I16.pack(len(raw_properties)), raw_properties)
    return b"".join(parts)


def decode_batch(body: bytes | bytearray | memoryview) -> list[BatchEntry]:
    """Splits a batch body into its messages (an empty body gives an empty list).

    Raises:
        RemoteProtocolError: a length field disagrees with the bytes present.
    """
    view = memoryview(body)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    entries: list[BatchEntry] = []
    pos, end = 0, len(view)
    while pos < end:
        left = end - pos
        if left < ENTRY_OVERHEAD:
            raise RemoteProtocolError(f"batch entry at {pos} truncated: {left} bytes left")
        total, _magic, _crc, flag, body_size = _HEAD.unpack_from(view, pos)
        if body_size < 0 or body_size > left - ENTRY_OVERHEAD:
            raise RemoteProtocolError(f"batch entry at {pos}: bad body length {body_size}")
        body_start = pos + _HEAD.size
        (properties_size,) = _I16.unpack_from(view, body_start + body_size)
        if properties_size < 0 or properties_size > left - ENTRY_OVERHEAD - body_size:
            raise RemoteProtocolError(f"batch entry at {pos}: bad properties length")
        if total != ENTRY_OVERHEAD + body_size + properties_size:
            raise RemoteProtocolError(f"batch entry at {pos}: total size {total} disagrees")
        properties_start = body_start + body_size + _I16.size
        entries.append(BatchEntry(
            flag,
            bytes(view[body_start : body_start + body_size]),
            _decode_properties(view[properties_start : properties_start + properties_size]),
        ))
        pos += total
    return entries
