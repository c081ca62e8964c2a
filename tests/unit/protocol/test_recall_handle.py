"""Recall handles (RocketMQ 5.3's RecallMessageHandle v1) and the RECALL_MESSAGE headers."""

from __future__ import annotations

import base64

import pytest

from orbitmq.errors import BrokerError
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.headers import (
    RecallMessageRequestHeader,
    RecallMessageResponseHeader,
    SendMessageResponseHeader,
)
from orbitmq.protocol.recall_handle import build_recall_handle, decode_recall_handle, delete_key


def test_a_handle_is_rocketmqs_v1_format() -> None:
    handle = build_recall_handle("Orders", "broker-a", 1_700_000_000_000, "7F00000100002A9F0000000000000001")
    # What RocketMQ's HandleV1.buildHandle gives: URL-safe base64, padded, of the fields joined
    # by spaces, the timestamp one past the delivery time.
    raw = "v1 Orders broker-a 1700000000001 7F00000100002A9F0000000000000001"
    assert handle == base64.urlsafe_b64encode(raw.encode()).decode()
    h = decode_recall_handle(handle)
    assert (h.topic, h.broker_name, h.timestamp, h.due_ms, h.message_id) == (
        "Orders", "broker-a", 1_700_000_000_001, 1_700_000_000_000, "7F00000100002A9F0000000000000001")
    assert delete_key(h.topic, h.message_id) == "Orders+7F00000100002A9F0000000000000001"
    assert decode_recall_handle(handle.rstrip("=")) == h  # padding optional, as Java decodes


def test_a_handle_with_more_fields_is_read_as_rocketmq_reads_it() -> None:
    extra = base64.urlsafe_b64encode(b"v1 T b 5 id more").decode()
    assert decode_recall_handle(extra).message_id == "id"


@pytest.mark.parametrize("text, remark", [
    ("", "recall handle is invalid"),
    ("!!!", "recall handle is invalid"),
    (base64.urlsafe_b64encode(b"v2 T b 5 id").decode(), "recall handle is invalid"),
    (base64.urlsafe_b64encode(b"v1 T b 5").decode(), "recall handle is invalid"),
    (base64.urlsafe_b64encode(b"\xff\xfe").decode(), "recall handle is invalid"),
    (base64.urlsafe_b64encode(b"v1 T b soon id").decode(), "recall failed, timestamp invalid"),
    (base64.urlsafe_b64encode(b"v1 T b -5 id").decode(), "recall failed, timestamp invalid"),
    ("A" * 2000, "recall handle is invalid"),
])
def test_bad_handles_are_refused_with_rocketmqs_code(text: str, remark: str) -> None:
    with pytest.raises(BrokerError) as refused:
        decode_recall_handle(text)
    assert (refused.value.code, refused.value.remark) == (ResponseCode.ILLEGAL_OPERATION, remark)


def test_the_headers_use_rocketmqs_field_names() -> None:
    assert int(RequestCode.RECALL_MESSAGE) == 370
    h = RecallMessageRequestHeader(topic="T", recall_handle="H", producer_group="PG")
    assert h.to_ext_fields() == {"topic": "T", "recallHandle": "H", "producerGroup": "PG"}
    assert RecallMessageRequestHeader.from_ext_fields({"topic": "T", "recallHandle": "H"}) == \
        RecallMessageRequestHeader(topic="T", recall_handle="H")
    assert RecallMessageResponseHeader(msg_id="M").to_ext_fields() == {"msgId": "M"}
    send = SendMessageResponseHeader.from_ext_fields(
        {"msgId": "X", "queueId": "0", "queueOffset": "3", "recallHandle": "H"})
    assert send.recall_handle == "H"
