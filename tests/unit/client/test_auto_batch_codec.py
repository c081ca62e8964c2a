"""Pure parts of auto-batching: per-message encoding, batch bodies of encoded messages, and a
batch's receipt fanned out into one SendResult per message."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbitmq.client.producer.send_codec import (
    _wire_properties,
    encode_message,
    encoded_size,
    prepare_batch,
    prepare_encoded_batch,
    prepare_message,
    prepare_single,
    split_batch_result,
)
from orbitmq.client.results import SendResult, SendStatus
from orbitmq.errors import ClientError
from orbitmq.protocol.batch import decode_batch
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.message import RESERVED_PROPERTIES, Message
from orbitmq.protocol.properties import encode_properties

MQ = MessageQueue("T", "broker-a", 3)
UNIQ = "7F00000100012A2B3C4D000000000001"
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
# Reserved names are refused when the Message is built, before anything is encoded.
names = texts.filter(lambda name: name not in RESERVED_PROPERTIES)


@given(tags=st.none() | texts, keys=st.none() | texts | st.lists(texts, max_size=3),
       delay=st.integers(0, 18), props=st.dictionaries(names, texts, max_size=3),
       body=st.binary(min_size=1, max_size=64), flag=st.integers(-(2**31), 2**31 - 1),
       priority=st.none() | st.integers(0, 9))
def test_encode_message_writes_what_the_general_property_encoder_writes(
        tags, keys, delay, props, body, flag, priority):
    if priority is not None:
        delay = 0  # a priority message has no delay level
    msg = Message("T", body, tags=tags, keys=keys, flag=flag, properties=props, delay_level=delay,
                  priority=priority)
    try:
        expected = encode_properties(_wire_properties(msg, UNIQ))
    except ClientError:
        with pytest.raises(ClientError):
            encode_message(msg, UNIQ)
        return
    msg_id, got_flag, got_body, raw = encode_message(msg, UNIQ)
    assert (msg_id, got_flag, got_body, raw) == (props.get("UNIQ_KEY", UNIQ), flag, body, expected)


def test_encode_message_copies_a_mutable_body():
    body = bytearray(b"before")
    encoded = encode_message(Message("T", body), UNIQ)  # type: ignore[arg-type]
    body[:] = b"after!"
    assert encoded[2] == b"before" and type(encoded[2]) is bytes


def test_a_batch_of_one_is_exactly_a_single_send():
    for msg in (Message("T", b"x", tags="t", keys=["a", "b"]), Message("T", b"y" * 5000)):
        assert prepare_single("T", encode_message(msg, UNIQ), 4096) == prepare_message(msg, UNIQ, 4096)


def test_encoded_batch_is_byte_for_byte_the_batch_encoding():
    msgs = [Message("T", f"m{i}".encode() * (i + 1), tags="t", keys=f"k{i}", flag=i,
                    properties={"p": str(i)}) for i in range(5)]
    ids = [f"{UNIQ[:-1]}{i}" for i in range(5)]
    encoded = [encode_message(m, k) for m, k in zip(msgs, ids, strict=True)]
    batch = prepare_encoded_batch("T", encoded)
    assert batch == prepare_batch(msgs, ids, max_message_size=1 << 20)
    assert len(batch.body) == sum(encoded_size(e) for e in encoded)
    entries = decode_batch(batch.body)
    assert [(e.flag, e.body, e.properties["UNIQ_KEY"]) for e in entries] == [
        (m.flag, m.body, k) for m, k in zip(msgs, ids, strict=True)]


def test_bad_encoded_batches_are_refused():
    with pytest.raises(ClientError):
        prepare_encoded_batch("T", [])
    with pytest.raises(ClientError):
        prepare_encoded_batch("T", [(UNIQ, 2**31, b"x", b""), (UNIQ, 0, b"y", b"")])


def test_a_batch_receipt_becomes_one_result_per_message():
    receipt = SendResult(SendStatus.FLUSH_DISK_TIMEOUT, "A,B,C", "OA,OB,OC", MQ, 40)
    assert split_batch_result(receipt, ["A", "B", "C"]) == [
        SendResult(SendStatus.FLUSH_DISK_TIMEOUT, "A", "OA", MQ, 40),
        SendResult(SendStatus.FLUSH_DISK_TIMEOUT, "B", "OB", MQ, 41),
        SendResult(SendStatus.FLUSH_DISK_TIMEOUT, "C", "OC", MQ, 42),
    ]
    short = SendResult(SendStatus.OK, "A,B", "OA", MQ, 0)  # a broker answering one id only
    assert [r.offset_msg_id for r in split_batch_result(short, ["A", "B"])] == ["OA", ""]
