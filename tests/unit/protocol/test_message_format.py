"""The stored message format: round trips, properties, CRC and malformed input."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol.message import (
    Message,
    MessageSysFlag,
    PropertyKey,
    java_string_hash,
    offset_msg_id,
    tags_hash,
)
from orbitmq.protocol.properties import encode_properties, parse_properties, properties_problem
from orbitmq.protocol.stored import (
    BLANK_MAGIC_CODE,
    MAGIC_CODE,
    decode_stored_message,
    encode_stored_message,
    iter_stored_messages,
    pack_host,
)

_prop_text = st.text(
    alphabet=st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
    max_size=20,
)
properties = st.dictionaries(_prop_text.filter(bool), _prop_text, max_size=6)
topics = st.text(  # a topic names a queue directory: no "/", no NUL, not a dot name
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"),
    min_size=1, max_size=40,
).filter(lambda t: len(t.encode()) <= 127 and t not in (".", ".."))
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(0, 2**63 - 1)
hosts = st.one_of(
    st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 65535)),
    st.tuples(st.ip_addresses(v=6).map(str), st.integers(0, 65535)),
)


@settings(max_examples=300, deadline=None)
@given(
    topic=topics,
    body=st.binary(max_size=2000),
    props=properties,
    queue_id=st.integers(0, 1000),
    flag=i32,
    queue_offset=i64,
    phy=i64,
    sys_flag=st.sampled_from([0, 1, 4, 8, 12]),
    born=hosts,
    store=hosts,
    times=st.tuples(i64, i64),
    reconsume=st.integers(0, 100),
    prepared=i64,
)
def test_stored_message_round_trip(
    topic, body, props, queue_id, flag, queue_offset, phy, sys_flag, born, store, times, reconsume,
    prepared,
) -> None:
    raw = encode_stored_message(
        topic=topic, body=body, queue_id=queue_id, flag=flag, queue_offset=queue_offset,
        physical_offset=phy, sys_flag=sys_flag, born_timestamp=times[0], born_host=born,
        store_timestamp=times[1], store_host=store, reconsume_times=reconsume,
        prepared_transaction_offset=prepared, properties=props,
    )
    assert struct.unpack_from(">ii", raw) == (len(raw), MAGIC_CODE)
    msg = decode_stored_message(b"pad" + raw, 3)
    assert (msg.topic, msg.body, msg.properties) == (topic, body, props)
    assert (msg.queue_id, msg.flag, msg.queue_offset, msg.commit_log_offset) == (
        queue_id, flag, queue_offset, phy
    )
    assert msg.sys_flag & 0b1111 == sys_flag
    assert bool(msg.sys_flag & MessageSysFlag.BORNHOST_V6) == (":" in born[0])
    assert bool(msg.sys_flag & MessageSysFlag.STOREHOST_V6) == (":" in store[0])
    assert (msg.born_timestamp, msg.store_timestamp) == times
    assert msg.born_host == (str(born[0]), born[1]) and msg.store_host == (str(store[0]), store[1])
    assert (msg.reconsume_times, msg.prepared_transaction_offset) == (reconsume, prepared)
    assert msg.store_size == len(raw)
    assert msg.body_crc == zlib.crc32(body) & 0x7FFFFFFF
    ip, _ = pack_host(store[0])
    assert msg.offset_msg_id == offset_msg_id(ip, store[1], phy)
    assert msg.msg_id == props.get("UNIQ_KEY", msg.offset_msg_id)
    assert properties_problem(encode_properties(props)) is None


@settings(max_examples=200, deadline=None)
@given(props=properties)
def test_properties_round_trip_with_and_without_final_separator(props) -> None:
    raw = encode_properties(props)
    assert parse_properties(raw) == props
    assert parse_properties(raw[:-1] if raw else raw) == props
    assert parse_properties(raw.decode()) == props


def test_properties_encoding_is_rocketmq_s() -> None:
    assert encode_properties({"TAGS": "a", "KEYS": "k1 k2"}) == b"TAGS\x01a\x02KEYS\x01k1 k2\x02"
    with pytest.raises(ClientError):
        encode_properties({"a\x01": "b"})
    with pytest.raises(RemoteProtocolError):
        parse_properties(b"novalue\x02")
    with pytest.raises(RemoteProtocolError):
        parse_properties(b"\xff\xfe\x01x")
    assert properties_problem(b"KEYS\x01ab\x00\x00") is not None
    assert properties_problem(b"\x00\x00KEYS\x01a\x02") is not None
    assert properties_problem(b"KEYS\x01abc") is None  # a missing final separator is accepted


def _one(body: bytes = b"hello", **kw) -> bytes:
    return encode_stored_message(topic="T", body=body, properties={"TAGS": "x"}, **kw)


def test_crc_mismatch_raises_remote_protocol_error() -> None:
    raw = bytearray(_one())
    raw[88] ^= 0x01  # first body byte (the body follows the 88-byte header)
    with pytest.raises(RemoteProtocolError, match="CRC"):
        decode_stored_message(raw)
    assert decode_stored_message(raw, check_crc=False).body != b"hello"


def test_malformed_messages_raise_remote_protocol_error() -> None:
    raw = _one()
    bad_magic = bytearray(raw)
    bad_magic[4] ^= 0xFF
    with pytest.raises(RemoteProtocolError, match="magic"):
        decode_stored_message(bad_magic)
    with pytest.raises(RemoteProtocolError):
        decode_stored_message(raw[:50])
    with pytest.raises(RemoteProtocolError):
        decode_stored_message(raw[:-3])
    too_big = bytearray(raw)
    struct.pack_into(">i", too_big, 0, len(raw) + 1)
    with pytest.raises(RemoteProtocolError):
        decode_stored_message(too_big)


@settings(max_examples=300, deadline=None)
@given(garbage=st.binary(max_size=400), cut=st.integers(0, 400))
def test_garbage_raises_only_remote_protocol_error(garbage: bytes, cut: int) -> None:
    raw = _one()
    for data in (garbage, raw[:cut] + garbage, raw + garbage):
        try:
            list(iter_stored_messages(data))
        except RemoteProtocolError:
            pass


def test_iter_stored_messages_reads_back_to_back_and_stops_at_blank() -> None:
    a, b = _one(b"one", queue_offset=1), _one(b"two", queue_offset=2)
    blank = struct.pack(">ii", 64, BLANK_MAGIC_CODE) + bytes(56)
    got = list(iter_stored_messages(a + b + blank))
    assert [m.body for m in got] == [b"one", b"two"]
    assert [m.queue_offset for m in got] == [1, 2]


def test_compressed_body_is_inflated_on_request() -> None:
    raw = encode_stored_message(
        topic="T", body=zlib.compress(b"x" * 1000), sys_flag=MessageSysFlag.COMPRESSED
    )
    assert decode_stored_message(raw).body != b"x" * 1000
    msg = decode_stored_message(raw, decompress=True)
    assert msg.body == b"x" * 1000 and not msg.sys_flag & MessageSysFlag.COMPRESSED


def test_limits_are_enforced_when_encoding() -> None:
    with pytest.raises(ClientError):
        encode_stored_message(topic="t" * 128, body=b"")
    with pytest.raises(ClientError):
        encode_stored_message(topic="T", body=b"", properties={"k": "v" * 40000})
    with pytest.raises(ClientError):
        encode_stored_message(topic="T", body=b"", born_host=("not-an-ip", 1))


def test_java_string_hash_matches_java() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # surrogate pair, as Java
    assert java_string_hash("polygenelubricants") == -2147483648
    assert tags_hash(None) == 0 and tags_hash("TagA") == java_string_hash("TagA")


def test_sdk_message_properties() -> None:
    msg = Message("T", b"b", tags="created", keys=["o-1", "o-2"], delay_level=3)
    props = msg.all_properties()
    assert props == {PropertyKey.TAGS: "created", PropertyKey.KEYS: "o-1 o-2", PropertyKey.DELAY: "3"}
    ext = decode_stored_message(encode_stored_message(topic="T", body=b"b", properties=props))
    assert ext.tags == "created" and ext.keys == ["o-1", "o-2"] and ext.uniq_key is None

