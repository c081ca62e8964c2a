"""Pure parts of sends and pulls: validation, compression, batch layout, response parsing."""

from __future__ import annotations

import zlib

import pytest

from orbitmq.client.consumer.pull_codec import (
    build_pull_request,
    parse_pull_response,
    parse_raw_pull_response,
)
from orbitmq.client.producer.send_codec import (
    build_send_request,
    parse_send_response,
    prepare_batch,
    prepare_message,
)
from orbitmq.client.results import PullStatus, SendStatus
from orbitmq.client.validation import check_group, check_message, check_topic
from orbitmq.errors import BrokerError, ClientError, RemoteProtocolError
from orbitmq.protocol.batch import decode_batch
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.expressions import parse_tags
from orbitmq.protocol.headers import (
    PullMessageRequestHeader,
    PullSysFlag,
    SendMessageRequestHeader,
)
from orbitmq.protocol.message import Message, MessageSysFlag
from orbitmq.protocol.properties import parse_properties
from orbitmq.protocol.stored import encode_stored_message, iter_stored_messages

MQ = MessageQueue("T", "broker-a", 3)
UNIQ = "7F00000100012A2B3C4D000000000001"


# -- validation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("topic", ["", "   ", "a b", "tópico", "x" * 128, "a/b", None, 7])
def test_illegal_topics_are_refused(topic):
    with pytest.raises(ClientError):
        check_topic(topic)


@pytest.mark.parametrize("topic", ["T", "%RETRY%g", "a|b", "Order_Topic-1", "x" * 127])
def test_legal_topics_pass(topic):
    assert check_topic(topic) == topic


def test_group_names_are_checked():
    assert check_group("order-service") == "order-service"
    for bad in ("", "a b", "g" * 256):
        with pytest.raises(ClientError):
            check_group(bad)


@pytest.mark.parametrize("msg", [
    Message("T", b""),
    Message("T", b"x" * 101),
    Message("T", "text"),  # type: ignore[arg-type]
    Message("", b"x"),
    Message("TBW102", b"x"),
    Message("T", b"x", delay_level=-1),
    "not a message",
])
def test_unsendable_messages_are_refused(msg):
    with pytest.raises(ClientError):
        check_message(msg, max_message_size=100)


def test_a_body_of_exactly_the_maximum_is_accepted():
    assert check_message(Message("T", b"x" * 100), max_message_size=100)


# -- send requests --------------------------------------------------------------------------------
def test_small_message_goes_plain_with_uniq_key_tags_keys_and_wait():
    msg = Message("T", b"hello", tags="created", keys=["k1", "k2"], flag=5,
                  properties={"custom": "v"})
    prepared = prepare_message(msg, UNIQ, compress_over=4096)
    assert prepared.body == b"hello" and prepared.sys_flag == 0 and prepared.msg_id == UNIQ
    props = parse_properties(prepared.properties.encode())
    assert props == {"custom": "v", "TAGS": "created", "KEYS": "k1 k2", "UNIQ_KEY": UNIQ,
                     "WAIT": "true"}
    assert msg.properties == {"custom": "v"}  # the caller's message is left alone


def test_a_uniq_key_set_by_the_caller_is_kept():
    msg = Message.with_system_properties("T", b"x", properties={"UNIQ_KEY": "MINE"})
    assert prepare_message(msg, UNIQ, 4096).msg_id == "MINE"


def test_body_over_the_threshold_is_compressed_and_flagged():
    body = b"abcd" * 2000
    prepared = prepare_message(Message("T", body), UNIQ, compress_over=4096)
    assert prepared.sys_flag & MessageSysFlag.COMPRESSED
    assert zlib.decompress(prepared.body) == body
    at_threshold = prepare_message(Message("T", b"a" * 4096), UNIQ, compress_over=4096)
    assert at_threshold.sys_flag == 0


def test_incompressible_body_is_sent_plain():
    import os

    body = os.urandom(8192)
    prepared = prepare_message(Message("T", body), UNIQ, compress_over=4096)
    assert prepared.sys_flag == 0 and prepared.body == body


def test_property_with_separator_is_refused():
    with pytest.raises(ClientError):
        prepare_message(Message("T", b"x", properties={"a": "b\x01c"}), UNIQ, 4096)


def test_send_request_uses_v2_names_and_round_trips():
    prepared = prepare_message(Message("T", b"hi", tags="t"), UNIQ, 4096)
    cmd = build_send_request(prepared, MQ, "pg", 4, born_timestamp_ms=1234)
    assert cmd.code == RequestCode.SEND_MESSAGE_V2
    assert cmd.ext_fields["a"] == "pg" and cmd.ext_fields["b"] == "T"
    header = SendMessageRequestHeader.from_v2_ext_fields(cmd.ext_fields)
    assert (header.topic, header.queue_id, header.default_topic, header.default_topic_queue_nums,
            header.born_timestamp, header.batch) == ("T", 3, "TBW102", 4, 1234, False)
    assert bytes(cmd.body) == b"hi"


