"""No anonymous way in: with authentication and authorization on, every request code the broker
and the name server handle is refused to an anonymous client and to one that forges a Super
user's access key, before it touches state.

The frames carry what an attacker would send (a real topic and group, offsets to rewind, a
broker name to hijack, ``brokerPermission=0`` and ``fileReservedTime=0``...). Afterwards the
broker's tables, saved again, are the same bytes as before, no ``broker_runtime.toml`` exists,
the route still names the real broker, and the messages are all there. A fake slave that
connects to the HA port and reports offset 0 receives not one byte and is closed.
"""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

import orbitmq
from orbitmq.broker.config_file import save_all
from orbitmq.config import NamesrvConfig
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.security import Credentials
from orbitmq.store.metadata_db import ACLS, USERS, MetadataDB, export_tables
from orbitmq.testing import EmbeddedCluster
from orbitmq.transport import RemotingClient

ROOT = Credentials("root", "root-secret-1")
ACCESS = {"authentication_enabled": True, "authorization_enabled": True,
          "init_authentication_user": '{"username": "root", "password": "root-secret-1"}'}
TOPIC, GROUP = "billing", "billing"

# What an attacker fills in: a field for every header the servers parse.
HOSTILE_FIELDS = {
    "topic": TOPIC, "b": TOPIC, "a": "pg", "consumerGroup": GROUP, "group": GROUP,
    "groupName": GROUP, "queueId": "0", "e": "0", "queueOffset": "0", "commitOffset": "0",
    "maxMsgNums": "32", "sysFlag": "0", "suspendTimeoutMillis": "0", "subscription": "*",
    "subVersion": "0", "producerGroup": "pg", "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4", "bornTimestamp": "0", "flag": "0", "readQueueNums": "1",
    "writeQueueNums": "1", "perm": "0", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0",
    "order": "false", "brokerName": "broker-a", "brokerAddr": "127.0.0.1:1",
    "clusterName": "DefaultCluster", "haServerAddr": "127.0.0.1:2", "brokerId": "0",
    "srcGroup": GROUP, "destGroup": "evil", "offline": "false", "tranStateTableOffset": "0",
    "commitLogOffset": "0", "commitOrRollback": "8", "msgId": "00", "transactionId": "t",
    "offset": "0", "key": "k", "maxNum": "32", "beginTimestamp": "0",
    "endTimestamp": "9999999999999", "timestamp": "0", "isForce": "true", "clientID": "evil",
    "clientId": "evil", "username": "evil", "subject": "User:evil", "filter": "",
    "statsName": "TOPIC_PUT_NUMS", "statsKey": TOPIC, "index": "0", "count": "1",
    "isOrder": "false", "delayLevel": "-1", "recallHandle": "djEgYmlsbGluZyBicm9rZXItYSA5OTk5OTk5OTk5OTk5IGlk",
}


def hostile_body(code: int) -> bytes:
    if code == RequestCode.UPDATE_BROKER_CONFIG:
        return b"brokerPermission=0\nfileReservedTime=0\ndeleteWhen=*\n"
    if code in range(3001, 3011):
        return orjson.dumps({"username": "evil", "password": "evil-pass-1", "userType": "Super",
                             "subject": "User:evil", "policies": [{"entries": [
                                 {"resource": "*", "actions": ["All"]}]}]})
    return orjson.dumps({"groupName": GROUP, "consumerGroup": GROUP, "clientID": "evil",
                         "topicConfigTable": {TOPIC: {"topicName": TOPIC, "perm": 0}},
                         "consumerDataSet": [{"groupName": GROUP}], "mqSet": []})


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[EmbeddedCluster]:
    """A cluster of its own per test: one test's changes are the next one's "before"."""
    root = tmp_path
    with EmbeddedCluster(root, namesrv_config=NamesrvConfig(listen_port=0, **ACCESS),
                         **ACCESS) as c:
        with orbitmq.Admin(c.namesrv, credentials=ROOT) as admin:
            admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
        with orbitmq.Producer("pg", namesrv=c.namesrv, credentials=ROOT) as producer:
            for i in range(3):
                producer.send(orbitmq.Message(TOPIC, f"invoice-{i}".encode()))
        with orbitmq.PullConsumer(GROUP, namesrv=c.namesrv, credentials=ROOT) as consumer:
            for mq in consumer.fetch_queues(TOPIC):
                consumer.update_offset(mq, 1)
            consumer.persist_offsets()
        yield c


