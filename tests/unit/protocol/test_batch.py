"""Batch bodies: RocketMQ's MessageDecoder.encodeMessage layout, strict decoding."""

from __future__ import annotations

import struct

import pytest

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol import BatchEntry, decode_batch, encode_batch
from orbitmq.protocol.batch import ENTRY_OVERHEAD


def java_entry(flag: int, body: bytes, properties: bytes) -> bytes:
    """One entry exactly as Java's encodeMessage writes it."""
    total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(properties)
    return (struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body
            + struct.pack(">h", len(properties)) + properties)


def test_layout_matches_java() -> None:
    encoded = encode_batch([(3, b"hi", {"TAGS": "a", "KEYS": "k1 k2"}), (0, b"", {})])
    assert encoded == (java_entry(3, b"hi", b"TAGS\x01a\x02KEYS\x01k1 k2\x02")
                       + java_entry(0, b"", b""))
    assert ENTRY_OVERHEAD == 22


def test_round_trip() -> None:
    messages = [(0, b"one", {"UNIQ_KEY": "ABC", "WAIT": "true"}),
                (-1, bytes(range(256)), {"k": "välue"}),
                (2**31 - 1, b"", {})]
    decoded = decode_batch(encode_batch(messages))
    assert decoded == [BatchEntry(*m) for m in messages]
    assert all(type(entry.body) is bytes for entry in decoded)
    flag, body, properties = decoded[0]
    assert (flag, body, properties) == messages[0]


def test_memoryview_bodies_in_and_out() -> None:
    payload = memoryview(b"xxpayloadxx")[2:9]
    encoded = encode_batch([(0, payload, {})])
    assert decode_batch(memoryview(encoded)) == [BatchEntry(0, b"payload", {})]
    assert decode_batch(bytearray(encoded)) == [BatchEntry(0, b"payload", {})]


def test_empty_body_is_an_empty_batch() -> None:
    assert decode_batch(b"") == []
    assert encode_batch([]) == b""


def test_magic_and_crc_are_not_checked() -> None:
    entry = bytearray(java_entry(0, b"b", b""))
    entry[4:12] = b"\xde\xad\xbe\xef\x01\x02\x03\x04"
    assert decode_batch(bytes(entry)) == [BatchEntry(0, b"b", {})]


def test_malformed_property_items_are_refused_not_dropped() -> None:
    """Java's reader drops an item without a separator; OrbitMQ's one rule refuses it."""
    entry = java_entry(0, b"b", b"A\x01x\x02B\x01\x02")
    assert decode_batch(entry)[0].properties == {"A": "x", "B": ""}
    junk = java_entry(0, b"b", b"A\x01x\x02junk\x02")
    with pytest.raises(RemoteProtocolError,
                       match="batch entry at 0: message property 2 has no name/value separator"):
        decode_batch(junk)
    with pytest.raises(RemoteProtocolError, match="property 1 has an empty name"):
        decode_batch(java_entry(0, b"b", b"\x01novalue\x02"))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\x00" * 10, "truncated"),
        (java_entry(0, b"abc", b"")[:-1], "truncated|bad"),
        (struct.pack(">iiiii", 30, 0, 0, 0, -1) + b"\x00" * 10, "bad body length"),
        (struct.pack(">iiiii", 30, 0, 0, 0, 100) + b"\x00" * 10, "bad body length"),
        (struct.pack(">iiiii", 22, 0, 0, 0, 0) + struct.pack(">h", -2), "bad properties"),
        (struct.pack(">iiiii", 25, 0, 0, 0, 0) + struct.pack(">h", 3) + b"ab", "bad properties"),
        (struct.pack(">iiiii", 99, 0, 0, 0, 0) + struct.pack(">h", 0), "total size"),
        (struct.pack(">iiiii", 0, 0, 0, 0, 0) + struct.pack(">h", 0), "total size"),
        (java_entry(0, b"a", b"K\x01\xff\x02"), "UTF-8"),
        (java_entry(0, b"a", b"") + b"\x00", "truncated"),
    ],
)
def test_malformed_batches(body: bytes, message: str) -> None:
    with pytest.raises(RemoteProtocolError, match=message):
        decode_batch(body)


def test_properties_over_a_short_are_refused() -> None:
    with pytest.raises(ClientError, match="32767"):
        encode_batch([(0, b"", {"k": "v" * 40000})])


@pytest.mark.parametrize("properties", [{"a\x01b": "c"}, {"a": "b\x02"}, {"a": "\x01"}])
def test_separators_inside_properties_are_refused(properties: dict[str, str]) -> None:
    with pytest.raises(ClientError, match="x01"):
        encode_batch([(0, b"", properties)])


def test_flag_out_of_range_is_refused() -> None:
    with pytest.raises(ClientError):
        encode_batch([(2**40, b"", {})])
