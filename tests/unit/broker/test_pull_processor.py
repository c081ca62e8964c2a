"""PullProcessor called directly on a real broker: what a pull reads (filtered by tags), where
the next pull starts, offsets committed with a pull, empty pulls held until a message comes
(or their time is up), and each refusal's code and remark."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
from processor_support import (
    Peer,
    RunningBroker,
    running_broker,
    send_request,
    stored_messages,
)

from orbitmq.broker.tables.subscription_group_manager import SubscriptionGroupConfig
from orbitmq.protocol.bodies import ConsumerData, HeartbeatData, SubscriptionData, TopicConfig
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import PullMessageRequestHeader, PullSysFlag

TOPIC = "PullT"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from running_broker(tmp_path_factory.mktemp("pull"), auto_create_topic=False)


def _topic(broker: RunningBroker, name: str, queues: int = 1, perm: int = 6) -> None:
    broker.run(functools.partial(broker.controller.topics.update,
                                 TopicConfig(name, queues, queues, perm)))


def _send(broker: RunningBroker, topic: str, *tags: str) -> None:
    """Messages with these tags, dispatched: the tests pull from offsets the sends answered
    (a consumer's offsets come from its pulls, which never run ahead of the dispatch)."""
    for tag in tags:
        resp = broker.answer(broker.processors.send.send_message,
                             send_request(topic, tag.encode(), properties={"TAGS": tag}))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    broker.settle()


def _pull_cmd(topic: str, offset: int, *, group: str = "PullG", queue_id: int = 0,
              max_msgs: int = 32, subscription: str | None = None,
              expression_type: str | None = None, commit_offset: int = -1,
              suspend_ms: int = 0) -> RemotingCommand:
    flag = 0
    if subscription is not None:
        flag |= PullSysFlag.SUBSCRIPTION
    if commit_offset >= 0:
        flag |= PullSysFlag.COMMIT_OFFSET
    if suspend_ms:
        flag |= PullSysFlag.SUSPEND
    header = PullMessageRequestHeader(group, topic, queue_id, offset, max_msgs, int(flag),
                                      commit_offset, suspend_ms, subscription,
                                      expression_type=expression_type)
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext_fields())


def _pull(broker: RunningBroker, topic: str, offset: int, peer: Peer | None = None,
          **kwargs: object) -> RemotingCommand:
    return broker.answer(broker.processors.pull.pull_message,
                         _pull_cmd(topic, offset, **kwargs), peer)  # type: ignore[arg-type]


def test_a_pull_reads_the_stored_messages_and_says_where_to_go_on(broker: RunningBroker) -> None:
    _topic(broker, TOPIC)
    _send(broker, TOPIC, "a", "b", "a")
    resp = _pull(broker, TOPIC, 0)
    assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, None)
    msgs = stored_messages(resp.body)
    assert [bytes(m.body) for m in msgs] == [b"a", b"b", b"a"]
    assert [m.queue_offset for m in msgs] == [0, 1, 2]
    assert (resp.ext_fields["nextBeginOffset"], resp.ext_fields["minOffset"],
            resp.ext_fields["maxOffset"]) == ("3", "0", "3")
    assert resp.ext_fields["suggestWhichBrokerId"] == "0"
    part = _pull(broker, TOPIC, 1, max_msgs=1)
    assert [bytes(m.body) for m in stored_messages(part.body)] == [b"b"]
    assert part.ext_fields["nextBeginOffset"] == "2"


def test_a_tag_subscription_filters_what_is_read(broker: RunningBroker) -> None:
    _topic(broker, "PullTags")
    _send(broker, "PullTags", "x", "y", "x", "z")
    resp = _pull(broker, "PullTags", 0, subscription="x || z")
    assert resp.code == ResponseCode.SUCCESS
    assert [bytes(m.body) for m in stored_messages(resp.body)] == [b"x", b"x", b"z"]
    assert resp.ext_fields["nextBeginOffset"] == "4"
    # The group's subscription from its heartbeat when the request carries none.
    beat = HeartbeatData("pull-c", [], [ConsumerData("PullTagG", subscription_data_set=[
        SubscriptionData("PullTags", sub_string="y")])])
    assert broker.answer(broker.processors.clients.heart_beat, RemotingCommand.request(
        RequestCode.HEART_BEAT, body=beat.to_json()), Peer()).code == ResponseCode.SUCCESS
    by_group = _pull(broker, "PullTags", 0, group="PullTagG")
    assert [bytes(m.body) for m in stored_messages(by_group.body)] == [b"y"]


