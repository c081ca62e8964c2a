"""Metadata across a kill -9 of the master (issue 38's acceptance), real processes: an etcd
server, a name server and three brokers in controller mode (a SYNC_MASTER and two slaves).

A topic created, an offset committed and a subscription group made on the master, each
answered SUCCESS, then the master killed -9 at once: the new master must hold all three. The
slaves' periodic full copy is pushed out of the way (one round at start, then every 10 min),
so only the metadata log (broker/metadata_log.py) can have carried the changes. Clients can
neither send to, pull, nor create the log's topic.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    CreateTopicRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
)
from orbitmq.protocol.topics import METADATA_LOG_TOPIC
from orbitmq.testing.etcd import EtcdCluster, etcd_binary
from orbitmq.testing.failover_set import FailoverSet
from orbitmq.transport.client import RemotingClient

pytestmark = pytest.mark.skipif(etcd_binary() is None,
                                reason="etcd is not installed (Debian: apt-get install etcd-server)")

FAILOVER_MAX_S = 30.0
FULL_COPY_OUT_OF_THE_WAY = ["--slave-sync-interval-ms", "600000"]


def invoke_all(addr: str, requests: list[RemotingCommand]) -> list[RemotingCommand]:
    """The answers of ``requests`` sent one after the other to ``addr``."""
    async def run() -> list[RemotingCommand]:
        client = RemotingClient()
        try:
            return [await client.invoke(addr, cmd, 10.0) for cmd in requests]
        finally:
            await client.close()
    return asyncio.run(run())


def test_a_topic_an_offset_and_a_group_answered_just_before_a_kill_9_are_on_the_new_master(
        tmp_path: Path) -> None:
    topic, group = "MetaFailover", "meta-failover-group"
    group_body = json.dumps({"groupName": group, "retryMaxTimes": 7}).encode()
    with EtcdCluster(1) as etcd, FailoverSet(tmp_path, etcd.endpoints,
                                             flags=FULL_COPY_OUT_OF_THE_WAY) as brokers:
        first = brokers.wait_master(in_sync=3)
        answers = invoke_all(first.addr, [
            RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, CreateTopicRequestHeader(
                topic, "TBW102", 3, 3).to_ext_fields()),
            RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": group, "topic": topic, "queueId": "2", "commitOffset": "41"}),
            RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                                    group_body),
        ])
        brokers.kill(first.member)  # at once: no full copy round can have run since
        assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 3, [
            (a.code, a.remark) for a in answers]
        second = brokers.wait_master(epoch_above=first.epoch, timeout=FAILOVER_MAX_S)
        assert second.member != first.member
        topics, offset, groups = invoke_all(second.addr, [
            RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG),
            RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, {
                "consumerGroup": group, "topic": topic, "queueId": "2"}),
            RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG),
        ])
        table = json.loads(bytes(topics.body))["topicConfigTable"]
        assert topic in table, sorted(table)
        assert table[topic]["readQueueNums"] == 3 and table[topic]["writeQueueNums"] == 3
        assert METADATA_LOG_TOPIC not in table  # promotion adopts no config for the log
        assert offset.code == ResponseCode.SUCCESS, (offset.code, offset.remark)
        assert offset.ext_fields["offset"] == "41"
        held = json.loads(bytes(groups.body))["subscriptionGroupTable"]
        assert held[group]["retryMaxTimes"] == 7

        # The log's topic is the brokers' own: a client can neither write, read nor create it.
        send = SendMessageRequestHeader("forger", METADATA_LOG_TOPIC, "TBW102", 4, 0, 0, 0, 0)
        pull = PullMessageRequestHeader("forger", METADATA_LOG_TOPIC, 0, 0, 32, 0, 0, 0)
        sent, pulled, created = invoke_all(second.addr, [
            RemotingCommand.request(RequestCode.SEND_MESSAGE, send.to_ext_fields(),
                                    b'{"v": 1, "kind": "topic.delete", "topic": "' + topic.encode()
                                    + b'", "version": {"timestamp": 1, "counter": 1}}'),
            RemotingCommand.request(RequestCode.PULL_MESSAGE, pull.to_ext_fields()),
            RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, CreateTopicRequestHeader(
                METADATA_LOG_TOPIC, "TBW102", 1, 1).to_ext_fields()),
        ])
        assert sent.code == ResponseCode.NO_PERMISSION, (sent.code, sent.remark)
        assert pulled.code == ResponseCode.TOPIC_NOT_EXIST, (pulled.code, pulled.remark)
        assert created.code == ResponseCode.NO_PERMISSION, (created.code, created.remark)