def saved_tables(c: EmbeddedCluster) -> dict[str, bytes]:
    broker = c.brokers[0]

    async def save() -> None:
        assert not save_all(broker._tables(), force=True)

    c.call(save())
    config_dir = Path(broker.config.store.store_path) / "config"
    files = {p.name: p.read_bytes() for p in sorted(config_dir.iterdir()) if p.is_file()
             and not p.name.endswith(".tmp") and not p.name.startswith("metadata.db")}
    # The metadata store's file changes with its checkpoints: compare its rows.
    with MetadataDB(str(config_dir / "metadata.db"), read_only=True) as db:
        files["metadata.db"] = orjson.dumps(export_tables(db), option=orjson.OPT_SORT_KEYS)
        # The users and ACLs, which no export holds (their secret keys).
        files["users"] = orjson.dumps([list(db.rows(kind)) for kind in (USERS, ACLS)])
    return files


def test_every_code_is_refused_anonymous_or_forged_and_nothing_changes(
        cluster: EmbeddedCluster) -> None:
    broker = cluster.brokers[0]
    before = saved_tables(cluster)
    assert "metadata.db" in before and b'"root"' in before["users"]
    assert f'"{TOPIC}@{GROUP}"'.encode() in before["metadata.db"]
    codes = sorted(set(broker.server._handlers) | set(cluster.namesrv_server.server._handlers))
    assert len(codes) > 40
    forged_sig = base64.b64encode(os.urandom(20)).decode()
    answers: dict[tuple[int, str], tuple[int, str]] = {}

    async def sweep() -> None:
        client = RemotingClient()
        try:
            for addr in (broker.address, cluster.namesrv):
                for code in codes:
                    for who, extra in (("anonymous", {}),
                                       ("forged", {"AccessKey": "root",
                                                   "Signature": forged_sig}),
                                       ("empty-key", {"AccessKey": "", "Signature": "x"})):
                        cmd = RemotingCommand.request(code, {**HOSTILE_FIELDS, **extra},
                                                      hostile_body(code))
                        resp = await client.invoke(addr, cmd, 5.0)
                        answers[(code, f"{who}@{addr}")] = (resp.code, resp.remark or "")
        finally:
            await client.close()

    cluster.call(sweep(), timeout=120)
    let_through = {k: v for k, v in answers.items() if v[0] != ResponseCode.NO_PERMISSION}
    assert not let_through, let_through
    assert all("authentication failed" in remark for _, remark in answers.values())
    assert saved_tables(cluster) == before
    store = Path(broker.config.store.store_path)
    assert not (store / "config" / "broker_runtime.toml").exists()
    assert broker.config.broker_permission & 2  # still writable
    with orbitmq.PullConsumer("checker", namesrv=cluster.namesrv, credentials=ROOT) as consumer:
        queues = consumer.fetch_queues(TOPIC)
        assert {mq.broker_name for mq in queues} == {"broker-a"}
        bodies = sorted(bytes(m.body) for mq in queues
                        for m in consumer.pull(mq, offset=0, max_nums=32).messages)
    assert bodies == [b"invoice-0", b"invoice-1", b"invoice-2"]
    addrs = cluster.call(_route_addrs(cluster))
    assert addrs == {broker.address}


HA_CLOSE_WAIT_S = 10.0  # the master's handshake gives up on a silent client after 5 s