def test_at_the_end_not_found_and_past_it_offset_moved(broker: RunningBroker) -> None:
    _topic(broker, "PullEnd")
    _send(broker, "PullEnd", "a", "b")
    end = _pull(broker, "PullEnd", 2)
    assert end.code == ResponseCode.PULL_NOT_FOUND
    assert end.ext_fields["nextBeginOffset"] == "2" and not end.body
    # Far past it: moved to the queue's first offset while that is 0 (RocketMQ's
    # OFFSET_OVERFLOW_BADLY rule), with the queue's bounds.
    past = _pull(broker, "PullEnd", 9)
    assert past.code == ResponseCode.PULL_OFFSET_MOVED
    assert (past.ext_fields["nextBeginOffset"], past.ext_fields["maxOffset"]) == ("0", "2")


def test_a_pull_commits_the_consumer_s_offset(broker: RunningBroker) -> None:
    _topic(broker, "PullCommit")
    _send(broker, "PullCommit", "a", "b")
    assert _pull(broker, "PullCommit", 1, group="PullCommitG", commit_offset=1).code == 0
    assert broker.run(lambda: broker.controller.offsets.query("PullCommitG", "PullCommit", 0)) == 1


def test_an_empty_pull_is_held_until_a_message_comes(broker: RunningBroker) -> None:
    _topic(broker, "PullHeld")
    peer = Peer()
    held = broker.answer_later(broker.processors.pull.pull_message,
                               _pull_cmd("PullHeld", 0, suspend_ms=10_000), peer)
    broker.run(lambda: None)  # the pull is in the long-poll table now
    assert not held.done() and not peer.sent
    _send(broker, "PullHeld", "late")
    resp = held.result(10)
    assert resp.code == ResponseCode.SUCCESS
    assert [bytes(m.body) for m in stored_messages(resp.body)] == [b"late"]


def test_a_held_pull_ends_not_found_when_its_time_is_up(broker: RunningBroker) -> None:
    _topic(broker, "PullTimeout")
    resp = broker.answer(broker.processors.pull.pull_message,
                         _pull_cmd("PullTimeout", 0, suspend_ms=100), Peer())
    assert resp.code == ResponseCode.PULL_NOT_FOUND
    assert resp.ext_fields["nextBeginOffset"] == "0"


def test_pull_refusals(broker: RunningBroker) -> None:
    _topic(broker, "PullRefuse", queues=2)
    unknown = _pull(broker, "PullNone", 0)
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    assert unknown.remark == "topic[PullNone] not exist, apply first please!"

    peer = Peer()
    queue = _pull(broker, "PullRefuse", 0, peer, queue_id=2)
    assert queue.code == ResponseCode.SYSTEM_ERROR
    assert queue.remark == (f"queueId[2] is illegal, topic:[PullRefuse] readQueueNums:[2] "
                            f"consumer:[{peer.peer}]")

    _topic(broker, "PullWriteOnly", perm=2)
    write_only = _pull(broker, "PullWriteOnly", 0)
    assert write_only.code == ResponseCode.NO_PERMISSION
    assert write_only.remark == "the topic[PullWriteOnly] pulling message is forbidden"

    broker.run(functools.partial(broker.controller.sub_groups.update,
                                 SubscriptionGroupConfig("PullOff", consume_enable=False)))
    off = _pull(broker, "PullRefuse", 0, group="PullOff")
    assert off.code == ResponseCode.NO_PERMISSION
    assert off.remark == "subscription group [PullOff] has consumption disabled"

    sql = _pull(broker, "PullRefuse", 0, subscription="a > 1", expression_type="SQL92")
    assert sql.code == ResponseCode.FILTER_NOT_SUPPORTED
    assert sql.remark is not None and "enable_property_filter" in sql.remark
