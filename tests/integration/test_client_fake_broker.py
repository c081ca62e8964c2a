"""The SDK against a real name server and scripted brokers (real sockets on 127.0.0.1).

A scripted broker is a RemotingServer whose answers the test chooses, registered with the name
server like a real broker. It lets these tests force what a real broker rarely does on cue
(refuse with a retriable code, never answer, ask the client something) and check the producer's
retry policy, name server failover, heartbeats and server-initiated requests exactly.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from orbitmq.client import AsyncAdmin, AsyncProducer, Producer, SendStatus, select_by_hash
from orbitmq.config import NamesrvConfig
from orbitmq.errors import BrokerError, ClientError, TimeoutError
from orbitmq.namesrv import NameServer
from orbitmq.protocol.bodies import (
    HeartbeatData,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    RegisterBrokerRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
)
from orbitmq.protocol.message import Message
from orbitmq.protocol.properties import parse_properties
from orbitmq.transport.client import RemotingClient
from orbitmq.transport.connection import RemotingConnection
from orbitmq.transport.loop import run
from orbitmq.transport.server import RemotingServer

TOPIC = "FakeTopic"
Reply = Callable[[RemotingCommand, SendMessageRequestHeader], RemotingCommand | None]


def ok_reply(cmd: RemotingCommand, header: SendMessageRequestHeader) -> RemotingCommand:
    out = SendMessageResponseHeader("0A0000010000271100000000000000FF", header.queue_id, 7)
    return cmd.response(ResponseCode.SUCCESS, ext_fields=out.to_ext_fields())


def code_reply(code: int) -> Reply:
    return lambda cmd, header: cmd.response(code, f"scripted {code}")


class ScriptedBroker:
    """A broker that records requests and answers sends with ``reply`` (None: never answers)."""

    def __init__(self, name: str, reply: Reply = ok_reply) -> None:
        self.name = name
        self.reply = reply
        self.server = RemotingServer(name=name)
        self.sends: list[SendMessageRequestHeader] = []
        self.heartbeats: list[HeartbeatData] = []
        self.unregistered: list[UnregisterClientRequestHeader] = []
        self.client_conns: list[RemotingConnection] = []
        self.heartbeat_seen = asyncio.Event()
        self._registrar = RemotingClient()
        self.server.register(RequestCode.SEND_MESSAGE_V2, self._send)
        self.server.register(RequestCode.SEND_BATCH_MESSAGE, self._send)
        self.server.register(RequestCode.HEART_BEAT, self._heartbeat)
        self.server.register(RequestCode.UNREGISTER_CLIENT, self._unregister)

    @property
    def address(self) -> str:
        return self.server.address

    def _send(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand | None:
        header = SendMessageRequestHeader.from_v2_ext_fields(cmd.ext_fields)
        self.sends.append(header)
        return self.reply(cmd, header)

    def _heartbeat(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        self.heartbeats.append(HeartbeatData.from_json(cmd.body))
        self.client_conns.append(conn)
        self.heartbeat_seen.set()
        return cmd.response(ResponseCode.SUCCESS)

    def _unregister(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        self.unregistered.append(UnregisterClientRequestHeader.from_ext_fields(cmd.ext_fields))
        return cmd.response(ResponseCode.SUCCESS)

    async def start(self, namesrv: str, topics: dict[str, int]) -> None:
        await self.server.start()
        wrapper = TopicConfigSerializeWrapper(
            {t: TopicConfig(t, n, n) for t, n in topics.items()})
        header = RegisterBrokerRequestHeader(self.name, self.address, "FakeCluster", "", 0)
        cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(),
                                      body=RegisterBrokerBody(wrapper).to_json())
        resp = await self._registrar.invoke(namesrv, cmd)
        assert resp.code == ResponseCode.SUCCESS

    async def stop_serving(self) -> None:
        """Stop answering clients but stay registered (a broker that died without a word)."""
        await self.server.stop(grace=0.1)

    async def close(self) -> None:
        await self.server.stop(grace=0.1)
        await self._registrar.close()


def free_port() -> int:
    """A port nobody listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def with_cluster(
    replies: dict[str, Reply],
    body: Callable[[NameServer, dict[str, ScriptedBroker]], Awaitable[Any]],
    topics: dict[str, int] | None = None,
) -> Any:
    """Run ``body`` with a name server and one scripted broker per entry of ``replies``."""
    ns = NameServer(NamesrvConfig(listen_port=0))
    await ns.start()
    brokers = {name: ScriptedBroker(name, reply) for name, reply in replies.items()}
    try:
        for broker in brokers.values():
            await broker.start(ns.address, topics or {TOPIC: 4})
        return await body(ns, brokers)
    finally:
        for broker in brokers.values():
            await broker.close()
        await ns.stop()


