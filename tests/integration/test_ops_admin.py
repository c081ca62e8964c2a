"""The admin requests of RocketMQ's tools (issue 17), on an embedded name server and two
brokers: each answer decoded with the SDK and its raw JSON field names compared with those of
RocketMQ's Java classes (KVTable, BrokerStatsData, ConsumeStatsList, ProducerConnection,
GroupList, QueryConsumeTimeSpanBody, QueryConsumeQueueResponseBody, TopicList)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orbitmq import Message, Producer, PullConsumer
from orbitmq.client import Admin
from orbitmq.client.admin.ops_models import first_rate
from orbitmq.errors import BrokerError, ClientError
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import SendMessageRequestHeader
from orbitmq.testing.embedded import EmbeddedCluster
from orbitmq.transport import RemotingClient

TOPIC, GROUP = "OpsTopic", "ops-group"
SENT = 6
# Field names of RocketMQ's Java bodies, as their JSON carries them.
BROKER_STATS_ITEM = {"sum", "tps", "avgpt"}
BROKER_STATS_DATA = {"statsMinute", "statsHour", "statsDay"}
CONSUME_STATS_LIST = {"consumeStatsList", "brokerAddr", "totalDiff", "totalInflightDiff"}
CONSUME_STATS = {"consumeTps", "offsetTable"}
OFFSET_WRAPPER = {"brokerOffset", "consumerOffset", "pullOffset", "lastTimestamp"}
CONNECTION = {"clientId", "clientAddr", "language", "version"}
QUEUE_TIME_SPAN = {"messageQueue", "minTimeStamp", "maxTimeStamp", "consumeTimeStamp",
                   "delayTime"}
CONSUME_QUEUE_DATA = {"physicOffset", "physicSize", "tagsCode"}
RUNTIME_KEYS = {"brokerVersionDesc", "bootTimestamp", "runtime", "putTps", "getTransferedTps",
                "getFoundTps", "getMissTps", "getTotalTps", "msgPutTotalTodayNow",
                "msgPutTotalTodayMorning", "msgPutTotalYesterdayMorning", "msgGetTotalTodayNow",
                "msgGetTotalTodayMorning", "msgGetTotalYesterdayMorning", "commitLogDiskRatio",
                "consumeQueueDiskRatio", "commitLogMinOffset", "commitLogMaxOffset",
                "commitLogDirCapacity", "dispatchBehindBytes", "putMessageTimesTotal",
                "putMessageSizeTotal", "putMessageAverageSize", "earliestMessageTimeStamp",
                "sendThreadPoolQueueSize", "pullThreadPoolQueueSize"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("ops"), brokers=2) as c:
        with Admin(c.namesrv) as admin:
            admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
        with Producer("ops-producer", namesrv=c.namesrv) as producer:
            for i in range(SENT):
                producer.send(Message(TOPIC, f"m{i}".encode(), keys=[f"k{i}"]))
        yield c


@pytest.fixture
def admin(cluster: EmbeddedCluster) -> Iterator[Admin]:
    with Admin(cluster.namesrv) as a:
        yield a


def raw(cluster: EmbeddedCluster, addr: str, code: int, fields: dict[str, str] | None = None,
        body: bytes = b"") -> RemotingCommand:
    async def go() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(addr, RemotingCommand.request(code, fields, body), 5.0)
        finally:
            await client.close()
    return cluster.call(go())


def pull_all(ns: str, group: str, topic: str) -> int:
    pulled = 0
    with PullConsumer(group, namesrv=ns) as consumer:
        for mq in consumer.fetch_queues(topic):
            offset = 0
            while res := consumer.pull(mq, offset, max_nums=4).messages:
                pulled += len(res)
                offset = res[-1].queue_offset + 1
            consumer.update_offset(mq, offset)
        consumer.persist_offsets()
    return pulled


def masters(cluster: EmbeddedCluster) -> dict[str, str]:
    return {b.config.broker_name: b.address for b in cluster.brokers}


def test_runtime_info_has_rocketmq_keys_and_counts_sends(cluster: EmbeddedCluster,
                                                         admin: Admin) -> None:
    stored = 0
    for name, addr in masters(cluster).items():
        body = json.loads(raw(cluster, addr, RequestCode.GET_BROKER_RUNTIME_INFO).body)
        assert set(body) == {"table"}
        table = body["table"]
        assert set(table) >= RUNTIME_KEYS and all(isinstance(v, str) for v in table.values())
        assert re.fullmatch(r"\[ \d+ days, \d+ hours, \d+ minutes, \d+ seconds \]", table["runtime"])
        assert len(table["putTps"].split()) == 3
        assert set(admin.broker_runtime_info(name)) == set(table)
        stored += int(admin.broker_runtime_info(addr)["msgPutTotalTodayNow"])
    assert stored == SENT
    assert sum(first_rate(admin.broker_runtime_info(n)["putTps"]) for n in masters(cluster)) > 0


def test_stats_items_by_topic_and_group(cluster: EmbeddedCluster, admin: Admin) -> None:
    group = "stats-group"
    assert pull_all(cluster.namesrv, group, TOPIC) == SENT
    puts = gets = 0
    for name, addr in masters(cluster).items():
        resp = raw(cluster, addr, RequestCode.VIEW_BROKER_STATS_DATA,
                   {"statsName": "TOPIC_PUT_NUMS", "statsKey": TOPIC})
        body = json.loads(resp.body)
        assert set(body) == BROKER_STATS_DATA
        assert all(set(item) == BROKER_STATS_ITEM for item in body.values())
        data = admin.broker_stats(name, "TOPIC_PUT_NUMS", TOPIC)
        assert data.minute.sum == data.hour.sum == data.day.sum == data.last_24h_sum()
        puts += data.day.sum
        gets += admin.broker_stats(name, "GROUP_GET_NUMS", f"{TOPIC}@{group}").day.sum
        assert admin.broker_stats(name, "TOPIC_PUT_NUMS", "NeverSent").day.sum == 0
    assert (puts, gets) == (SENT, SENT)
    bad = raw(cluster, cluster.brokers[0].address, RequestCode.VIEW_BROKER_STATS_DATA,
              {"statsName": "NOPE", "statsKey": TOPIC})
    assert bad.code == ResponseCode.INVALID_PARAMETER and "statsName" in bad.remark
    missing = raw(cluster, cluster.brokers[0].address, RequestCode.VIEW_BROKER_STATS_DATA,
                  {"statsKey": TOPIC})
    assert missing.code == ResponseCode.INVALID_PARAMETER and "statsName" in missing.remark


def test_broker_consume_stats(cluster: EmbeddedCluster, admin: Admin) -> None:
    group = "bcs-group"
    pull_all(cluster.namesrv, group, TOPIC)
    diff = 0
    for name, addr in masters(cluster).items():
        body = json.loads(raw(cluster, addr, RequestCode.GET_BROKER_CONSUME_STATS,
                              {"isOrder": "false"}).body)
        assert set(body) == CONSUME_STATS_LIST
        entry = next(e for m in body["consumeStatsList"] for g, es in m.items() if g == group
                     for e in es)
        assert set(entry) == CONSUME_STATS
        assert all(set(row) == OFFSET_WRAPPER for row in entry["offsetTable"].values())
        stats = admin.broker_consume_stats(name)
        mine = [s for s in stats.stats if s.group == group]
        assert [s.topic for s in mine] == [TOPIC] and mine[0].lag == 0
        diff += stats.total_diff
        assert admin.broker_consume_stats(name, order_only=True).stats == ()
    assert diff >= 0
    bad = raw(cluster, cluster.brokers[0].address, RequestCode.GET_BROKER_CONSUME_STATS, {})
    assert bad.code == ResponseCode.INVALID_PARAMETER and "isOrder" in bad.remark


def test_producer_connections_and_topic_consumers(cluster: EmbeddedCluster, admin: Admin) -> None:
    with Producer("conn-producer", namesrv=cluster.namesrv) as producer:
        producer.send(Message(TOPIC, b"hello"))
        for addr in masters(cluster).values():
            body = json.loads(raw(cluster, addr, RequestCode.GET_PRODUCER_CONNECTION_LIST,
                                  {"producerGroup": "conn-producer"}).body)
            assert set(body) == {"connectionSet"}
            assert all(set(c) == CONNECTION for c in body["connectionSet"])
        conns = admin.producer_connections("conn-producer")
        # one connection to each broker the producer heartbeats to
        assert {c.client_id for c in conns} == {producer.client_id} and 1 <= len(conns) <= 2
        assert {c.language for c in conns} == {"PYTHON"}
    assert admin.producer_connections("nobody-here") == []
    pull_all(cluster.namesrv, "who-group", TOPIC)
    body = json.loads(raw(cluster, cluster.brokers[0].address,
                          RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": TOPIC}).body)
    assert set(body) == {"groupList"}
    assert "who-group" in admin.topic_consumer_groups(TOPIC)


def test_consume_time_span(cluster: EmbeddedCluster, admin: Admin) -> None:
    group = "span-group"
    pull_all(cluster.namesrv, group, TOPIC)
    body = json.loads(raw(cluster, cluster.brokers[0].address, RequestCode.QUERY_CONSUME_TIME_SPAN,
                          {"topic": TOPIC, "group": group}).body)
    assert set(body) == {"consumeTimeSpanSet"}
    assert all(set(s) == QUEUE_TIME_SPAN for s in body["consumeTimeSpanSet"])
    spans = admin.consume_time_span(TOPIC, group)
    assert len(spans) == 4  # two queues on each of two brokers
    for s in spans:
        if s.max_timestamp > 0:
            assert s.min_timestamp <= s.consume_timestamp <= s.max_timestamp
            assert s.delay_ms == 0  # everything consumed
    r = raw(cluster, cluster.brokers[0].address, RequestCode.QUERY_CONSUME_TIME_SPAN,
            {"topic": "NoSuchTopic", "group": group})
    assert r.code == ResponseCode.TOPIC_NOT_EXIST


def test_clone_and_delete_group(cluster: EmbeddedCluster, admin: Admin) -> None:
    pull_all(cluster.namesrv, "clone-src", TOPIC)
    assert admin.clone_group_offset("clone-src", "clone-dst") == sorted(masters(cluster))
    src = admin.group_status("clone-src", TOPIC)
    dst = admin.group_status("clone-dst", TOPIC)
    assert [(q.queue, q.consumer_offset) for q in dst.queues] == \
        [(q.queue, q.consumer_offset) for q in src.queues]
    with pytest.raises(ClientError, match="no committed offsets"):
        admin.clone_group_offset("never-consumed", "clone-dst")
    r = raw(cluster, cluster.brokers[0].address, RequestCode.CLONE_GROUP_OFFSET,
            {"srcGroup": "clone-src", "destGroup": "bad group!"})
    assert r.code == ResponseCode.INVALID_PARAMETER and "destGroup" in r.remark
    assert admin.delete_group("clone-dst") == sorted(masters(cluster))
    assert admin.group_status("clone-dst", TOPIC).queues == [] or \
        all(q.consumer_offset <= 0 for q in admin.group_status("clone-dst", TOPIC).queues)


def test_topics_by_cluster(cluster: EmbeddedCluster, admin: Admin) -> None:
    body = json.loads(raw(cluster, cluster.namesrv, RequestCode.GET_TOPICS_BY_CLUSTER,
                          {"cluster": "DefaultCluster"}).body)
    assert TOPIC in body["topicList"]
    assert TOPIC in admin.topics_by_cluster("DefaultCluster")
    assert admin.topics_by_cluster("NoSuchCluster") == []
    r = raw(cluster, cluster.namesrv, RequestCode.GET_TOPICS_BY_CLUSTER, {})
    assert r.code == ResponseCode.INVALID_PARAMETER and "cluster" in r.remark


def test_query_consume_queue_and_read_by_offset(cluster: EmbeddedCluster, admin: Admin) -> None:
    mq = next(s.queue for s in admin.topic_status(TOPIC) if s.max_offset > 0)
    addr = masters(cluster)[mq.broker_name]
    fields = {"topic": TOPIC, "queueId": str(mq.queue_id), "index": "0", "count": "10",
              "consumerGroup": "cq-group"}
    body = json.loads(raw(cluster, addr, RequestCode.QUERY_CONSUME_QUEUE, fields).body)
    assert {"minQueueIndex", "maxQueueIndex", "queueData", "filterData"} <= set(body)
    assert all(set(e) == CONSUME_QUEUE_DATA for e in body["queueData"])
    view = admin.query_consume_queue(TOPIC, mq.broker_name, mq.queue_id, 0, 10)
    msgs = admin.queue_messages(mq, 0, 10)
    assert [e.physic_offset for e in view.entries] == [m.commit_log_offset for m in msgs]
    assert view.max_index == len(msgs) and view.entries[0].index == 0
    one = admin.message_at(mq, len(msgs) - 1)
    assert one.queue_offset == len(msgs) - 1 and one.body == msgs[-1].body
    with pytest.raises(BrokerError) as absent:
        admin.message_at(mq, len(msgs) + 5)
    assert absent.value.code == ResponseCode.QUERY_NOT_FOUND
    past = admin.query_consume_queue(TOPIC, mq.broker_name, mq.queue_id, 100, 5)
    assert past.entries == () and "not exist" in (past.remark or "")
    for change, word in (({"count": "10001"}, "count"), ({"queueId": "9"}, "queueId"),
                         ({"index": "-1"}, "index")):
        r = raw(cluster, addr, RequestCode.QUERY_CONSUME_QUEUE, {**fields, **change})
        assert r.code == ResponseCode.INVALID_PARAMETER and word in r.remark


def _props(text: bytes) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.decode().splitlines() if line)


def test_broker_config_get_and_runtime_update_persist(tmp_path: Path) -> None:
    with EmbeddedCluster(tmp_path, brokers=1) as c, Admin(c.namesrv) as admin:
        addr = c.brokers[0].address
        resp = raw(c, addr, RequestCode.GET_BROKER_CONFIG)
        props = _props(resp.body)
        assert props["brokerName"] == "broker-a" and props["brokerPermission"] == "6"
        assert props["diskMaxUsedSpaceRatio"] == "100" and props["fileReservedTime"] == "72"  # TEST_MIN_STORE
        assert props["flushDiskType"] == "ASYNC_FLUSH" and "storePathRootDir" in props
        assert json.loads(resp.ext_fields["version"])["counter"] == 0
        assert admin.broker_config("broker-a") == props
        admin.update_broker_config("broker-a", {"diskMaxUsedSpaceRatio": 80,
                                                "file_reserved_time_hours": 48})
        store_cfg = c.brokers[0].config.store
        assert (store_cfg.disk_max_used_space_ratio, store_cfg.file_reserved_time_hours) == (0.8, 48)
        admin.create_topic("PermTopic", read_queue_nums=1, write_queue_nums=1)
        admin.update_broker_config("broker-a", {"brokerPermission": 4})
        header = SendMessageRequestHeader("p", "PermTopic", "TBW102", 1, 0, 0, 0, 0)
        r = raw(c, addr, RequestCode.SEND_MESSAGE, header.to_ext_fields(), b"x")
        assert r.code == ResponseCode.NO_PERMISSION
        route = admin.topic_route("PermTopic")
        assert all(q.perm & 2 == 0 for q in route.queue_datas)  # re-registered read-only
        for bad, word in (({"noSuchSetting": "1"}, "unknown setting"),
                          ({"listenPort": "1"}, "cannot change while the broker runs"),
                          ({"brokerPermission": "7"}, "broker_permission"),
                          ({"diskMaxUsedSpaceRatio": "250"}, "disk_max_used_space_ratio")):
            with pytest.raises(BrokerError) as e:
                admin.update_broker_config("broker-a", bad)
            assert e.value.code == ResponseCode.INVALID_PARAMETER and word in e.value.remark
        r = raw(c, addr, RequestCode.UPDATE_BROKER_CONFIG, body=b"a=\\u12")
        assert r.code == ResponseCode.INVALID_PARAMETER
        overlay = (tmp_path / "broker-a" / "config" / "broker_runtime.toml").read_text()
        assert "broker_permission = 4" in overlay and "disk_max_used_space_ratio = 0.8" in overlay
        c.stop_broker(0)
        restarted: Any = c.start_broker(0)
        assert restarted.config.broker_permission == 4
        assert restarted.config.store.file_reserved_time_hours == 48
        assert _props(raw(c, restarted.address, RequestCode.GET_BROKER_CONFIG).body)[
            "brokerPermission"] == "4"
        admin.update_broker_config("broker-a", {"brokerPermission": 6})
        assert raw(c, restarted.address, RequestCode.SEND_MESSAGE, header.to_ext_fields(),
                   b"x").code == ResponseCode.SUCCESS
        assert all(q.perm & 2 for q in admin.topic_route("PermTopic").queue_datas)


def test_operations_doc_example_runs() -> None:
    """docs/operations.md's example, as written (it starts its own embedded cluster)."""
    import subprocess
    import sys

    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    [code] = re.findall(r"```python\n(.*?)```", text, re.S)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].endswith(" 3.0']") and 'topic="DemoTopic"' in lines[0]
    assert lines[1:] == ["3 True", "03"]


def test_running_info_is_asked_of_the_client(cluster: EmbeddedCluster, admin: Admin) -> None:
    import time as _time

    from orbitmq import ConsumeResult, PushConsumer

    consumer = PushConsumer("running-group", namesrv=cluster.namesrv)

    @consumer.subscribe(TOPIC, "*")
    def on_messages(messages: Any, context: Any) -> ConsumeResult:
        return ConsumeResult.SUCCESS

    consumer.start()
    try:
        deadline = _time.monotonic() + 30
        while not admin.consumer_connections("running-group").connections:
            assert _time.monotonic() < deadline, "the consumer never registered"
            _time.sleep(0.05)
        [conn] = admin.consumer_connections("running-group").connections
        info = admin.consumer_running_info("running-group", conn.client_id)
        assert {"properties", "subscriptionSet", "mqTable", "statusTable"} <= set(info)
        assert info["properties"]["consumerGroup"] == "running-group"
        with pytest.raises(BrokerError) as gone:
            admin.consumer_running_info("running-group", "no-such-client")
        assert gone.value.code == ResponseCode.CONSUMER_NOT_ONLINE
    finally:
        consumer.shutdown()
