"""SendBackProcessor called directly on a real broker: a consumed message sent back is stored
for ``%RETRY%group`` (through the delay levels) with one more reconsume, and in ``%DLQ%group``
past the group's (or the request's lower) limit; a producer's send to a retry topic past the
limit lands in the DLQ too; each refusal's code and remark."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
from processor_support import RunningBroker, send_request

from orbitmq.broker.tables.subscription_group_manager import SubscriptionGroupConfig
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import ConsumerSendMsgBackRequestHeader
from orbitmq.protocol.message import MessageExt, PropertyKey
from orbitmq.protocol.msgid import decode_offset_msg_id

TOPIC = "BackT"
SCHEDULE = "SCHEDULE_TOPIC_XXXX"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    b = RunningBroker(tmp_path_factory.mktemp("sendback"), auto_create_topic=False,
                      auto_create_subscription_group=False)
    b.run(lambda: b.controller.topics.update(TopicConfig(TOPIC, 1, 1)))
    for cfg in (SubscriptionGroupConfig("BackG"),
                SubscriptionGroupConfig("BackTwo", retry_max_times=2, retry_queue_nums=2),
                SubscriptionGroupConfig("BackNoRetry", retry_queue_nums=0)):
        b.run(functools.partial(b.controller.sub_groups.update, cfg))
    try:
        yield b
    finally:
        b.stop()


def _consumed(broker: RunningBroker, *, reconsume_times: int = 0) -> MessageExt:
    """A message a consumer got from TOPIC (with a UNIQ_KEY, as producers send them)."""
    resp = broker.answer(broker.processors.send.send_message, send_request(
        TOPIC, b"payload", properties={"UNIQ_KEY": "UNIQ-1", "KEYS": "k", "TAGS": "t"},
        reconsume_times=reconsume_times))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return _at(broker, decode_offset_msg_id(resp.ext_fields["msgId"])[2])


def _at(broker: RunningBroker, offset: int) -> MessageExt:
    msg = broker.run(functools.partial(broker.controller.store.look_message_by_offset, offset))
    assert msg is not None
    return msg


def _count(broker: RunningBroker, topic: str, queue_id: int) -> int:
    broker.settle()
    return broker.run(functools.partial(broker.controller.store.get_max_offset_in_queue,
                                        topic, queue_id))


def _last(broker: RunningBroker, topic: str, queue_id: int) -> MessageExt:
    end = _count(broker, topic, queue_id)
    found = broker.run(functools.partial(broker.controller.store.queue_entry, topic, queue_id,
                                         end - 1))
    assert found is not None
    return _at(broker, found[0])


def _send_back(broker: RunningBroker, offset: int, group: str, delay_level: int = 0,
               **fields: object) -> RemotingCommand:
    header = ConsumerSendMsgBackRequestHeader(offset, group, delay_level, **fields)  # type: ignore[arg-type]
    return broker.answer(broker.processors.send_back.consumer_send_msg_back,
                         RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK,
                                                 header.to_ext_fields()))


def test_a_message_sent_back_waits_in_the_delay_levels_for_the_retry_topic(
        broker: RunningBroker) -> None:
    msg = _consumed(broker)
    before = _count(broker, SCHEDULE, 2)
    resp = _send_back(broker, msg.commit_log_offset, "BackG")
    assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, None)

    # Level 3 + reconsume times (0): SCHEDULE_TOPIC_XXXX's queue 2, bound for %RETRY%BackG.
    assert _count(broker, SCHEDULE, 2) == before + 1
    retry = _last(broker, SCHEDULE, 2)
    assert bytes(retry.body) == b"payload"
    assert retry.reconsume_times == 1
    props = retry.properties
    assert props[PropertyKey.REAL_TOPIC] == "%RETRY%BackG"
    assert props[PropertyKey.DELAY] == "3"
    assert props[PropertyKey.RETRY_TOPIC] == TOPIC
    assert props[PropertyKey.ORIGIN_MESSAGE_ID] == "UNIQ-1"
    assert (props[PropertyKey.UNIQ_KEY], props[PropertyKey.KEYS], props[PropertyKey.TAGS]) \
        == ("UNIQ-1", "k", "t")
    tc = broker.run(lambda: broker.controller.topics.get("%RETRY%BackG"))
    assert tc is not None and tc.write_queue_nums == 1

    # Sent back again (the retry as its consumer got it): one more reconsume, the next level,
    # and the first topic and message id kept.
    again = _send_back(broker, retry.commit_log_offset, "BackG")
    assert again.code == ResponseCode.SUCCESS
    second = _last(broker, SCHEDULE, 3)
    assert second.reconsume_times == 2
    assert second.properties[PropertyKey.DELAY] == "4"
    assert second.properties[PropertyKey.RETRY_TOPIC] == TOPIC
    assert second.properties[PropertyKey.ORIGIN_MESSAGE_ID] == "UNIQ-1"


def test_the_request_s_delay_level_wins_over_the_broker_s(broker: RunningBroker) -> None:
    msg = _consumed(broker)
    assert _send_back(broker, msg.commit_log_offset, "BackG", delay_level=1).code == 0
    retry = _last(broker, SCHEDULE, 0)
    assert retry.properties[PropertyKey.DELAY] == "1"
    assert retry.properties[PropertyKey.REAL_TOPIC] == "%RETRY%BackG"


def test_past_the_group_s_retries_a_message_is_a_dead_letter(broker: RunningBroker) -> None:
    below = _consumed(broker, reconsume_times=1)
    assert _send_back(broker, below.commit_log_offset, "BackTwo").code == 0
    assert _last(broker, SCHEDULE, 3).properties[PropertyKey.REAL_TOPIC] == "%RETRY%BackTwo"
    tc = broker.run(lambda: broker.controller.topics.get("%RETRY%BackTwo"))
    assert tc is not None and tc.write_queue_nums == 2  # the group's retry queues

    dlq_before = _count(broker, "%DLQ%BackTwo", 0)
    msg = _consumed(broker, reconsume_times=2)  # retry_max_times = 2 reached
    resp = _send_back(broker, msg.commit_log_offset, "BackTwo", origin_msg_id="ORIGIN-9")
    assert resp.code == ResponseCode.SUCCESS
    assert _count(broker, "%DLQ%BackTwo", 0) == dlq_before + 1
    dead = _last(broker, "%DLQ%BackTwo", 0)
    assert (dead.topic, dead.reconsume_times, bytes(dead.body)) == ("%DLQ%BackTwo", 3, b"payload")
    assert PropertyKey.DELAY not in dead.properties
    assert dead.properties[PropertyKey.ORIGIN_MESSAGE_ID] == "ORIGIN-9"
    assert dead.properties[PropertyKey.RETRY_TOPIC] == TOPIC
    dlq = broker.run(lambda: broker.controller.topics.get("%DLQ%BackTwo"))
    assert dlq is not None and (dlq.write_queue_nums, dlq.perm) == (1, 6)


def test_a_lower_limit_in_the_request_or_a_negative_level_dead_letters_at_once(
        broker: RunningBroker) -> None:
    before = _count(broker, "%DLQ%BackG", 0)
    msg = _consumed(broker, reconsume_times=1)
    assert _send_back(broker, msg.commit_log_offset, "BackG", max_reconsume_times=1).code == 0
    assert _count(broker, "%DLQ%BackG", 0) == before + 1
    fresh = _consumed(broker)
    assert _send_back(broker, fresh.commit_log_offset, "BackG", delay_level=-1).code == 0
    assert _count(broker, "%DLQ%BackG", 0) == before + 2
    assert _last(broker, "%DLQ%BackG", 0).reconsume_times == 1


def test_a_group_without_retry_queues_drops_the_message(broker: RunningBroker) -> None:
    msg = _consumed(broker)
    end = broker.run(broker.controller.store.max_physical_offset)
    assert _send_back(broker, msg.commit_log_offset, "BackNoRetry").code == ResponseCode.SUCCESS
    assert broker.run(broker.controller.store.max_physical_offset) == end


def test_an_unknown_group_or_offset_is_refused(broker: RunningBroker) -> None:
    msg = _consumed(broker)
    unknown = _send_back(broker, msg.commit_log_offset, "BackNoSuchGroup")
    assert unknown.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    assert unknown.remark == "subscription group [BackNoSuchGroup] does not exist"
    nowhere = msg.commit_log_offset + 1
    bad = _send_back(broker, nowhere, "BackG")
    assert bad.code == ResponseCode.SYSTEM_ERROR
    assert bad.remark == f"look message by offset failed, {nowhere}"


def test_a_producer_s_send_to_a_retry_topic_past_the_limit_goes_to_the_dlq(
        broker: RunningBroker) -> None:
    send = broker.processors.send.send_message
    within = broker.answer(send, send_request("%RETRY%BackG", b"r", reconsume_times=16))
    assert within.code == ResponseCode.SUCCESS, within.remark
    assert _at(broker, decode_offset_msg_id(within.ext_fields["msgId"])[2]).topic == "%RETRY%BackG"
    past = broker.answer(send, send_request("%RETRY%BackG", b"r", reconsume_times=17))
    assert past.code == ResponseCode.SUCCESS, past.remark
    dead = _at(broker, decode_offset_msg_id(past.ext_fields["msgId"])[2])
    assert (dead.topic, dead.queue_id) == ("%DLQ%BackG", 0)
    lowered = broker.answer(send, send_request("%RETRY%BackG", b"r", reconsume_times=3,
                                               max_reconsume_times=2))
    assert _at(broker, decode_offset_msg_id(lowered.ext_fields["msgId"])[2]).topic == "%DLQ%BackG"

    # Without auto-creation a retry topic nobody made does not exist; one whose group was
    # deleted is refused for its group.
    nowhere = broker.answer(send, send_request("%RETRY%BackNoSuchGroup", b"r"))
    assert nowhere.code == ResponseCode.TOPIC_NOT_EXIST
    broker.run(lambda: broker.controller.topics.update(TopicConfig("%RETRY%BackGone", 1, 1)))
    orphan = broker.answer(send, send_request("%RETRY%BackGone", b"r"))
    assert orphan.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    assert orphan.remark == "subscription group [BackGone] does not exist"