def test_retries_go_to_the_other_broker_after_a_retriable_refusal():
    async def body(ns: NameServer, brokers: dict[str, ScriptedBroker]) -> None:
        async with AsyncProducer("pg", ns.address) as producer:
            for i in range(20):
                result = await producer.send(Message(TOPIC, f"m{i}".encode()))
                assert result.status is SendStatus.OK and result.queue.broker_name == "broker-b"
        busy, good = brokers["broker-a"].sends, brokers["broker-b"].sends
        assert len(good) == 20 and busy  # round robin tried broker-a too
        ids = {parse_properties(h.properties.encode())["UNIQ_KEY"] for h in good}
        assert len(ids) == 20
        # A message refused by broker-a went next to broker-b with the same UNIQ_KEY.
        retried = {parse_properties(h.properties.encode())["UNIQ_KEY"] for h in busy}
        assert retried <= ids

    run(with_cluster({"broker-a": code_reply(ResponseCode.SYSTEM_BUSY), "broker-b": ok_reply},
                     body))


def test_unreachable_broker_is_skipped_and_reported_last_if_all_fail():
    async def body(ns: NameServer, brokers: dict[str, ScriptedBroker]) -> None:
        await brokers["broker-a"].stop_serving()
        async with AsyncProducer("pg", ns.address) as producer:
            results = [await producer.send(Message(TOPIC, b"x")) for _ in range(10)]
            assert {r.queue.broker_name for r in results} == {"broker-b"}
            await brokers["broker-b"].stop_serving()
            with pytest.raises(Exception) as info:
                await producer.send(Message(TOPIC, b"x"))
            assert getattr(info.value, "retriable", False)
            assert any("attempt" in note for note in info.value.__notes__)

    run(with_cluster({"broker-a": ok_reply, "broker-b": ok_reply}, body))


def test_non_retriable_refusal_is_raised_after_one_attempt():
    async def body(ns: NameServer, brokers: dict[str, ScriptedBroker]) -> None:
        async with AsyncProducer("pg", ns.address) as producer:
            with pytest.raises(BrokerError) as info:
                await producer.send(Message(TOPIC, b"x"))
        assert info.value.code == ResponseCode.MESSAGE_ILLEGAL and not info.value.retriable
        assert len(brokers["broker-a"].sends) + len(brokers["broker-b"].sends) == 1

    illegal = code_reply(ResponseCode.MESSAGE_ILLEGAL)
    run(with_cluster({"broker-a": illegal, "broker-b": illegal}, body))


def test_send_timeout_bounds_the_whole_send():
    async def body(ns: NameServer, brokers: dict[str, ScriptedBroker]) -> None:
        async with AsyncProducer("pg", ns.address, send_timeout=0.3) as producer:
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(TimeoutError):
                await producer.send(Message(TOPIC, b"x"))
            assert loop.time() - started < 1.5

    run(with_cluster({"broker-a": lambda cmd, h: None}, body))


def test_a_hung_broker_costs_one_timeout_then_is_skipped():
    async def body(ns: NameServer, brokers: dict[str, ScriptedBroker]) -> None:
        failures = 0
        async with AsyncProducer("pg", ns.address, send_timeout=0.3) as producer:
            for _ in range(12):
                try:
                    result = await producer.send(Message(TOPIC, b"x"))
                except TimeoutError:
                    failures += 1
                else:
                    assert result.queue.broker_name == "broker-b"
        assert failures <= 1 and len(brokers["broker-a"].sends) <= 1
        assert len(brokers["broker-b"].sends) >= 11

    run(with_cluster({"broker-a": lambda cmd, h: None, "broker-b": ok_reply}, body))


def test_new_topic_rides_on_tbw102_with_the_default_queue_count():
    async def body(ns: NameServer, brokers: dict[str, ScriptedBroker]) -> None:
        async with AsyncProducer("pg", ns.address, default_topic_queue_nums=3) as producer:
            queues = await producer.fetch_publish_queues("BrandNew")
            assert [(q.broker_name, q.queue_id) for q in queues] == [
                ("broker-a", 0), ("broker-a", 1), ("broker-a", 2)]
            await producer.send(Message("BrandNew", b"x"))
        header = brokers["broker-a"].sends[0]
        assert (header.topic, header.default_topic, header.default_topic_queue_nums) == (
            "BrandNew", "TBW102", 3)

    run(with_cluster({"broker-a": ok_reply}, body, topics={"TBW102": 8}))


