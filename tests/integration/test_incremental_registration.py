"""Incremental registration (issue 38 item 2) between real processes: ``orbitmq namesrv`` and
``orbitmq broker`` as child processes, the SDK's admin client, the name server's own counters
scraped from its Prometheus endpoint.

- A topic created on the broker reaches the name server as one REGISTER_TOPIC_IN_NAMESRV, not as
  a REGISTER_BROKER carrying every topic; a topic deleted leaves it as one DELETE.
- The periodic round asks the name server its data version (QUERY_DATA_VERSION) and sends no
  whole table while the name server is current; those queries keep the broker alive.
- A name server killed and started again on its port gets the whole table at the next periodic
  round, and routes every topic again.
- The old whole registration still works (a RocketMQ 4.x broker sends nothing else), and a
  RocketMQ 5 broker's bare REGISTER_TOPIC (topic only) is honoured.
- Malformed requests are refused with INVALID_PARAMETER and a remark naming the field.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from orbitmq.client import Admin
from orbitmq.config import NamesrvConfig
from orbitmq.namesrv import NameServer
from orbitmq.protocol.bodies import (
    DataVersion,
    QueueData,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import RegisterBrokerRequestHeader
from orbitmq.testing.process import HOST_DISK_IGNORED, ServerProcess
from orbitmq.transport import LoopThread, RemotingClient

INTERVAL_MS = 1000  # the broker's periodic round, short so that a test sees several


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _namesrv(port: int) -> tuple[ServerProcess, dict[str, str]]:
    child = ServerProcess(["namesrv", "--port", str(port), "--metrics-exporter-type", "PROM",
                           "--metrics-prom-exporter-port", "0"])
    return child, child.wait_ready("namesrv", "metrics")


def _counts(metrics_addr: str) -> dict[str, float]:
    """orbitmq_namesrv_registrations_total by kind."""
    with urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "orbitmq_namesrv_registrations_total":
                out[s.labels["kind"]] = s.value
    return out


def _wait(pred: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


class _Raw:
    """A plain remoting client on its own loop, for routes and hand-made requests."""

    def __init__(self) -> None:
        self.loop = LoopThread("incremental-test")
        self.client = RemotingClient()

    def invoke(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        return self.loop.call(self.client.invoke(addr, cmd, 5), 10)

    def route(self, addr: str, topic: str) -> TopicRouteData | None:
        r = self.invoke(addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                      {"topic": topic}))
        return TopicRouteData.from_json(r.body) if r.code == ResponseCode.SUCCESS else None

    def close(self) -> None:
        self.loop.call(self.client.close(), 10)
        self.loop.stop()


@pytest.fixture
def raw() -> Iterator[_Raw]:
    r = _Raw()
    try:
        yield r
    finally:
        r.close()


def test_topics_go_one_at_a_time_and_a_restarted_namesrv_gets_the_whole_table(
        tmp_path: Path, raw: _Raw) -> None:
    port = _free_port()
    ns, ns_addrs = _namesrv(port)
    broker = None
    try:
        broker = ServerProcess(["broker", "--namesrv", ns_addrs["namesrv"], "--port", "0",
                                "--store", str(tmp_path / "store"), "--ha-listen-port", "0",
                                "--register-broker-interval-ms", str(INTERVAL_MS),
                                *HOST_DISK_IGNORED])
        broker.wait_ready("broker")
        metrics = ns_addrs["metrics"]
        _wait(lambda: raw.route(ns_addrs["namesrv"], "TBW102") is not None, "broker registered")
        assert _counts(metrics)["broker"] == 1  # the start
        with Admin(ns_addrs["namesrv"]) as admin:
            admin.create_topic("IncTopicA", read_queue_nums=8, write_queue_nums=8)
            admin.create_topic("IncTopicB", read_queue_nums=4, write_queue_nums=4)
        _wait(lambda: raw.route(ns_addrs["namesrv"], "IncTopicB") is not None, "topic routed")
        route = raw.route(ns_addrs["namesrv"], "IncTopicA")
        assert route is not None
        assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
            (8, 8, 6)]
        # a few periodic rounds: version checks, and still no second whole table
        _wait(lambda: _counts(metrics)["version_query"] >= 3, "periodic version checks")
        counts = _counts(metrics)
        assert counts["broker"] == 1, counts
        assert counts["topic"] >= 2 and counts["version_changed"] == 0, counts

        # kill -9 the name server and start a new one on the same port: empty, it answers the
        # next version check "changed" and gets the whole table
        ns.kill()
        ns, ns_addrs = _namesrv(port)
        _wait(lambda: raw.route(ns_addrs["namesrv"], "IncTopicA") is not None,
              "whole table after the restart", timeout=INTERVAL_MS / 1000 * 10)
        assert raw.route(ns_addrs["namesrv"], "IncTopicB") is not None
        counts = _counts(ns_addrs["metrics"])
        assert counts["broker"] == 1 and counts["version_changed"] >= 1, counts

        # a deletion goes as one DELETE of this broker's queues of the topic (the admin client
        # sends the name server one of its own: two in all)
        before = _counts(ns_addrs["metrics"])
        with Admin(ns_addrs["namesrv"]) as admin:
            admin.delete_topic("IncTopicB")
        _wait(lambda: _counts(ns_addrs["metrics"])["topic_delete"] >= before["topic_delete"] + 2,
              "the broker's own deletion")
        assert raw.route(ns_addrs["namesrv"], "IncTopicB") is None
        assert _counts(ns_addrs["metrics"])["broker"] == 1
        assert broker.stop() == 0, broker.output()[-3000:]
        assert "Traceback" not in broker.output()
    finally:
        if broker is not None:
            broker.kill()
        ns.kill()


def _register_cmd(name: str, addr: str, topics: list[str], version: DataVersion) -> RemotingCommand:
    header = RegisterBrokerRequestHeader(broker_name=name, broker_addr=addr,
                                         cluster_name="DefaultCluster", ha_server_addr="",
                                         broker_id=0)
    wrapper = TopicConfigSerializeWrapper({t: TopicConfig(t, 8, 8) for t in topics}, version)
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(),
                                   RegisterBrokerBody(wrapper).to_json())


def _query(name: str, addr: str, version: DataVersion) -> RemotingCommand:
    fields = {"brokerName": name, "brokerAddr": addr, "clusterName": "DefaultCluster",
              "brokerId": "0"}
    return RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, fields, version.to_json())


@pytest.fixture
def namesrv(raw: _Raw) -> Iterator[NameServer]:
    ns = NameServer(NamesrvConfig(listen_port=0))
    raw.loop.call(ns.start(), 10)
    try:
        yield ns
    finally:
        raw.loop.call(ns.stop(), 10)


def test_old_whole_registration_rocketmq5_single_topic_and_version_checks(
        raw: _Raw, namesrv: NameServer) -> None:
    addr = namesrv.address
    v1 = DataVersion(1_700_000_000_000, 5)
    r = raw.invoke(addr, _register_cmd("broker-x", "127.0.0.1:30911", ["Old1", "Old2"], v1))
    assert r.code == ResponseCode.SUCCESS
    assert raw.route(addr, "Old1") is not None and raw.route(addr, "Old2") is not None
    # the version held is the one registered; another one is "changed"
    r = raw.invoke(addr, _query("broker-x", "127.0.0.1:30911", v1))
    assert (r.code, r.ext_fields["changed"]) == (ResponseCode.SUCCESS, "false")
    r = raw.invoke(addr, _query("broker-x", "127.0.0.1:30911", DataVersion(v1.timestamp, 6)))
    assert r.ext_fields["changed"] == "true"
    r = raw.invoke(addr, _query("broker-y", "127.0.0.1:40911", v1))  # never registered
    assert r.ext_fields["changed"] == "true"
    # RocketMQ 5's registerSingleTopicAll: topic only, the queue data naming the broker
    body = TopicRouteData(queue_datas=[QueueData("broker-x", 2, 2, 6)]).to_json()
    r = raw.invoke(addr, RemotingCommand.request(RequestCode.REGISTER_TOPIC_IN_NAMESRV,
                                                 {"topic": "Rmq5Topic"}, body))
    assert r.code == ResponseCode.SUCCESS and "versionAccepted" not in r.ext_fields
    route = raw.route(addr, "Rmq5Topic")
    assert route is not None and route.queue_datas[0].write_queue_nums == 2
    # an OrbitMQ broker's version move: taken from the version held, refused from another
    ident = {"brokerName": "broker-x", "brokerAddr": "127.0.0.1:30911",
             "clusterName": "DefaultCluster", "brokerId": "0"}
    move = {"baseVersionTimestamp": str(v1.timestamp), "baseVersionCounter": "5",
            "versionTimestamp": str(v1.timestamp), "versionCounter": "6"}
    body = TopicRouteData(queue_datas=[QueueData("broker-x", 8, 8, 6)]).to_json()
    r = raw.invoke(addr, RemotingCommand.request(RequestCode.REGISTER_TOPIC_IN_NAMESRV,
                                                 {"topic": "New1", **ident, **move}, body))
    assert r.ext_fields["versionAccepted"] == "true"
    r = raw.invoke(addr, _query("broker-x", "127.0.0.1:30911", DataVersion(v1.timestamp, 6)))
    assert r.ext_fields["changed"] == "false"
    r = raw.invoke(addr, RemotingCommand.request(RequestCode.REGISTER_TOPIC_IN_NAMESRV,
                                                 {"topic": "New2", **ident, **move}, body))
    assert r.ext_fields["versionAccepted"] == "false"  # it holds counter 6 now, not 5
    assert namesrv.topic_registration.counts["broker"] == 1
    assert namesrv.topic_registration.counts["topic"] == 3
    # one broker's deletion leaves the other brokers' queues of the topic
    raw.invoke(addr, _register_cmd("broker-z", "127.0.0.1:50911", ["Old1"], v1))
    r = raw.invoke(addr, RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV,
                                                 {"topic": "Old1", **ident}))
    assert r.code == ResponseCode.SUCCESS
    route = raw.route(addr, "Old1")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["broker-z"]


@pytest.mark.parametrize(("code", "fields", "body", "named"), [
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "bad topic!"},
     TopicRouteData(queue_datas=[QueueData("broker-x", 1, 1, 6)]).to_json(), "topic"),
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T" * 128},
     TopicRouteData(queue_datas=[QueueData("broker-x", 1, 1, 6)]).to_json(), "topic"),
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "Fine"}, b"", "body"),
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "Fine"},
     TopicRouteData(queue_datas=[QueueData("broker-x", 5000, 1, 6)]).to_json(), "readQueueNums"),
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "Fine"},
     b'{"queueDatas":[{"brokerName":"b","readQueueNums":1,"writeQueueNums":1,"perm":64}]}',
     "perm"),
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "Fine", "brokerName": "broker-x",
                                             "brokerAddr": "127.0.0.1:1", "versionCounter": "3"},
     TopicRouteData(queue_datas=[QueueData("broker-x", 1, 1, 6)]).to_json(), "versionCounter"),
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "Fine", "brokerName": "broker-x"},
     TopicRouteData(queue_datas=[QueueData("broker-other", 1, 1, 6)]).to_json(), "brokerName"),
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "Fine", "brokerId": "-1"},
     TopicRouteData(queue_datas=[QueueData("broker-x", 1, 1, 6)]).to_json(), "brokerId"),
    (RequestCode.QUERY_DATA_VERSION, {"brokerName": "b", "brokerAddr": "a",
                                      "clusterName": "c", "brokerId": "0"}, b"", "DataVersion"),
    (RequestCode.QUERY_DATA_VERSION, {"brokerName": "b", "brokerAddr": "a", "clusterName": "c"},
     DataVersion(1, 1).to_json(), "brokerId"),
    (RequestCode.QUERY_DATA_VERSION, {"brokerName": "b", "brokerAddr": "a", "clusterName": "c",
                                      "brokerId": "0"}, b'{"timestamp":"x","counter":1}',
     "timestamp"),
    (RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "Fine", "baseVersionCounter": "1"}, b"",
     "baseVersionTimestamp"),
])
def test_malformed_requests_are_refused_naming_the_field(
        raw: _Raw, namesrv: NameServer, code: int, fields: dict[str, str], body: bytes,
        named: str) -> None:
    r = raw.invoke(namesrv.address, RemotingCommand.request(code, fields, body))
    assert r.code == ResponseCode.INVALID_PARAMETER, r.remark
    assert named in (r.remark or ""), r.remark
    assert namesrv.routes.topics() == []  # nothing recorded