def test_a_fake_slave_receives_nothing_from_the_ha_port(cluster: EmbeddedCluster) -> None:
    host, _, port = cluster.brokers[0].replication.ha_address().rpartition(":")

    async def fake_slave() -> bytes:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(struct.pack(">q", 0))  # "I hold nothing: send me the whole log"
            await writer.drain()
            return await asyncio.wait_for(reader.read(), HA_CLOSE_WAIT_S)  # until closed
        finally:
            writer.close()

    assert asyncio.run(fake_slave()) == b""
    info = cluster.brokers[0].replication.runtime_info()
    assert info["haConnectionCount"] == "0" and info["inSyncSlaveNums"] == "0"


async def _route_addrs(c: EmbeddedCluster) -> set[str]:
    from orbitmq.protocol.bodies import TopicRouteData
    from orbitmq.transport.client import RemotingClient as Client

    client = Client(credentials=ROOT)
    try:
        resp = await client.invoke(c.namesrv, RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}), 5.0)
    finally:
        await client.close()
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    route = TopicRouteData.from_json(bytes(resp.body))
    return {addr for b in route.broker_datas for addr in b.broker_addrs.values()}


def test_a_normal_users_admin_requests_are_refused_and_a_super_users_carried_out(
        cluster: EmbeddedCluster) -> None:
    broker = cluster.brokers[0]
    alice = Credentials("alice", "alice-secret-1")
    with orbitmq.Admin(cluster.namesrv, credentials=ROOT) as admin:
        admin.create_user("alice", "alice-secret-1")
        admin.create_acl("User:alice", ["Topic:*", "Group:*"], ["Pub", "Sub", "Get"])
    create = {"topic": "scratch-topic", "defaultTopic": "TBW102", "readQueueNums": "2",
              "writeQueueNums": "2", "perm": "6", "topicFilterType": "SINGLE_TAG",
              "topicSysFlag": "0", "order": "false"}
    requests = [(RequestCode.UPDATE_AND_CREATE_TOPIC, create, b""),
                (RequestCode.UPDATE_BROKER_CONFIG, {}, b"deleteFileBatchMax=7\n"),
                (RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "scratch-topic"}, b"")]

    async def run(creds: Credentials, todo: list[tuple[int, dict[str, str], bytes]] = requests
                  ) -> list[tuple[int, str]]:
        client = RemotingClient(credentials=creds)
        try:
            return [((r := await client.invoke(broker.address, RemotingCommand.request(
                code, fields, body), 5.0)).code, r.remark or "") for code, fields, body in todo]
        finally:
            await client.close()

    async def broker_config_text() -> str:
        client = RemotingClient(credentials=ROOT)
        try:
            resp = await client.invoke(broker.address, RemotingCommand.request(
                RequestCode.GET_BROKER_CONFIG), 5.0)
        finally:
            await client.close()
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        return bytes(resp.body).decode()

    refused = cluster.call(run(alice))
    assert [code for code, _ in refused] == [ResponseCode.NO_PERMISSION] * 3, refused
    assert "no rule allows user alice Create on Topic:scratch-topic" in refused[0][1]
    assert "needs a Super user" in refused[1][1]
    assert "deleteFileBatchMax=7" not in cluster.call(broker_config_text())
    with orbitmq.Admin(cluster.namesrv, credentials=ROOT) as admin:
        admin.create_topic("scratch-topic", read_queue_nums=1, write_queue_nums=1)
    refused = cluster.call(run(alice))
    assert refused[2][0] == ResponseCode.NO_PERMISSION and broker.topics.get("scratch-topic")
    done = cluster.call(run(ROOT))
    assert [code for code, _ in done] == [ResponseCode.SUCCESS] * 3, done
    assert "deleteFileBatchMax=7" in cluster.call(broker_config_text())
    assert broker.topics.get("scratch-topic") is None