def test_unknown_topic_without_tbw102_is_topic_not_exist():
    async def body(ns: NameServer, brokers: dict[str, ScriptedBroker]) -> None:
        async with AsyncProducer("pg", ns.address) as producer:
            with pytest.raises(BrokerError) as info:
                await producer.send(Message("Nowhere", b"x"))
        assert info.value.code == ResponseCode.TOPIC_NOT_EXIST

    run(with_cluster({"broker-a": ok_reply}, body))


def test_selector_picks_the_queue_and_batch_uses_code_320():
    async def body(ns: NameServer, brokers: dict[str, ScriptedBroker]) -> None:
        async with AsyncProducer("pg", ns.address) as producer:
            for _ in range(3):
                await producer.send(Message(TOPIC, b"x"), selector=select_by_hash, arg=7)
            await producer.send_batch([Message(TOPIC, b"a"), Message(TOPIC, b"b")])
            with pytest.raises(ClientError):
                await producer.send(Message(TOPIC, b"x"), selector=lambda q, m, a: "nope")
        sends = brokers["broker-a"].sends
        assert [h.queue_id for h in sends[:3]] == [3, 3, 3]  # 7 % 4, like the C++ client
        assert sends[3].batch is True

    run(with_cluster({"broker-a": ok_reply}, body))


def test_name_server_failover_skips_a_dead_address():
    async def body(ns: NameServer, brokers: dict[str, ScriptedBroker]) -> None:
        dead = f"127.0.0.1:{free_port()}"
        for _ in range(3):  # whichever address the client starts with
            async with AsyncAdmin(f"{dead};{ns.address}") as admin:
                assert TOPIC in await admin.list_topics()
                info = await admin.cluster_info()
                assert info.cluster_addr_table == {"FakeCluster": ["broker-a"]}

    run(with_cluster({"broker-a": ok_reply}, body))


def test_heartbeat_names_the_group_and_shutdown_unregisters():
    async def body(ns: NameServer, brokers: dict[str, ScriptedBroker]) -> None:
        broker = brokers["broker-a"]
        producer = AsyncProducer("pg-heart", ns.address)
        await producer.start()
        await producer.send(Message(TOPIC, b"x"))
        await asyncio.wait_for(broker.heartbeat_seen.wait(), 5)
        beat = broker.heartbeats[0]
        assert beat.client_id == producer.client_id
        assert [p.group_name for p in beat.producer_data_set] == ["pg-heart"]
        # The broker may ask the client things over the same connection.
        changed = asyncio.Event()
        producer.instance.on_consumer_ids_changed("cg", lambda g: changed.set())
        notify = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                         {"consumerGroup": "cg"})
        broker.client_conns[0].invoke_oneway(notify)
        await asyncio.wait_for(changed.wait(), 5)
        await producer.shutdown()
        assert [(u.client_id, u.producer_group) for u in broker.unregistered] == [
            (producer.client_id, "pg-heart")]

    run(with_cluster({"broker-a": ok_reply}, body))


def test_client_ids_are_distinct_per_client_in_one_process():
    ids = {AsyncProducer("pg", "127.0.0.1:9876").client_id for _ in range(20)}
    assert len(ids) == 20
    ip, _, rest = next(iter(ids)).partition("@")
    assert ip.count(".") == 3 and "#" in rest


def test_blocking_producer_twin_and_send_async_future():
    async def body(ns: NameServer, brokers: dict[str, ScriptedBroker]) -> None:
        def use_blocking() -> list[str]:
            with Producer("pg", ns.address) as producer:
                first = producer.send(Message(TOPIC, b"sync"))
                future = producer.send_async(Message(TOPIC, b"async"))
                second = future.result(timeout=5)
                producer.send_oneway(Message(TOPIC, b"oneway"))
                return [first.msg_id, second.msg_id]

        ids = await asyncio.to_thread(use_blocking)
        assert len(set(ids)) == 2
        assert len(brokers["broker-a"].sends) >= 2  # the oneway one may still be on its way

    run(with_cluster({"broker-a": ok_reply}, body))


def test_blocking_client_refuses_calls_before_start():
    producer = Producer("pg", "127.0.0.1:9876")
    with pytest.raises(ClientError):
        producer.send(Message(TOPIC, b"x"))
    producer.shutdown()  # harmless when never started