def test_batch_encoding_carries_each_message_with_its_own_id():
    msgs = [Message("T", f"m{i}".encode(), tags="t", keys=f"k{i}") for i in range(3)]
    keys = [f"{UNIQ[:-1]}{i}" for i in range(3)]
    prepared = prepare_batch(msgs, keys, max_message_size=1 << 20)
    assert prepared.batch and prepared.msg_id == ",".join(keys)
    entries = decode_batch(prepared.body)
    assert [e.body for e in entries] == [b"m0", b"m1", b"m2"]
    assert [e.properties["UNIQ_KEY"] for e in entries] == keys
    assert entries[1].properties["KEYS"] == "k1"
    cmd = build_send_request(prepared, MQ, "pg", 4)
    assert cmd.code == RequestCode.SEND_BATCH_MESSAGE
    assert SendMessageRequestHeader.from_v2_ext_fields(cmd.ext_fields).batch is True


@pytest.mark.parametrize("msgs", [
    [],
    [Message("A", b"x"), Message("B", b"x")],
    [Message("A", b"x", delay_level=2)],
    [Message("A", b"x" * 600), Message("A", b"x" * 600)],
])
def test_bad_batches_are_refused(msgs):
    with pytest.raises(ClientError):
        prepare_batch(msgs, [UNIQ] * len(msgs), max_message_size=1000)


def _send_response(code: int, **fields: str) -> RemotingCommand:
    return RemotingCommand(code, flag=1, remark="why", ext_fields=fields)


def test_send_response_success_and_soft_statuses():
    prepared = prepare_message(Message("T", b"x"), UNIQ, 4096)
    fields = {"msgId": "0A000001000028AF0000000000000010", "queueId": "2", "queueOffset": "41"}
    result = parse_send_response(_send_response(ResponseCode.SUCCESS, **fields), prepared, MQ)
    assert result.status is SendStatus.OK and result.msg_id == UNIQ
    assert result.offset_msg_id == fields["msgId"]
    assert result.queue == MessageQueue("T", "broker-a", 2) and result.queue_offset == 41
    soft = parse_send_response(_send_response(ResponseCode.FLUSH_DISK_TIMEOUT, **fields),
                               prepared, MQ)
    assert soft.status is SendStatus.FLUSH_DISK_TIMEOUT


@pytest.mark.parametrize(("code", "retriable"), [
    (ResponseCode.SYSTEM_BUSY, True),
    (ResponseCode.SERVICE_NOT_AVAILABLE, True),
    (ResponseCode.TOPIC_NOT_EXIST, True),
    (ResponseCode.MESSAGE_ILLEGAL, False),
    (ResponseCode.NO_PERMISSION, True),
])
def test_send_failures_raise_broker_errors(code, retriable):
    prepared = prepare_message(Message("T", b"x"), UNIQ, 4096)
    with pytest.raises(BrokerError) as info:
        parse_send_response(_send_response(code), prepared, MQ)
    assert info.value.code == code and info.value.retriable is retriable
    assert info.value.remark == "why"


def test_send_success_without_header_is_a_protocol_error():
    prepared = prepare_message(Message("T", b"x"), UNIQ, 4096)
    with pytest.raises(RemoteProtocolError):
        parse_send_response(_send_response(ResponseCode.SUCCESS), prepared, MQ)


# -- pulls ----------------------------------------------------------------------------------------
def test_parse_tags():
    assert parse_tags("*") is None and parse_tags("") is None and parse_tags(None) is None
    assert parse_tags(" a || b ||") == frozenset({"a", "b"})


def test_pull_request_flags():
    cmd = build_pull_request("g", MQ, 10, 32, "a || b", suspend=None)
    header = PullMessageRequestHeader.from_ext_fields(cmd.ext_fields)
    assert header.sys_flag == PullSysFlag.SUBSCRIPTION
    assert (header.queue_offset, header.max_msg_nums, header.subscription) == (10, 32, "a || b")
    long_poll = build_pull_request("g", MQ, 10, 32, "*", suspend=1.5)
    header = PullMessageRequestHeader.from_ext_fields(long_poll.ext_fields)
    assert header.sys_flag == PullSysFlag.SUBSCRIPTION | PullSysFlag.SUSPEND
    assert header.suspend_timeout_millis == 1500


def _stored(offset: int, body: bytes, tags: str | None, sys_flag: int = 0) -> bytes:
    props = {"UNIQ_KEY": f"ID{offset}"}
    if tags:
        props["TAGS"] = tags
    return encode_stored_message(topic="T", body=body, queue_id=3, queue_offset=offset,
                                 physical_offset=100 * offset, sys_flag=sys_flag,
                                 properties=props)


def _pull_response(code: int, body: bytes = b"") -> RemotingCommand:
    fields = {"suggestWhichBrokerId": "0", "nextBeginOffset": "13", "minOffset": "0",
              "maxOffset": "20"}
    return RemotingCommand(code, flag=1, ext_fields=fields, body=body)


