"""ClientProcessor and ConsumerInfoProcessor called directly on a real broker: heartbeats
register producers and consumers (and a consumer group's retry topic), members are listed and
told of changes, leave by unregistering or by their connection closing; admin tools' views of
a group's connections and a client's running info (forwarded to the client itself)."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest
from processor_support import Peer, RunningBroker, heartbeat, json_body, running_broker

from orbitmq.protocol.bodies import (
    CheckClientRequestBody,
    ConsumerListBody,
    MessageModel,
    SubscriptionData,
)
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    GetConsumerConnectionListRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    UnregisterClientRequestHeader,
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from running_broker(tmp_path_factory.mktemp("clients"), auto_create_topic=False)


def _beat(broker: RunningBroker, peer: Peer, cmd: RemotingCommand) -> None:
    resp = broker.answer(broker.processors.clients.heart_beat, cmd, peer)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def _members(broker: RunningBroker, group: str) -> RemotingCommand:
    return broker.answer(broker.processors.clients.get_consumer_list_by_group,
                         RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                 GetConsumerListByGroupRequestHeader(group)
                                                 .to_ext_fields()))


def _ids(resp: RemotingCommand) -> list[str]:
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return sorted(ConsumerListBody.from_json(bytes(resp.body)).consumer_id_list)


def _notified(peer: Peer) -> list[str]:
    return [c.ext_fields["consumerGroup"] for c in peer.oneway
            if c.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]


# -- ClientProcessor ------------------------------------------------------------------------------
def test_a_heartbeat_registers_consumers_and_producers_and_the_retry_topic(
        broker: RunningBroker) -> None:
    peer = Peer()
    _beat(broker, peer, heartbeat("cli-1", consumers={"CliG": ["CliT"]}, producers=["CliPG"]))
    assert _ids(_members(broker, "CliG")) == ["cli-1"]
    clients = broker.controller.clients
    assert broker.run(lambda: clients.subscription("CliG", "CliT")) is not None
    assert broker.run(lambda: [i.client_id for i in clients.producers["CliPG"].values()]) \
        == ["cli-1"]
    retry = broker.run(lambda: broker.controller.topics.get("%RETRY%CliG"))
    assert retry is not None and (retry.read_queue_nums, retry.write_queue_nums) == (1, 1)
    assert broker.run(lambda: broker.controller.sub_groups.table.get("CliG")) is not None


def test_members_are_told_when_another_joins_or_leaves(broker: RunningBroker) -> None:
    first, second = Peer(), Peer()
    _beat(broker, first, heartbeat("cli-a", consumers={"CliJoin": ["CliT"]}))
    _beat(broker, first, heartbeat("cli-a", consumers={"CliJoin": ["CliT"]}))  # no change
    assert _notified(first) == ["CliJoin"]  # its own arrival only
    _beat(broker, second, heartbeat("cli-b", consumers={"CliJoin": ["CliT"]}))
    assert _ids(_members(broker, "CliJoin")) == ["cli-a", "cli-b"]
    assert _notified(first) == ["CliJoin", "CliJoin"]

    header = UnregisterClientRequestHeader("cli-b", consumer_group="CliJoin")
    resp = broker.answer(broker.processors.clients.unregister_client,
                         RemotingCommand.request(RequestCode.UNREGISTER_CLIENT,
                                                 header.to_ext_fields()), second)
    assert resp.code == ResponseCode.SUCCESS
    assert _ids(_members(broker, "CliJoin")) == ["cli-a"]
    assert _notified(first) == ["CliJoin"] * 3


def test_a_closed_connection_leaves_its_groups(broker: RunningBroker) -> None:
    staying, closing = Peer(), Peer()
    _beat(broker, staying, heartbeat("cli-stay", consumers={"CliClose": ["CliT"]}))
    _beat(broker, closing, heartbeat("cli-close", consumers={"CliClose": ["CliT"]},
                                     producers=["CliClosePG"]))
    broker.run(lambda: broker.processors.clients.connection_closed(closing))  # type: ignore[arg-type]
    assert _ids(_members(broker, "CliClose")) == ["cli-stay"]
    assert broker.run(lambda: broker.controller.clients.producers.get("CliClosePG")) is None
    assert _notified(staying)[-1] == "CliClose"


def test_a_heartbeat_without_a_body_and_a_group_without_members_are_refused(
        broker: RunningBroker) -> None:
    empty = broker.answer(broker.processors.clients.heart_beat,
                          RemotingCommand.request(RequestCode.HEART_BEAT))
    assert (empty.code, empty.remark) == (ResponseCode.SYSTEM_ERROR, "heartbeat without a body")
    nobody = _members(broker, "CliNobody")
    assert nobody.code == ResponseCode.SYSTEM_ERROR
    assert nobody.remark == "no consumer for this group, CliNobody"


def _check(broker: RunningBroker, body: bytes) -> RemotingCommand:
    return broker.answer(broker.processors.clients.check_client_config,
                         RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, body=body))


def test_check_client_config_answers_as_a_pull_with_that_subscription_would(
        broker: RunningBroker) -> None:
    def body(expression: str, kind: str) -> bytes:
        return CheckClientRequestBody("cli-c", "CliCheck", SubscriptionData(
            "CliT", sub_string=expression, expression_type=kind)).to_json()

    assert _check(broker, body("a || b", "TAG")).code == ResponseCode.SUCCESS
    sql = _check(broker, body("a > 1", "SQL92"))  # enable_property_filter is off
    assert sql.code == ResponseCode.FILTER_NOT_SUPPORTED
    assert sql.remark is not None and "enable_property_filter" in sql.remark
    missing = _check(broker, orjson.dumps({"clientId": "cli-c", "group": "CliCheck"}))
    assert missing.code == ResponseCode.INVALID_PARAMETER
    assert missing.remark == "CHECK_CLIENT_CONFIG without subscriptionData"
    empty = _check(broker, b"")
    assert empty.code == ResponseCode.INVALID_PARAMETER
    assert empty.remark == "CHECK_CLIENT_CONFIG without a body"


# -- ConsumerInfoProcessor ------------------------------------------------------------------------
def _connections(broker: RunningBroker, group: str) -> RemotingCommand:
    return broker.answer(broker.processors.consumer_info.get_consumer_connection_list,
                         RemotingCommand.request(RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                                 GetConsumerConnectionListRequestHeader(group)
                                                 .to_ext_fields()))


def test_the_connection_list_of_an_online_group(broker: RunningBroker) -> None:
    peer = Peer()
    _beat(broker, peer, heartbeat("cli-info", consumers={"CliInfo": ["CliT", "CliT2"]},
                                  model=MessageModel.BROADCASTING))
    resp = _connections(broker, "CliInfo")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    body = json_body(resp)
    assert body["connectionSet"] == [{"clientId": "cli-info", "clientAddr": peer.peer,
                                      "language": "PYTHON", "version": 0}]
    assert sorted(body["subscriptionTable"]) == ["CliT", "CliT2"]
    assert body["subscriptionTable"]["CliT"]["subString"] == "*"
    assert body["messageModel"] == "BROADCASTING"


def test_the_connection_list_of_an_offline_group_is_consumer_not_online(
        broker: RunningBroker) -> None:
    resp = _connections(broker, "CliOffline")
    assert resp.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert resp.remark == "the consumer group[CliOffline] not online"
    # A group whose last member left is offline again.
    peer = Peer()
    _beat(broker, peer, heartbeat("cli-gone", consumers={"CliOffline": ["CliT"]}))
    assert _connections(broker, "CliOffline").code == ResponseCode.SUCCESS
    broker.run(lambda: broker.processors.clients.connection_closed(peer))  # type: ignore[arg-type]
    assert _connections(broker, "CliOffline").code == ResponseCode.CONSUMER_NOT_ONLINE


def _running_info(broker: RunningBroker, group: str, client: str) -> RemotingCommand:
    header = GetConsumerRunningInfoRequestHeader(group, client)
    return broker.answer(broker.processors.consumer_info.get_consumer_running_info,
                         RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO,
                                                 header.to_ext_fields()))


def test_running_info_is_the_client_s_own_answer(broker: RunningBroker) -> None:
    info = orjson.dumps({"properties": {"x": "1"}, "mqTable": {}})
    peer = Peer(replies=lambda cmd: cmd.response(ResponseCode.SUCCESS, "from the client",
                                                 body=info))
    _beat(broker, peer, heartbeat("cli-run", consumers={"CliRun": ["CliT"]}))
    resp = _running_info(broker, "CliRun", "cli-run")
    assert (resp.code, resp.remark, bytes(resp.body)) == (ResponseCode.SUCCESS, "from the client",
                                                         info)
    [forwarded] = peer.invoked
    assert forwarded.code == RequestCode.GET_CONSUMER_RUNNING_INFO
    assert forwarded.ext_fields["clientId"] == "cli-run"
    assert forwarded.ext_fields["consumerGroup"] == "CliRun"


def test_running_info_of_a_client_not_here_or_silent(broker: RunningBroker) -> None:
    absent = _running_info(broker, "CliRunNone", "cli-x")
    assert absent.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert absent.remark == "the consumer <cli-x> of group <CliRunNone> is not online"
    closed = Peer(replies=lambda cmd: cmd.response(ResponseCode.SUCCESS))
    _beat(broker, closed, heartbeat("cli-closed", consumers={"CliRunClosed": ["CliT"]}))
    closed.is_open = False
    assert _running_info(broker, "CliRunClosed", "cli-closed").code \
        == ResponseCode.CONSUMER_NOT_ONLINE
    assert not closed.invoked

    silent = Peer()  # never answers: the invoke times out
    _beat(broker, silent, heartbeat("cli-silent", consumers={"CliRunSilent": ["CliT"]}))
    resp = _running_info(broker, "CliRunSilent", "cli-silent")
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark is not None and resp.remark.startswith(
        "the consumer <cli-silent> did not answer: ")
