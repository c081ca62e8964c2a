"""QueryProcessor called directly on a real broker: queue offsets, a search by store time, the
earliest store time, a message viewed by its commit log offset and messages found by key;
what is not there answers QUERY_NOT_FOUND."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator

import pytest
from processor_support import (
    Handler,
    RunningBroker,
    running_broker,
    send_request,
    stored_messages,
)

from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    Header,
    QueryMessageRequestHeader,
    SearchOffsetByTimestampRequestHeader,
    ViewMessageRequestHeader,
)
from orbitmq.protocol.message import MessageExt
from orbitmq.protocol.msgid import decode_offset_msg_id
from orbitmq.protocol.stored import decode_stored_message

TOPIC = "QueryT"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from running_broker(tmp_path_factory.mktemp("query"), auto_create_topic=False)


@pytest.fixture(scope="module")
def sent(broker: RunningBroker) -> list[MessageExt]:
    """Three messages in queue 1 of TOPIC, stored a few ms apart, then dispatched."""
    broker.run(lambda: broker.controller.topics.update(TopicConfig(TOPIC, 2, 2)))
    stored = []
    for i in range(3):
        resp = broker.answer(broker.processors.send.send_message,
                             send_request(TOPIC, f"q{i}".encode(), queue_id=1,
                                          properties={"KEYS": f"key{i} shared"}))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        offset = decode_offset_msg_id(resp.ext_fields["msgId"])[2]
        msg = broker.run(functools.partial(broker.controller.store.look_message_by_offset,
                                           offset))
        assert msg is not None
        stored.append(msg)
        time.sleep(0.005)
    broker.settle()
    return stored


def _offset(broker: RunningBroker, code: RequestCode, header: Header, handler: Handler) -> int:
    resp = broker.answer(handler, RemotingCommand.request(code, header.to_ext_fields()))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return int(resp.ext_fields["offset"])


def test_max_and_min_offsets_of_a_queue(broker: RunningBroker, sent: list[MessageExt]) -> None:
    q = broker.processors.query
    assert _offset(broker, RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader(TOPIC, 1),
                   q.get_max_offset) == 3
    assert _offset(broker, RequestCode.GET_MIN_OFFSET, GetMinOffsetRequestHeader(TOPIC, 1),
                   q.get_min_offset) == 0
    # The other queue and an unknown topic have nothing.
    assert _offset(broker, RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader(TOPIC, 0),
                   q.get_max_offset) == 0
    assert _offset(broker, RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader("QueryNone", 0),
                   q.get_max_offset) == 0


def test_a_search_by_store_time_finds_the_first_message_stored_at_or_after_it(
        broker: RunningBroker, sent: list[MessageExt]) -> None:
    def search(ts: int) -> int:
        return _offset(broker, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                       SearchOffsetByTimestampRequestHeader(TOPIC, 1, ts),
                       broker.processors.query.search_offset_by_timestamp)

    assert sent[0].store_timestamp < sent[1].store_timestamp < sent[2].store_timestamp
    assert search(sent[0].store_timestamp - 1000) == 0
    assert search(sent[1].store_timestamp) == 1
    assert search(sent[2].store_timestamp) == 2
    assert search(sent[2].store_timestamp + 60_000) == 3  # after the last: the max offset


def test_the_earliest_store_time_is_the_first_message_s(broker: RunningBroker,
                                                         sent: list[MessageExt]) -> None:
    cmd = RemotingCommand.request(RequestCode.GET_EARLIEST_MSG_STORETIME,
                                  GetEarliestMsgStoretimeRequestHeader(TOPIC, 1).to_ext_fields())
    resp = broker.answer(broker.processors.query.get_earliest_msg_storetime, cmd)
    assert resp.code == ResponseCode.SUCCESS
    assert int(resp.ext_fields["timestamp"]) == sent[0].store_timestamp


@pytest.mark.parametrize("which", [0, 1])
def test_a_message_viewed_by_its_commit_log_offset_is_its_stored_bytes(
        broker: RunningBroker, sent: list[MessageExt], which: int) -> None:
    cmd = RemotingCommand.request(
        RequestCode.VIEW_MESSAGE_BY_ID,
        ViewMessageRequestHeader(sent[which].commit_log_offset).to_ext_fields())
    resp = broker.answer(broker.processors.query.view_message_by_id, cmd)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    msg = decode_stored_message(bytes(resp.body))
    assert (msg.topic, bytes(msg.body), msg.queue_offset) == (TOPIC, f"q{which}".encode(), which)
    assert len(resp.body) == sent[which].store_size


@pytest.mark.parametrize("where", ["inside", "past_end"])
def test_an_offset_where_no_message_starts_is_query_not_found(
        broker: RunningBroker, sent: list[MessageExt], where: str) -> None:
    offset = (sent[1].commit_log_offset + 3 if where == "inside"
              else broker.run(broker.controller.store.max_physical_offset) + 1024)
    cmd = RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID,
                                  ViewMessageRequestHeader(offset).to_ext_fields())
    resp = broker.answer(broker.processors.query.view_message_by_id, cmd)
    assert resp.code == ResponseCode.QUERY_NOT_FOUND
    assert resp.remark == (f"can not find message by the offset, {offset}: no message "
                           "starts there")
    assert not resp.body


def _query(broker: RunningBroker, key: str, max_num: int = 32) -> RemotingCommand:
    now = int(time.time() * 1000)
    header = QueryMessageRequestHeader(TOPIC, key, max_num, now - 3_600_000, now + 3_600_000)
    return broker.answer(broker.processors.query.query_message,
                         RemotingCommand.request(RequestCode.QUERY_MESSAGE, header.to_ext_fields()))


def _bodies(raw: bytes) -> list[bytes]:
    return [bytes(m.body) for m in stored_messages(raw)]


def test_messages_found_by_key_are_written_to_the_peer(broker: RunningBroker,
                                                       sent: list[MessageExt]) -> None:
    one = _query(broker, "key2")
    assert one.code == ResponseCode.SUCCESS, one.remark
    assert _bodies(bytes(one.body)) == [b"q2"]
    assert int(one.ext_fields["indexLastUpdatePhyoffset"]) > 0
    every = _query(broker, "shared")
    assert sorted(_bodies(bytes(every.body))) == [b"q0", b"q1", b"q2"]
    assert len(_bodies(bytes(_query(broker, "shared", max_num=2).body))) == 2


def test_a_key_nobody_sent_is_query_not_found(broker: RunningBroker,
                                              sent: list[MessageExt]) -> None:
    resp = _query(broker, "nobody")
    assert resp.code == ResponseCode.QUERY_NOT_FOUND
    assert resp.remark == "can not find message, maybe time range not correct"
    assert "indexLastUpdateTimestamp" in resp.ext_fields
