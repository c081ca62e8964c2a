"""REGISTER_BROKER with a compressed body between real processes (protocol/register_body.py):
a broker started with ``--compressed-register true`` registers its whole topic table with a
fresh name server, which then routes every topic; a body that would inflate past the name
server's ``register_body_decompressed_max_bytes`` is refused LIMIT_EXCEEDED, one whose
``bodyCrc32`` differs SYSTEM_ERROR "crc32 not match", and the name server goes on serving."""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Sequence
from pathlib import Path

from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import CreateTopicRequestHeader, RegisterBrokerRequestHeader
from orbitmq.protocol.register_body import body_crc32
from orbitmq.testing.process import ServerProcess
from orbitmq.transport.client import RemotingClient

TOPICS = 300
INFLATE_MAX = 1024 * 1024


def invoke_all(addr: str, requests: Sequence[RemotingCommand]) -> list[RemotingCommand]:
    async def run() -> list[RemotingCommand]:
        client = RemotingClient()
        try:
            return [await client.invoke(addr, cmd, 30.0) for cmd in requests]
        finally:
            await client.close()
    return asyncio.run(run())


def broker(namesrv: str, store: Path, *flags: str) -> ServerProcess:
    return ServerProcess(["broker", "--namesrv", namesrv, "--port", "0", "--ha-listen-port", "0",
                          "--grpc-listen-port", "-1", "--allow-anonymous", "true",
                          "--store", str(store), *flags])


def namesrv() -> tuple[ServerProcess, str]:
    proc = ServerProcess(["namesrv", "--port", "0", "--register-body-decompressed-max-bytes",
                          str(INFLATE_MAX)])
    return proc, proc.wait_ready("namesrv")["namesrv"]


def test_a_compressed_registration_routes_every_topic_and_a_bomb_is_refused(
        tmp_path: Path) -> None:
    store = tmp_path / "broker"
    ns1, ns1_addr = namesrv()
    ns2: ServerProcess | None = None
    try:
        first = broker(ns1_addr, store)
        addr = first.wait_ready("broker")["broker"]
        answers = invoke_all(addr, [RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            CreateTopicRequestHeader(f"Many{i}", "TBW102", 2, 2).to_ext_fields())
            for i in range(TOPICS)])
        assert {a.code for a in answers} == {ResponseCode.SUCCESS}
        assert first.stop() == 0
        # A name server that never heard of them: only the whole, compressed table can tell it.
        ns2, ns2_addr = namesrv()
        second = broker(ns2_addr, store, "--compressed-register", "true")
        try:
            second.wait_ready("broker")
            (listed,) = invoke_all(ns2_addr, [RemotingCommand.request(
                RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)])
            topics = set(json.loads(bytes(listed.body))["topicList"])
            assert {f"Many{i}" for i in range(TOPICS)} <= topics
            route, = invoke_all(ns2_addr, [RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Many7"})])
            assert route.code == ResponseCode.SUCCESS
            queues = json.loads(bytes(route.body))["queueDatas"]
            assert [(q["readQueueNums"], q["writeQueueNums"]) for q in queues] == [(2, 2)]
            bomb = zlib.compress(b"\0" * (64 * INFLATE_MAX), 9)  # 64 MiB in ~64 KiB
            header = RegisterBrokerRequestHeader("bomb", "127.0.0.1:1", "DefaultCluster", "", 0,
                                                 compressed=True)
            crc = RegisterBrokerRequestHeader("crc", "127.0.0.1:2", "DefaultCluster", "", 0,
                                              compressed=True, body_crc32=body_crc32(bomb) ^ 1)
            refused, mismatch, still = invoke_all(ns2_addr, [
                RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), bomb),
                RemotingCommand.request(RequestCode.REGISTER_BROKER, crc.to_ext_fields(), bomb),
                RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Many7"}),
            ])
            assert refused.code == ResponseCode.LIMIT_EXCEEDED, (refused.code, refused.remark)
            assert "register_body_decompressed_max_bytes" in (refused.remark or "")
            assert (mismatch.code, mismatch.remark) == (ResponseCode.SYSTEM_ERROR,
                                                      "crc32 not match")
            assert still.code == ResponseCode.SUCCESS  # the routes were kept
        finally:
            second.stop()
    finally:
        ns1.stop()
        if ns2 is not None:
            ns2.stop()
