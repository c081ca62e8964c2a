"""REGISTER_BROKER's compressed body (protocol/register_body.py): RocketMQ's layout both ways, the
4.x form without attributes or mappings, the CRC as Java computes it, and a body that inflates
past its bound refused before it is inflated whole."""

from __future__ import annotations

import struct
import zlib

import pytest

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.bodies import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from orbitmq.protocol.register_body import (
    RegisterBodyTooLarge,
    body_crc32,
    decode_compressed,
    encode_compressed,
)

MAX = 64 * 1024 * 1024


def _wrapper(n: int) -> TopicConfigSerializeWrapper:
    table = {f"T{i}": TopicConfig(f"T{i}", 8, 8, 6) for i in range(n)}
    table["Fifo"] = TopicConfig("Fifo", 4, 2, 7, "MULTI_TAG", attributes={"message.type": "FIFO"})
    return TopicConfigSerializeWrapper(table, DataVersion(1700000000000, 42))


def test_round_trip_keeps_what_rocketmq_carries() -> None:
    wrapper = _wrapper(1000)
    body = encode_compressed(wrapper, ["filter:1"])
    assert body[:1] == b"\x78"  # a zlib stream, as Java's DeflaterOutputStream writes
    back, servers = decode_compressed(body, MAX)
    assert back == wrapper
    assert servers == ["filter:1"]
    assert len(body) * 10 < len(wrapper.to_json())  # what it is for


def test_the_layout_is_rocketmqs_and_its_4x_form_is_read() -> None:
    raw = zlib.decompress(encode_compressed(TopicConfigSerializeWrapper(
        {"A": TopicConfig("A", 3, 2, 6)}, DataVersion(5, 6))))
    version = b'{"timestamp":5,"counter":6}'
    assert raw.startswith(struct.pack(">i", len(version)) + version + struct.pack(">i", 1))
    assert b"A 3 2 6 SINGLE_TAG {}" in raw
    # RocketMQ 4.x: five fields per topic, no mapping count at the end.
    line = b"B 16 16 6 SINGLE_TAG"
    old = (struct.pack(">i", len(version)) + version + struct.pack(">i", 1)
           + struct.pack(">i", len(line)) + line + struct.pack(">i", 2) + b"[]")
    wrapper, servers = decode_compressed(zlib.compress(old), MAX)
    assert wrapper.topic_config_table == {"B": TopicConfig("B", 16, 16, 6)}
    assert servers == []


def test_crc32_is_javas_masked_to_31_bits() -> None:
    body = b"\xff" * 1000
    assert body_crc32(body) == zlib.crc32(body) & 0x7FFFFFFF
    assert 0 <= body_crc32(body) < 2**31


def test_a_body_that_inflates_past_its_bound_is_refused_without_inflating_it_whole() -> None:
    bomb = zlib.compress(b"\0" * (64 * 1024 * 1024), 9)  # 64 MiB from ~64 KiB
    assert len(bomb) < 100_000
    with pytest.raises(RegisterBodyTooLarge, match="register_body_decompressed_max_bytes"):
        decode_compressed(bomb, 1024 * 1024)


@pytest.mark.parametrize("body, match", [
    (b"not zlib at all", "not zlib"),
    (zlib.compress(struct.pack(">i", 100) + b"{}"), "runs past its end"),
    (zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", 10**8)), "cannot fit"),
    (zlib.compress(struct.pack(">i", -1)), "is -1"),
    (zlib.compress(struct.pack(">i", 2) + b"{}")[:-3], "truncated"),
])
def test_a_broken_body_is_a_remote_protocol_error_naming_what(body: bytes, match: str) -> None:
    with pytest.raises(RemoteProtocolError, match=match):
        decode_compressed(body, MAX)


@pytest.mark.parametrize("line, match", [
    (b"X 9999999999 1 6 SINGLE_TAG", "readQueueNums"),
    (b"X 1 1 99 SINGLE_TAG", "perm"),
    (b"X 1 1 6 ANY_TAG", "topicFilterType"),
    (b"X 1 1 6", "fewer than 5"),
])
def test_a_topic_entry_out_of_range_is_refused(line: bytes, match: str) -> None:
    body = (struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", len(line))
            + line + struct.pack(">i", 2) + b"[]")
    with pytest.raises(RemoteProtocolError, match=match):
        decode_compressed(zlib.compress(body), MAX)