def test_pull_found_decodes_decompresses_and_rechecks_tags():
    big = b"z" * 10000
    body = (_stored(10, b"a", "a") + _stored(11, zlib.compress(big), "b",
                                                 int(MessageSysFlag.COMPRESSED))
            + _stored(12, b"c", "collides-with-a"))
    result = parse_pull_response(_pull_response(ResponseCode.SUCCESS, body),
                                 frozenset({"a", "b"}))
    assert result.status is PullStatus.FOUND
    assert (result.next_begin_offset, result.min_offset, result.max_offset) == (13, 0, 20)
    assert [m.queue_offset for m in result.messages] == [10, 11]
    assert result.messages[1].body == big and result.messages[1].msg_id == "ID11"
    everything = parse_pull_response(_pull_response(ResponseCode.SUCCESS, body), None)
    assert len(everything.messages) == 3


@pytest.mark.parametrize(("code", "status"), [
    (ResponseCode.PULL_NOT_FOUND, PullStatus.NO_NEW_MSG),
    (ResponseCode.PULL_RETRY_IMMEDIATELY, PullStatus.NO_MATCHED_MSG),
    (ResponseCode.PULL_OFFSET_MOVED, PullStatus.OFFSET_ILLEGAL),
])
def test_pull_statuses(code, status):
    result = parse_pull_response(_pull_response(code), None)
    assert result.status is status and result.messages == [] and result.next_begin_offset == 13


def test_pull_failure_raises_and_corruption_is_detected():
    with pytest.raises(BrokerError) as info:
        parse_pull_response(RemotingCommand(ResponseCode.SUBSCRIPTION_PARSE_FAILED, flag=1), None)
    assert info.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    body = bytearray(_stored(10, b"abc", None))
    body[body.index(b"abc")] ^= 0xFF  # a flipped body byte: CRC mismatch
    with pytest.raises(RemoteProtocolError):
        parse_pull_response(_pull_response(ResponseCode.SUCCESS, bytes(body)), None)


def test_raw_pull_hands_the_body_back_untouched_with_the_tags_to_recheck():
    body = _stored(10, b"a", "a") + _stored(11, b"b", "b")
    raw = parse_raw_pull_response(_pull_response(ResponseCode.SUCCESS, memoryview(body)),
                                  frozenset({"a"}))
    assert raw.status is PullStatus.FOUND and type(raw.body) is bytes and raw.body == body
    assert (raw.next_begin_offset, raw.min_offset, raw.max_offset) == (13, 0, 20)
    assert raw.tags == {"a"} and not raw.removed
    decoded = parse_pull_response(_pull_response(ResponseCode.SUCCESS, body), frozenset({"a"}))
    assert [m for m in iter_stored_messages(raw.body) if m.tags in raw.tags] == decoded.messages
    corrupt = bytearray(body)
    corrupt[corrupt.index(b"a", 60)] ^= 0xFF  # not checked here: the caller's decoder does
    assert parse_raw_pull_response(_pull_response(ResponseCode.SUCCESS, bytes(corrupt)),
                                   None).body == bytes(corrupt)


def test_raw_pull_statuses_and_the_removed_flag():
    removing = RemotingCommand(ResponseCode.PULL_RETRY_IMMEDIATELY, flag=1,
                               remark="MESSAGE_WAS_REMOVING",
                               ext_fields=_pull_response(0).ext_fields, body=b"ignored")
    raw = parse_raw_pull_response(removing, None)
    assert raw.status is PullStatus.NO_MATCHED_MSG and raw.removed and raw.body == b""
    filtered = parse_raw_pull_response(_pull_response(ResponseCode.PULL_RETRY_IMMEDIATELY), None)
    assert filtered.status is PullStatus.NO_MATCHED_MSG and not filtered.removed
    with pytest.raises(BrokerError) as info:
        parse_raw_pull_response(RemotingCommand(ResponseCode.SUBSCRIPTION_PARSE_FAILED, flag=1),
                                None)
    assert info.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


def test_one_pull_builder_for_push_subscriptions_too():
    from orbitmq.protocol.bodies import SubscriptionData

    sub = SubscriptionData("T", "a > 5", sub_version=77, expression_type="SQL92")
    h = PullMessageRequestHeader.from_ext_fields(
        build_pull_request("g", MQ, 4, 32, sub, 15.0, commit_offset=3).ext_fields)
    assert (h.subscription, h.expression_type, h.sub_version, h.commit_offset) == (
        "a > 5", "SQL92", 77, 3)
    assert h.sys_flag == PullSysFlag.SUBSCRIPTION | PullSysFlag.SUSPEND | PullSysFlag.COMMIT_OFFSET
    plain = PullMessageRequestHeader.from_ext_fields(
        build_pull_request("g", MQ, 4, 32, "*", None, commit_offset=-1).ext_fields)
    assert plain.sys_flag == PullSysFlag.SUBSCRIPTION and plain.commit_offset == 0
    assert plain.expression_type == "TAG" and plain.sub_version == 0
