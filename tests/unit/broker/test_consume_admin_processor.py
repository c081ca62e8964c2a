"""ConsumeAdminProcessor called directly on a real broker: a group's producers, who consumes a
topic, consume time spans, a group's offsets cloned to another, raw consume queue entries;
each refusal's code and remark."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any

import pytest
from processor_support import (
    Peer,
    RunningBroker,
    heartbeat,
    json_body,
    running_broker,
    send_request,
)

from orbitmq.protocol.admin_headers import (
    CloneGroupOffsetRequestHeader,
    GetProducerConnectionListRequestHeader,
    QueryConsumeQueueRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
)
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import QueryTopicConsumeByWhoRequestHeader
from orbitmq.protocol.message import MessageExt, tags_hash
from orbitmq.protocol.msgid import decode_offset_msg_id

NAME = "broker-ca"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from running_broker(tmp_path_factory.mktemp("consumeadmin"), auto_create_topic=False,
                              broker_name=NAME)


def _topic(broker: RunningBroker, name: str, queues: int = 1) -> None:
    broker.run(functools.partial(broker.controller.topics.update, TopicConfig(name, queues, queues)))


def _send(broker: RunningBroker, topic: str, n: int, **props: str) -> list[MessageExt]:
    out = []
    for _ in range(n):
        resp = broker.answer(broker.processors.send.send_message,
                             send_request(topic, b"body", properties=props or None))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        offset = decode_offset_msg_id(resp.ext_fields["msgId"])[2]
        msg = broker.run(functools.partial(broker.controller.store.look_message_by_offset, offset))
        assert msg is not None
        out.append(msg)
        time.sleep(0.003)
    broker.settle()
    return out


def _commit(broker: RunningBroker, group: str, topic: str, queue_id: int, offset: int) -> None:
    broker.run(lambda: broker.controller.offsets.commit(group, topic, queue_id, offset))


def _offset(broker: RunningBroker, group: str, topic: str, queue_id: int) -> int:
    return broker.run(lambda: broker.controller.offsets.query(group, topic, queue_id))


def test_a_group_s_producer_connections(broker: RunningBroker) -> None:
    peer = Peer()
    assert broker.answer(broker.processors.clients.heart_beat,
                         heartbeat("ca-producer", producers=["CaPG"]), peer).code == 0

    def listing(group: str) -> Any:
        resp = broker.answer(broker.processors.consume_admin.get_producer_connection_list,
                             RemotingCommand.request(RequestCode.GET_PRODUCER_CONNECTION_LIST,
                                                     GetProducerConnectionListRequestHeader(group)
                                                     .to_ext_fields()))
        assert resp.code == ResponseCode.SUCCESS
        return json_body(resp)["connectionSet"]

    assert listing("CaPG") == [{"clientId": "ca-producer", "clientAddr": peer.peer,
                                "language": "PYTHON", "version": 0}]
    assert listing("CaNoProducers") == []


def test_who_consumes_a_topic_by_subscription_or_by_committed_offsets(
        broker: RunningBroker) -> None:
    assert broker.answer(broker.processors.clients.heart_beat,
                         heartbeat("ca-consumer", consumers={"CaSubscriber": ["CaWho"],
                                                             "CaElsewhere": ["CaOther"]}),
                         Peer()).code == 0
    _commit(broker, "CaCommitted", "CaWho", 0, 3)

    def groups(topic: str) -> list[str]:
        resp = broker.answer(broker.processors.consume_admin.query_topic_consume_by_who,
                             RemotingCommand.request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO,
                                                     QueryTopicConsumeByWhoRequestHeader(topic)
                                                     .to_ext_fields()))
        assert resp.code == ResponseCode.SUCCESS
        found: list[str] = json_body(resp)["groupList"]
        return found

    assert groups("CaWho") == ["CaCommitted", "CaSubscriber"]
    assert groups("CaNobody") == []


def _span(broker: RunningBroker, topic: str, group: str) -> RemotingCommand:
    return broker.answer(broker.processors.consume_admin.query_consume_time_span,
                         RemotingCommand.request(RequestCode.QUERY_CONSUME_TIME_SPAN,
                                                 QueryConsumeTimeSpanRequestHeader(topic, group)
                                                 .to_ext_fields()))


def test_a_consume_time_span_per_queue(broker: RunningBroker) -> None:
    _topic(broker, "CaSpan", queues=2)
    msgs = _send(broker, "CaSpan", 3)  # queue 0 (send_request's queue)
    _commit(broker, "CaSpanG", "CaSpan", 0, 1)
    time.sleep(0.02)
    resp = _span(broker, "CaSpan", "CaSpanG")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    q0, q1 = json_body(resp)["consumeTimeSpanSet"]
    assert q0["messageQueue"] == {"topic": "CaSpan", "brokerName": NAME, "queueId": 0}
    assert q0["minTimeStamp"] == msgs[0].store_timestamp
    assert q0["maxTimeStamp"] == msgs[2].store_timestamp
    assert q0["consumeTimeStamp"] == msgs[0].store_timestamp  # the last consumed message's
    # The next unconsumed message (offset 1) has waited since it was stored.
    waited = int(time.time() * 1000) - msgs[1].store_timestamp
    assert 20 <= q0["delayTime"] <= waited
    assert q1["messageQueue"]["queueId"] == 1  # empty: no times, no delay
    assert (q1["minTimeStamp"], q1["maxTimeStamp"], q1["delayTime"]) == (-1, -1, 0)


def test_a_consume_time_span_of_an_unknown_topic_is_topic_not_exist(broker: RunningBroker) -> None:
    resp = _span(broker, "CaSpanNone", "G")
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    assert resp.remark == "topic[CaSpanNone] not exist"


def _clone(broker: RunningBroker, src: str, dest: str, topic: str | None = None,
           offline: bool = False) -> RemotingCommand:
    header = CloneGroupOffsetRequestHeader(src, dest, topic, offline)
    return broker.answer(broker.processors.consume_admin.clone_group_offset,
                         RemotingCommand.request(RequestCode.CLONE_GROUP_OFFSET,
                                                 header.to_ext_fields()))


def test_a_group_s_offsets_are_cloned_queue_by_queue(broker: RunningBroker) -> None:
    _topic(broker, "CaCloneA", queues=2)
    _topic(broker, "CaCloneB")
    _commit(broker, "CaSrc", "CaCloneA", 0, 5)
    _commit(broker, "CaSrc", "CaCloneA", 1, 7)
    _commit(broker, "CaSrc", "CaCloneB", 0, 9)
    _commit(broker, "CaSrc", "CaCloneGone", 0, 4)  # a topic no longer here: left out

    assert _clone(broker, "CaSrc", "CaDestOne", topic="CaCloneB").code == ResponseCode.SUCCESS
    assert _offset(broker, "CaDestOne", "CaCloneB", 0) == 9
    assert _offset(broker, "CaDestOne", "CaCloneA", 0) < 0

    assert _clone(broker, "CaSrc", "CaDestAll").code == ResponseCode.SUCCESS
    assert [_offset(broker, "CaDestAll", t, q) for t, q in
            (("CaCloneA", 0), ("CaCloneA", 1), ("CaCloneB", 0))] == [5, 7, 9]
    assert _offset(broker, "CaDestAll", "CaCloneGone", 0) < 0
    assert _offset(broker, "CaSrc", "CaCloneA", 1) == 7  # the source keeps its own


def test_an_online_source_group_clones_only_what_it_subscribes_to_unless_offline(
        broker: RunningBroker) -> None:
    _topic(broker, "CaSubA")
    _topic(broker, "CaSubB")
    _commit(broker, "CaOnline", "CaSubA", 0, 2)
    _commit(broker, "CaOnline", "CaSubB", 0, 3)
    assert broker.answer(broker.processors.clients.heart_beat,
                         heartbeat("ca-online", consumers={"CaOnline": ["CaSubA"]}),
                         Peer()).code == 0
    assert _clone(broker, "CaOnline", "CaOnDest").code == ResponseCode.SUCCESS
    assert (_offset(broker, "CaOnDest", "CaSubA", 0), _offset(broker, "CaOnDest", "CaSubB", 0)) \
        == (2, -1)
    assert _clone(broker, "CaOnline", "CaOffDest", offline=True).code == ResponseCode.SUCCESS
    assert _offset(broker, "CaOffDest", "CaSubB", 0) == 3


def test_a_clone_with_nothing_to_copy_or_an_illegal_group_is_refused(
        broker: RunningBroker) -> None:
    nothing = _clone(broker, "CaEmptySrc", "CaEmptyDest")
    assert nothing.code == ResponseCode.QUERY_NOT_FOUND
    assert nothing.remark == "group CaEmptySrc has no committed offsets to clone"
    _topic(broker, "CaCloneT")
    on_topic = _clone(broker, "CaEmptySrc", "CaEmptyDest", topic="CaCloneT")
    assert on_topic.remark == "group CaEmptySrc has no committed offsets on topic CaCloneT to clone"
    illegal = _clone(broker, "CaSrc", "bad dest")
    assert illegal.code == ResponseCode.INVALID_PARAMETER
    assert illegal.remark is not None and illegal.remark.startswith("destGroup: ")


def _queue(broker: RunningBroker, topic: str, queue_id: int, index: int, count: int,
           group: str | None = None) -> RemotingCommand:
    header = QueryConsumeQueueRequestHeader(topic, queue_id, index, count, group)
    return broker.answer(broker.processors.consume_admin.query_consume_queue,
                         RemotingCommand.request(RequestCode.QUERY_CONSUME_QUEUE,
                                                 header.to_ext_fields()))


def test_raw_consume_queue_entries_and_the_group_s_subscription(broker: RunningBroker) -> None:
    _topic(broker, "CaQueue")
    msgs = _send(broker, "CaQueue", 3, TAGS="tagQ")
    resp = _queue(broker, "CaQueue", 0, 1, 5)
    assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, None)
    body = json_body(resp)
    assert (body["minQueueIndex"], body["maxQueueIndex"]) == (0, 3)
    assert body["queueData"] == [{"physicOffset": m.commit_log_offset, "physicSize": m.store_size,
                                  "tagsCode": tags_hash("tagQ")} for m in msgs[1:]]
    assert "subscriptionData" not in body and "filterData" not in body

    offline = json_body(_queue(broker, "CaQueue", 0, 0, 1, group="CaQueueG"))
    assert offline["filterData"] == "CaQueueG@CaQueue is not online!"
    assert broker.answer(broker.processors.clients.heart_beat,
                         heartbeat("ca-q", consumers={"CaQueueG": ["CaQueue"]}), Peer()).code == 0
    online = json_body(_queue(broker, "CaQueue", 0, 0, 1, group="CaQueueG"))
    assert online["subscriptionData"]["topic"] == "CaQueue"
    assert len(online["queueData"]) == 1

    past = _queue(broker, "CaQueue", 0, 10, 5)
    assert past.code == ResponseCode.SUCCESS
    assert past.remark == "Index 10 of 0@CaQueue is not exist!"
    assert json_body(past)["queueData"] == []


def test_consume_queue_requests_out_of_range_are_refused(broker: RunningBroker) -> None:
    _topic(broker, "CaQueueR", queues=2)
    queue = _queue(broker, "CaQueueR", 2, 0, 1)
    assert queue.code == ResponseCode.INVALID_PARAMETER
    assert queue.remark == "queueId 2 is out of range 0..1"
    count = _queue(broker, "CaQueueR", 0, 0, 10_001)
    assert count.code == ResponseCode.INVALID_PARAMETER
    assert count.remark == "count 10001 is out of range 1..10000"
    unknown = _queue(broker, "CaQueueNone", 0, 0, 1)
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    assert unknown.remark == "topic[CaQueueNone] not exist"
