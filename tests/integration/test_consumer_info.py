"""GET_CONSUMER_CONNECTION_LIST (203) and GET_CONSUMER_RUNNING_INFO (307) on a real broker.

The consumer is a plain RemotingClient that heartbeats into a group and answers 307 itself, so
the test sees exactly what the broker forwards and what it passes back.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from test_broker_support import BrokerHarness, broker_config

from orbitmq.client.admin.groups import running_info_queues
from orbitmq.protocol.bodies import ConsumerData, HeartbeatData, MessageModel, SubscriptionData
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import GetConsumerRunningInfoRequestHeader
from orbitmq.transport import RemotingClient
from orbitmq.transport.connection import RemotingConnection

GROUP = "info-group"
CLIENT_ID = "127.0.0.1@4242#info"
RUNNING_INFO = {
    "properties": {"consumerGroup": GROUP, "clientId": CLIENT_ID},
    "mqTable": [{"messageQueue": {"topic": "InfoTopic", "brokerName": "broker-a", "queueId": 1},
                 "processQueueInfo": {"commitOffset": 7}}],
}


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[BrokerHarness]:
    h = BrokerHarness(broker_config(tmp_path))
    try:
        yield h
    finally:
        h.close()


def join(h: BrokerHarness, client: RemotingClient, client_id: str = CLIENT_ID) -> None:
    data = ConsumerData(GROUP, message_model=MessageModel.CLUSTERING,
                        subscription_data_set=[SubscriptionData("InfoTopic", "a || b")])
    r = h.invoke(RequestCode.HEART_BEAT, body=HeartbeatData(client_id, [], [data]).to_json(),
                 client=client)
    assert r.code == ResponseCode.SUCCESS


def running_info_request(client_id: str = CLIENT_ID) -> dict[str, str]:
    return GetConsumerRunningInfoRequestHeader(GROUP, client_id, False).to_ext_fields()


def test_consumer_connection_list(harness: BrokerHarness) -> None:
    h = harness
    fields = {"consumerGroup": GROUP}
    r = h.invoke(RequestCode.GET_CONSUMER_CONNECTION_LIST, fields)
    assert r.code == ResponseCode.CONSUMER_NOT_ONLINE
    consumer = RemotingClient()
    try:
        join(h, consumer)
        r = h.invoke(RequestCode.GET_CONSUMER_CONNECTION_LIST, fields)
        assert r.code == ResponseCode.SUCCESS
        body = json.loads(r.body)
        [conn] = body["connectionSet"]
        assert conn["clientId"] == CLIENT_ID and conn["language"] == "PYTHON"
        assert conn["clientAddr"].startswith("127.0.0.1:")
        assert body["subscriptionTable"]["InfoTopic"]["subString"] == "a || b"
        assert body["messageModel"] == "CLUSTERING" and body["consumeType"] == "CONSUME_PASSIVELY"
    finally:
        h.call(consumer.close())


def test_running_info_is_forwarded_to_the_client_and_back(harness: BrokerHarness) -> None:
    h = harness
    asked: list[RemotingCommand] = []

    def answer(cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        asked.append(cmd)
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(RUNNING_INFO))

    consumer = RemotingClient()
    consumer.register(RequestCode.GET_CONSUMER_RUNNING_INFO, answer)
    try:
        join(h, consumer)
        r = h.invoke(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info_request())
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert json.loads(r.body) == RUNNING_INFO
        assert asked[0].ext_fields["clientId"] == CLIENT_ID
        assert asked[0].ext_fields["consumerGroup"] == GROUP
        assert [mq.queue_id for mq in running_info_queues(r.body)] == [1]

        r = h.invoke(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info_request("someone-else"))
        assert r.code == ResponseCode.CONSUMER_NOT_ONLINE and "someone-else" in (r.remark or "")
    finally:
        h.call(consumer.close())


def test_running_info_of_a_silent_client_is_a_system_error(harness: BrokerHarness) -> None:
    h = harness
    never: list[asyncio.Future[RemotingCommand]] = []

    async def hang(cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        never.append(fut)
        return await fut

    consumer = RemotingClient()
    consumer.register(RequestCode.GET_CONSUMER_RUNNING_INFO, hang)
    try:
        join(h, consumer)
        r = h.invoke(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info_request(), timeout=10.0)
        assert r.code == ResponseCode.SYSTEM_ERROR and "did not answer" in (r.remark or "")
    finally:
        h.on_loop(lambda: [f.cancel() for f in never])
        h.call(consumer.close())
