"""OffsetProcessor and LockProcessor called directly on a real broker: consumer offsets
committed and queried (a new group from 0, QUERY_NOT_FOUND once the queue's head is gone);
orderly queue locks held by one client at a time, given back by unlock or by leaving."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from processor_support import Peer, RunningBroker, heartbeat, running_broker, send_request

from orbitmq.protocol.bodies import (
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageModel,
    MessageQueue,
    TopicConfig,
    UnlockBatchRequestBody,
)
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    QueryConsumerOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from orbitmq.protocol.msgid import decode_offset_msg_id


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from running_broker(tmp_path_factory.mktemp("offsets"), auto_create_topic=False)


# -- offsets ------------------------------------------------------------------------------------
def _commit(broker: RunningBroker, group: str, topic: str, queue_id: int,
            offset: int) -> RemotingCommand:
    header = UpdateConsumerOffsetRequestHeader(group, topic, queue_id, offset)
    return broker.answer(broker.processors.offsets.update_consumer_offset,
                         RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET,
                                                 header.to_ext_fields()))


def _query(broker: RunningBroker, group: str, topic: str, queue_id: int) -> RemotingCommand:
    header = QueryConsumerOffsetRequestHeader(group, topic, queue_id)
    return broker.answer(broker.processors.offsets.query_consumer_offset,
                         RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET,
                                                 header.to_ext_fields()))


def test_a_committed_offset_is_what_a_query_answers(broker: RunningBroker) -> None:
    assert _commit(broker, "OffG", "OffT", 3, 42).code == ResponseCode.SUCCESS
    resp = _query(broker, "OffG", "OffT", 3)
    assert (resp.code, resp.ext_fields["offset"]) == (ResponseCode.SUCCESS, "42")
    assert _commit(broker, "OffG", "OffT", 3, 50).code == ResponseCode.SUCCESS
    assert _query(broker, "OffG", "OffT", 3).ext_fields["offset"] == "50"
    # Another queue, another group: their own.
    assert _query(broker, "OffOther", "OffT", 3).ext_fields["offset"] == "0"
    assert broker.run(lambda: broker.controller.offsets.query("OffG", "OffT", 3)) == 50


@pytest.mark.parametrize(("group", "topic"), [("bad group", "OffT"), ("OffG", "bad/topic")])
def test_an_offset_for_an_illegal_group_or_topic_is_not_committed(
        broker: RunningBroker, group: str, topic: str) -> None:
    resp = _commit(broker, group, topic, 0, 5)
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert resp.remark is not None and resp.remark.startswith("offset not committed: ")
    assert broker.run(lambda: broker.controller.offsets.query(group, topic, 0)) < 0


def test_without_a_commit_a_new_group_starts_at_0_until_the_queue_s_head_is_gone(
        broker: RunningBroker) -> None:
    broker.run(lambda: broker.controller.topics.update(TopicConfig("OffHead", 1, 1)))
    sent = [broker.answer(broker.processors.send.send_message, send_request("OffHead"))
            for _ in range(2)]
    broker.settle()
    resp = _query(broker, "OffNew", "OffHead", 0)
    assert (resp.code, resp.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")

    # Retention takes the first message away (the store's own correction of the queue's head).
    second = decode_offset_msg_id(sent[1].ext_fields["msgId"])[2]
    cq = broker.controller.store.consume_queue_table[("OffHead", 0)]
    broker.run(lambda: cq.correct_min_offset(second))
    assert broker.run(lambda: broker.controller.store.get_min_offset_in_queue("OffHead", 0)) == 1
    gone = _query(broker, "OffNew", "OffHead", 0)
    assert gone.code == ResponseCode.QUERY_NOT_FOUND
    assert gone.remark == "no committed offset for group OffNew in OffHead:0"
    # A committed offset is answered whatever the queue's head.
    assert _commit(broker, "OffNew", "OffHead", 0, 1).code == ResponseCode.SUCCESS
    assert _query(broker, "OffNew", "OffHead", 0).ext_fields["offset"] == "1"


# -- locks --------------------------------------------------------------------------------------
def _mqs(topic: str, *queue_ids: int) -> list[MessageQueue]:
    return [MessageQueue(topic, "broker-a", q) for q in queue_ids]


def _lock(broker: RunningBroker, group: str, client: str,
          mqs: list[MessageQueue]) -> list[MessageQueue]:
    resp = broker.answer(broker.processors.locks.lock_batch_mq, RemotingCommand.request(
        RequestCode.LOCK_BATCH_MQ, body=LockBatchRequestBody(group, client, mqs).to_json()))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return LockBatchResponseBody.from_json(bytes(resp.body)).lock_ok_mq_set


def _unlock(broker: RunningBroker, group: str, client: str, mqs: list[MessageQueue]) -> None:
    resp = broker.answer(broker.processors.locks.unlock_batch_mq, RemotingCommand.request(
        RequestCode.UNLOCK_BATCH_MQ, body=UnlockBatchRequestBody(group, client, mqs).to_json()))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def test_a_locked_queue_is_excluded_for_another_client_until_unlocked(
        broker: RunningBroker) -> None:
    assert _lock(broker, "LockG", "client-a", _mqs("LockT", 0, 1)) == _mqs("LockT", 0, 1)
    assert _lock(broker, "LockG", "client-b", _mqs("LockT", 0, 1, 2)) == _mqs("LockT", 2)
    assert _lock(broker, "LockG", "client-a", _mqs("LockT", 0, 1)) == _mqs("LockT", 0, 1)  # renewed
    # Another group's locks are its own.
    assert _lock(broker, "LockOther", "client-b", _mqs("LockT", 0)) == _mqs("LockT", 0)

    _unlock(broker, "LockG", "client-b", _mqs("LockT", 0))  # not b's: nothing happens
    assert _lock(broker, "LockG", "client-b", _mqs("LockT", 0)) == []
    _unlock(broker, "LockG", "client-a", _mqs("LockT", 0))
    assert _lock(broker, "LockG", "client-b", _mqs("LockT", 0, 1)) == _mqs("LockT", 0)
    assert broker.run(lambda: broker.controller.locks.owner("LockG", _mqs("LockT", 1)[0])) \
        == "client-a"


def test_a_broadcasting_group_s_locks_are_not_exclusive(broker: RunningBroker) -> None:
    peer = Peer()
    hb = heartbeat("client-bc", consumers={"LockBroadcast": ["LockT"]},
                   model=MessageModel.BROADCASTING)
    assert broker.answer(broker.processors.clients.heart_beat, hb, peer).code == 0
    assert _lock(broker, "LockBroadcast", "client-x", _mqs("LockT", 0)) == _mqs("LockT", 0)
    assert _lock(broker, "LockBroadcast", "client-y", _mqs("LockT", 0)) == _mqs("LockT", 0)


def test_a_client_that_leaves_its_group_gives_up_its_locks(broker: RunningBroker) -> None:
    leaving = Peer()
    hb = heartbeat("client-leaving", consumers={"LockLeave": ["LockT"]})
    assert broker.answer(broker.processors.clients.heart_beat, hb, leaving).code == 0
    assert _lock(broker, "LockLeave", "client-leaving", _mqs("LockT", 0)) == _mqs("LockT", 0)
    assert _lock(broker, "LockLeave", "client-other", _mqs("LockT", 0)) == []

    # UNREGISTER_CLIENT as handlers.py registers it: the locks go with the member.
    unregister = broker.processors.locks.releasing(broker.processors.clients.unregister_client)
    header = UnregisterClientRequestHeader("client-leaving", consumer_group="LockLeave")
    resp = broker.answer(unregister, RemotingCommand.request(RequestCode.UNREGISTER_CLIENT,
                                                             header.to_ext_fields()), leaving)
    assert resp.code == ResponseCode.SUCCESS
    assert _lock(broker, "LockLeave", "client-other", _mqs("LockT", 0)) == _mqs("LockT", 0)


@pytest.mark.parametrize("handler", ["lock_batch_mq", "unlock_batch_mq"])
def test_lock_requests_without_a_body_group_or_client_are_refused(broker: RunningBroker,
                                                                  handler: str) -> None:
    run = getattr(broker.processors.locks, handler)
    code = RequestCode.LOCK_BATCH_MQ if handler == "lock_batch_mq" else RequestCode.UNLOCK_BATCH_MQ
    empty = broker.answer(run, RemotingCommand.request(code))
    assert empty.code == ResponseCode.SYSTEM_ERROR
    assert empty.remark == f"{code.name} without a body"
    nobody = broker.answer(run, RemotingCommand.request(
        code, body=LockBatchRequestBody("LockG", "", _mqs("LockT", 5)).to_json()))
    assert nobody.code == ResponseCode.SYSTEM_ERROR
    assert nobody.remark == "consumerGroup and clientId are required"
    too_many = broker.answer(run, RemotingCommand.request(
        code, body=LockBatchRequestBody("LockG", "c", _mqs("LockT", *range(4097))).to_json()))
    assert too_many.code == ResponseCode.SYSTEM_ERROR
    assert too_many.remark == "4097 queues in one request, at most 4096"
    assert broker.run(lambda: broker.controller.locks.owner("LockG", _mqs("LockT", 5)[0])) is None
