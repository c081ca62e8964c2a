"""The body of a batch send: several messages of one topic in one request.

Layout per message, concatenated (big-endian; RocketMQ's ``MessageDecoder.encodeMessage``, which
the C++ client's ``BatchMessage::encode`` reproduces)::

    TOTALSIZE i32 | MAGICCODE i32 (0) | BODYCRC i32 (0) | FLAG i32 |
    BODY (i32 length + bytes) | PROPERTIES (i16 length + "k\\x01v\\x02" pairs, UTF-8)

Properties follow the one rule of ``protocol.properties``: a malformed item is refused, never
dropped.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol.properties import PROPERTIES_SIZE_MAX, encode_properties, parse_properties

__all__ = ["BatchEntry", "encode_batch", "decode_batch", "iter_entries", "ENTRY_OVERHEAD"]

_HEAD = struct.Struct(">iiiii")  # total size, magic code, body crc, flag, body length
_I16 = struct.Struct(">h")
ENTRY_OVERHEAD = _HEAD.size + _I16.size  # bytes of one entry besides body and properties


class BatchEntry(NamedTuple):
    """One message of a batch; a plain (flag, body, properties) tuple."""

    flag: int
    body: bytes
    properties: dict[str, str]


def encode_batch(messages: Iterable[tuple[int, bytes | memoryview, Mapping[str, str]]]) -> bytes:
    """Encodes (flag, body, properties) triples into one batch body.

    Raises:
        ClientError: a message's properties exceed 32767 bytes or contain a separator byte.
    """
    parts: list[bytes | memoryview] = []
    for flag, body, properties in messages:
        raw_properties = encode_properties(properties or {})
        if len(raw_properties) > PROPERTIES_SIZE_MAX:
            raise ClientError(f"message properties of {len(raw_properties)} bytes exceed 32767")
        body_size = body.nbytes if isinstance(body, memoryview) else len(body)
        total = ENTRY_OVERHEAD + body_size + len(raw_properties)
        try:
            head = _HEAD.pack(total, 0, 0, flag, body_size)
        except struct.error as exc:
            raise ClientError(f"batch message does not fit its 32-bit fields: {exc}") from None
        parts += (head, body, _I16.pack(len(raw_properties)), raw_properties)
    return b"".join(parts)


def iter_entries(
    body: bytes | bytearray | memoryview,
) -> Iterator[tuple[int, int, memoryview, memoryview]]:
    """(position, flag, body, raw properties) of each entry, the lengths checked but not the
    properties (the stored codec's batch encoder copies them as they came once they pass).

    Raises:
        RemoteProtocolError: a length field disagrees with the bytes present.
    """
    view = memoryview(body)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
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
        yield (pos, flag, view[body_start : body_start + body_size],
               view[properties_start : properties_start + properties_size])
        pos += total


def decode_batch(body: bytes | bytearray | memoryview) -> list[BatchEntry]:
    """Splits a batch body into its messages (an empty body gives an empty list).

    Raises:
        RemoteProtocolError: a length field disagrees with the bytes present, or an entry's
            properties are malformed (``protocol.properties``); the message names the entry.
    """
    entries: list[BatchEntry] = []
    for pos, flag, entry_body, raw_properties in iter_entries(body):
        try:
            properties = parse_properties(raw_properties)
        except RemoteProtocolError as e:
            raise RemoteProtocolError(f"batch entry at {pos}: {e}") from None
        entries.append(BatchEntry(flag, bytes(entry_body), properties))
    return entries
