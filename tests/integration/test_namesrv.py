"""The name server over TCP: registration, routes, cluster info, expiry and connection loss."""

from __future__ import annotations

import asyncio
import time

from orbitmq.config import NamesrvConfig
from orbitmq.namesrv import NameServer
from orbitmq.protocol.bodies import (
    ClusterInfo,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import RegisterBrokerRequestHeader
from orbitmq.transport import RemotingClient, run


def register_cmd(name: str, addr: str, topics: list[str]) -> RemotingCommand:
    header = RegisterBrokerRequestHeader(
        broker_name=name, broker_addr=addr, cluster_name="DefaultCluster", ha_server_addr="", broker_id=0
    )
    body = RegisterBrokerBody(
        TopicConfigSerializeWrapper({t: TopicConfig(t, 8, 8) for t in topics})
    ).to_json()
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body)


async def route(client: RemotingClient, ns: str, topic: str) -> RemotingCommand:
    return await client.invoke(ns, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))


async def wait_for(pred, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await pred():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def test_register_route_cluster_and_connection_loss():
    async def main():
        ns = NameServer(NamesrvConfig(listen_port=0))
        await ns.start()
        a, b = RemotingClient(), RemotingClient()  # two "brokers" on two connections
        user = RemotingClient()
        try:
            assert (await route(user, ns.address, "T")).code == ResponseCode.TOPIC_NOT_EXIST
            for cli, name, addr in ((a, "broker-a", "127.0.0.1:1001"), (b, "broker-b", "127.0.0.1:1002")):
                r = await cli.invoke(ns.address, register_cmd(name, addr, ["T"]))
                assert r.code == ResponseCode.SUCCESS
            r = await route(user, ns.address, "T")
            data = TopicRouteData.from_json(bytes(r.body))
            assert sorted(q.broker_name for q in data.queue_datas) == ["broker-a", "broker-b"]
            assert {b.broker_name: b.broker_addrs for b in data.broker_datas} == {
                "broker-a": {0: "127.0.0.1:1001"}, "broker-b": {0: "127.0.0.1:1002"}}
            info = ClusterInfo.from_json(bytes((await user.invoke(
                ns.address, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))).body))
            assert info.cluster_addr_table == {"DefaultCluster": ["broker-a", "broker-b"]}
            topics = TopicList.from_json(bytes((await user.invoke(
                ns.address, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))).body))
            assert topics.topic_list == ["T"]
            await a.close()  # broker-a's connection goes away: its routes go with it

            async def only_b() -> bool:
                d = TopicRouteData.from_json(bytes((await route(user, ns.address, "T")).body))
                return [x.broker_name for x in d.queue_datas] == ["broker-b"]

            await wait_for(only_b, 5)
        finally:
            await user.close()
            await b.close()
            await ns.stop()

    run(main())


def test_silent_broker_expires():
    async def main():
        ns = NameServer(NamesrvConfig(listen_port=0, broker_expire_ms=300,
                                      scan_not_active_broker_interval_ms=50))
        await ns.start()
        broker, user = RemotingClient(), RemotingClient()
        try:
            await broker.invoke(ns.address, register_cmd("broker-a", "127.0.0.1:1001", ["T"]))
            assert (await route(user, ns.address, "T")).code == ResponseCode.SUCCESS
            started = time.monotonic()

            async def gone() -> bool:
                return (await route(user, ns.address, "T")).code == ResponseCode.TOPIC_NOT_EXIST

            await wait_for(gone, 5)
            assert time.monotonic() - started >= 0.25  # not before its expiry
        finally:
            await user.close()
            await broker.close()
            await ns.stop()

    run(main())
