"""RocketMQ 4.x trace records: the fixtures below are what RocketMQ's TraceDataEncoder writes for
the contexts named beside them (fields in its order, CONTENT_SPLITOR char 1 between them,
FIELD_SPLITOR char 2 after each record, Java's "null" for a missing tag or key); they decode to
those contexts and encode back to the same text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbitmq.errors import ClientError
from orbitmq.protocol.trace_codec import (
    CONTENT_SPLITOR,
    FIELD_SPLITOR,
    ConsumeReturnType,
    TraceDecodeError,
    TraceMessageType,
    TraceRecord,
    TraceType,
    decode_trace_data,
    encode_record,
    encode_records,
    trace_keys,
)

C, F = "\x01", "\x02"
MSG_ID = "7F00000100002A9F0000000000000001"
OFFSET_ID = "7F00000100002A9F00000000000012AB"

# A sync send of a message with tags and two keys (SendMessageTraceHookImpl + encoder).
PUB = C.join(["Pub", "1700000000000", "DefaultRegion", "OrderProducers", "Orders", MSG_ID,
              "created", "order-17 user-3", "127.0.0.1:10911", "16", "3", "0", OFFSET_ID,
              "true"]) + F
# A message without tags or keys: Java appends the null references as "null".
PUB_NULLS = C.join(["Pub", "1700000000001", "DefaultRegion", "P", "T", MSG_ID, "null", "null",
                    "127.0.0.1:10911", "1", "0", "4", OFFSET_ID, "false"]) + F
SUB_BEFORE = C.join(["SubBefore", "1700000000100", "DefaultRegion", "Workers",
                     "0A0000010000ABCD0000000000000009", MSG_ID, "2", "order-17 user-3"]) + F
SUB_AFTER = C.join(["SubAfter", "0A0000010000ABCD0000000000000009", MSG_ID, "12", "false",
                    "order-17 user-3", "2", "1700000000100", "Workers"]) + F
# The cloud access channel leaves out timestamp and group, keeping the content separator.
SUB_AFTER_CLOUD = C.join(["SubAfter", "REQ", MSG_ID, "5", "true", "null", "0", ""]) + F
END_TX = C.join(["EndTransaction", "1700000000200", "DefaultRegion", "TxProducers", "Orders",
                 MSG_ID, "null", "order-17", "127.0.0.1:10911", "2", "0A00000100002A9F00000000000000FF",
                 "COMMIT_MESSAGE", "true"]) + F
RECALL = C.join(["Recall", "1700000000300", "DefaultRegion", "P", "Reminders", MSG_ID, "true"]) + F


def test_the_separators_are_rocketmqs() -> None:
    assert (chr(1), chr(2)) == (CONTENT_SPLITOR, FIELD_SPLITOR)


def test_a_pub_record_decodes_field_by_field() -> None:
    [r] = decode_trace_data(PUB)
    assert r == TraceRecord(
        TraceType.PUB, timestamp_ms=1700000000000, region_id="DefaultRegion",
        group="OrderProducers", topic="Orders", msg_id=MSG_ID, tags="created",
        keys="order-17 user-3", store_host="127.0.0.1:10911", body_length=16, cost_time_ms=3,
        msg_type=TraceMessageType.NORMAL, offset_msg_id=OFFSET_ID, success=True)
    assert r.key_list == ["order-17", "user-3"]


def test_null_tags_and_keys_are_none_and_written_back_as_null() -> None:
    [r] = decode_trace_data(PUB_NULLS)
    assert r.tags is None and r.keys is None and not r.success
    assert r.msg_type == TraceMessageType.ORDER
    assert encode_record(r) == PUB_NULLS


def test_consume_records_decode() -> None:
    before, after = decode_trace_data(SUB_BEFORE + SUB_AFTER)
    assert (before.type, before.group, before.retry_times, before.request_id) == (
        TraceType.SUB_BEFORE, "Workers", 2, "0A0000010000ABCD0000000000000009")
    assert (after.type, after.request_id, after.cost_time_ms, after.success) == (
        TraceType.SUB_AFTER, before.request_id, 12, False)
    assert after.context_code == ConsumeReturnType.EXCEPTION
    assert (after.timestamp_ms, after.group) == (1700000000100, "Workers")
    [cloud] = decode_trace_data(SUB_AFTER_CLOUD)
    assert (cloud.timestamp_ms, cloud.group, cloud.keys) == (0, "", None)


def test_end_transaction_and_recall_decode() -> None:
    tx, recall = decode_trace_data(END_TX + RECALL)
    assert tx.msg_type == TraceMessageType.TRANS_COMMIT
    assert (tx.transaction_state, tx.from_transaction_check, tx.tags) == (
        "COMMIT_MESSAGE", True, None)
    assert (recall.type, recall.topic, recall.success) == (TraceType.RECALL, "Reminders", True)


@pytest.mark.parametrize("fixture", [PUB, PUB_NULLS, SUB_BEFORE, SUB_AFTER, END_TX, RECALL])
def test_java_records_encode_back_to_the_same_text(fixture: str) -> None:
    assert encode_records(decode_trace_data(fixture)) == fixture


def test_a_batch_body_and_its_keys() -> None:
    body = (PUB + SUB_BEFORE + SUB_AFTER).encode()
    records = decode_trace_data(body)
    assert [r.type for r in records] == [TraceType.PUB, TraceType.SUB_BEFORE, TraceType.SUB_AFTER]
    assert trace_keys(records) == [MSG_ID, "order-17", "user-3"]


def test_older_pub_records_are_read() -> None:
    # 13 fields: no offsetMsgId; 15: the client host after the success flag.
    short = C.join(["Pub", "1", "R", "P", "T", MSG_ID, "t", "k", "h", "1", "2", "0", "true"]) + F
    [r] = decode_trace_data(short)
    assert r.success and r.offset_msg_id == ""
    [r] = decode_trace_data(PUB[:-1] + C + "10.0.0.7" + F)
    assert r.client_host == "10.0.0.7" and r.offset_msg_id == OFFSET_ID


def test_unknown_types_are_passed_over() -> None:
    assert decode_trace_data("Future" + C + "x" + F + PUB)[0].type is TraceType.PUB


@pytest.mark.parametrize("bad, why", [
    (C.join(["Pub", "1", "R"]) + F, "fewer than"),
    (PUB.replace("1700000000000", "soon"), "timestamp"),
    (PUB.replace(C + "16" + C, C + "99999999999" + C), "out of range"),
    (PUB.replace(C + "0" + C + OFFSET_ID, C + "9" + C + OFFSET_ID), "msgType"),
])
def test_malformed_records_are_refused_or_reported(bad: str, why: str) -> None:
    with pytest.raises(TraceDecodeError, match=why):
        decode_trace_data(bad)
    errors: list[str] = []
    assert [r.type for r in decode_trace_data(bad + RECALL, errors=errors)] == [TraceType.RECALL]
    assert len(errors) == 1 and why in errors[0]


def test_bytes_that_are_not_utf8_are_refused() -> None:
    with pytest.raises(TraceDecodeError, match="UTF-8"):
        decode_trace_data(b"Pub\x01\xff")


def test_a_field_holding_a_separator_is_not_encoded() -> None:
    with pytest.raises(ClientError, match="tags"):
        encode_record(TraceRecord(TraceType.PUB, tags="a\x01b"))


_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                max_size=12).filter(lambda s: s != "null")
_i32 = st.integers(0, 2**31 - 1)


@given(t=st.sampled_from(list(TraceType)), ts=st.integers(1, 2**62), group=_text, topic=_text,
       msg_id=_text.filter(bool), tags=st.none() | _text, keys=st.none() | _text, n=_i32,
       ok=st.booleans(), mtype=st.sampled_from(list(TraceMessageType)))
def test_round_trips(t: TraceType, ts: int, group: str, topic: str, msg_id: str,
                     tags: str | None, keys: str | None, n: int, ok: bool,
                     mtype: TraceMessageType) -> None:
    r = TraceRecord(t, timestamp_ms=ts, region_id="DefaultRegion", group=group, topic=topic,
                    msg_id=msg_id, tags=tags, keys=keys, store_host="h:1", body_length=n,
                    cost_time_ms=n, msg_type=mtype, offset_msg_id="O", success=ok,
                    request_id="R", retry_times=n, context_code=ConsumeReturnType.FAILED,
                    transaction_id="X", transaction_state="UNKNOW", from_transaction_check=ok)
    text = encode_record(r)
    [back] = decode_trace_data(text)
    assert encode_record(back) == text
    assert (back.type, back.msg_id) == (t, msg_id)
