"""Registration with every name server: at start, right after a topic appears, and unregistration
at stop; a name server that is down does not hold the others up."""

from __future__ import annotations

import dataclasses
import logging
import socket
import time
from pathlib import Path

import pytest
from test_broker_support import BrokerHarness, broker_config

from orbitmq.assembly import build_broker
from orbitmq.config import BrokerRole, NamesrvConfig
from orbitmq.errors import BrokerError
from orbitmq.namesrv import NameServer
from orbitmq.protocol.bodies import QueueData, TopicRouteData
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.transport import LoopThread, RemotingClient


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _route(h: BrokerHarness, ns: NameServer, topic: str) -> RemotingCommand:
    cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return h.call(h.client.invoke(ns.address, cmd, 5))


def _wait_route(h: BrokerHarness, ns: NameServer, topic: str, present: bool = True,
                timeout: float = 5.0) -> RemotingCommand:
    deadline = time.monotonic() + timeout
    while True:
        r = _route(h, ns, topic)
        if (r.code == ResponseCode.SUCCESS) == present:
            return r
        assert time.monotonic() < deadline, f"route of {topic} present={not present} on {ns.address}"
        time.sleep(0.01)


class _Cluster:
    """Name servers and one broker, all on the harness's loop."""

    def __init__(self, tmp: Path, n_namesrv: int = 2, dead_namesrv: bool = False, **broker_kw) -> None:
        self.boot = LoopThread("namesrv-test")
        self.namesrvs = [NameServer(NamesrvConfig(listen_port=0)) for _ in range(n_namesrv)]
        for ns in self.namesrvs:
            self.boot.call(ns.start(), 10)
        addrs = [ns.address for ns in self.namesrvs]
        if dead_namesrv:
            addrs.insert(0, f"127.0.0.1:{_free_port()}")
        self.h = BrokerHarness(broker_config(tmp, namesrv_addr=";".join(addrs),
                                             register_broker_interval_ms=60_000, **broker_kw))

    def close(self) -> None:
        try:
            self.h.close()
        finally:
            for ns in self.namesrvs:
                self.boot.call(ns.stop(), 10)
            self.boot.stop()


def test_registers_with_every_namesrv_and_auto_created_topics_appear_promptly(tmp_path: Path) -> None:
    c = _Cluster(tmp_path, default_topic_queue_nums=3)
    h = c.h
    try:
        for ns in c.namesrvs:
            r = _wait_route(h, ns, "TBW102")
            route = TopicRouteData.from_json(r.body)
            assert route.queue_datas[0].perm == 7 and route.queue_datas[0].write_queue_nums == 3
            assert route.broker_datas[0].broker_addrs == {0: h.addr}
            assert _route(h, ns, "FreshTopic").code == ResponseCode.TOPIC_NOT_EXIST
        started = time.monotonic()
        r = h.send_ok("FreshTopic", b"hello")  # the client asks for 4 queues, TBW102 has 3
        for ns in c.namesrvs:  # answered once registered: no waiting for the route
            r = _route(h, ns, "FreshTopic")
            assert r.code == ResponseCode.SUCCESS, r.remark
            q = TopicRouteData.from_json(r.body).queue_datas[0]
            assert (q.read_queue_nums, q.write_queue_nums, q.perm) == (3, 3, 6)
        assert time.monotonic() - started < 2  # not the 60 s registration interval
        h.send_ok("FreshTopic", b"again")  # an existing topic: no registration to wait for
        # one whole registration at start (the interval is 60 s), then the new topic alone,
        # each to every name server (no whole table per topic)
        assert h.broker.registrar.registrations == len(c.namesrvs)
        assert h.broker.registrar.topic_registrations == len(c.namesrvs)
        for ns in c.namesrvs:
            assert ns.topic_registration.counts["broker"] == 1
            assert ns.topic_registration.counts["topic"] == 1
    finally:
        c.close()


def test_stop_unregisters_and_a_dead_namesrv_does_not_block(tmp_path: Path) -> None:
    c = _Cluster(tmp_path, n_namesrv=1, dead_namesrv=True)
    h, ns = c.h, c.namesrvs[0]
    try:
        _wait_route(h, ns, "TBW102")
        assert h.broker.registrar.namesrvs[0] != ns.address  # the dead one comes first
        h.call(h.broker.stop())
        observer = c.boot
        cli = RemotingClient()
        try:
            cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
            r = observer.call(cli.invoke(ns.address, cmd, 5), 10)
            assert r.code == ResponseCode.TOPIC_NOT_EXIST
        finally:
            observer.call(cli.close(), 10)
    finally:
        c.close()


def test_a_second_broker_with_the_same_name_and_id_is_refused(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """Issue 13: a second broker keeping broker_name "broker-a" took the route of the first,
    silently. Now its start fails with the name server's refusal, the route keeps the first,
    and the name server logs the refusal; the first broker restarting on its address is fine."""
    caplog.set_level(logging.WARNING)
    c = _Cluster(tmp_path / "a", n_namesrv=1)
    h, ns = c.h, c.namesrvs[0]
    try:
        _wait_route(h, ns, "TBW102")
        second = build_broker(broker_config(tmp_path / "b", namesrv_addr=ns.address))
        with pytest.raises(BrokerError) as refused:
            h.call(second.start())
        assert refused.value.code == ResponseCode.ILLEGAL_OPERATION
        assert "broker-a id 0" in refused.value.remark and h.addr in refused.value.remark
        assert not second.store.running  # it closed what it had opened
        assert any("registration refused" in r.getMessage() and r.levelno >= logging.WARNING
                   for r in caplog.records if r.name.startswith("orbitmq.namesrv"))
        route = TopicRouteData.from_json(_wait_route(h, ns, "TBW102").body)
        assert route.broker_datas[0].broker_addrs == {0: h.addr}
        # another id of the same name (a slave) is another identity
        slave = build_broker(broker_config(tmp_path / "s", namesrv_addr=ns.address, broker_id=1,
                                               broker_role=BrokerRole.SLAVE))
        h.call(slave.start())
        h.call(slave.stop())
        # the holder restarts on its own address: registered again
        port = h.port
        h.config = dataclasses.replace(h.config, listen_port=port, ha_listen_port=0)
        h.restart()
        route = TopicRouteData.from_json(_wait_route(h, ns, "TBW102").body)
        assert route.broker_datas[0].broker_addrs == {0: f"127.0.0.1:{port}"}
    finally:
        c.close()


def test_a_refusal_after_start_is_logged_as_an_error(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """The second broker registered first with a name server the first one did not know yet
    (here: a name server restarted empty, then the other broker came): the first one's next
    rounds are refused and logged as errors; it keeps serving."""
    c = _Cluster(tmp_path / "a", n_namesrv=1)
    h, ns = c.h, c.namesrvs[0]
    try:
        _wait_route(h, ns, "TBW102")
        ns.routes.remove_broker_addr(h.addr)  # as after a name server restart
        other = ns.routes.register_broker(cluster="DefaultCluster", broker_addr="127.0.0.1:1",
                                          broker_name="broker-a", broker_id=0, ha_server_addr="",
                                          topics={}, now_ms=int(time.time() * 1000))
        assert other.master_addr == ""
        caplog.set_level(logging.ERROR, logger="orbitmq.broker")
        assert h.call(h.broker.registrar.register_all()) == 0
        assert any("refused broker broker-a id 0" in r.getMessage() for r in caplog.records
                   if r.levelno == logging.ERROR)
        h.send_ok("StillServing", b"x")
    finally:
        c.close()


def test_a_namesrv_that_lost_the_broker_gets_the_whole_table_at_once(tmp_path: Path) -> None:
    """Issue 38: a topic change goes alone, carrying the data version move; a name server
    that does not hold the base (here: it forgot the broker, as after a restart) refuses the
    move, and the broker sends it the whole table in the same round, without waiting for the
    periodic check (60 s here)."""
    c = _Cluster(tmp_path, n_namesrv=2)
    h = c.h
    lost, kept = c.namesrvs
    try:
        for ns in c.namesrvs:
            _wait_route(h, ns, "TBW102")
        lost.routes.remove_broker_addr(h.addr)
        assert _route(h, lost, "TBW102").code == ResponseCode.TOPIC_NOT_EXIST
        h.send_ok("AfterTheLoss", b"x")
        for ns in c.namesrvs:
            _wait_route(h, ns, "AfterTheLoss")
        _wait_route(h, lost, "TBW102")  # the whole table again
        assert lost.topic_registration.counts["broker"] == 2
        assert kept.topic_registration.counts["broker"] == 1  # it followed: one topic only
        assert kept.topic_registration.counts["topic"] == 1
        # the periodic check finds both current: nothing more is sent
        assert h.call(h.broker.registrar.check_versions()) == 0
        assert lost.topic_registration.counts["version_changed"] == 0
        assert kept.topic_registration.counts["version_query"] == 1
    finally:
        c.close()


def test_access_control_on_topics_still_register_one_at_a_time(tmp_path: Path) -> None:
    """With authentication on, the broker's single-topic registrations and version checks
    are signed with its inner credentials and accepted (anonymous ones are refused: see
    test_auth_sweep, which sends every code the name server serves)."""
    from auth_support import ROOT, auth_cluster

    from orbitmq.client import Admin

    with auth_cluster(tmp_path, with_alice=False) as cluster:
        ns = cluster.namesrv_server
        broker = cluster.brokers[0]
        with Admin(cluster.namesrv, credentials=ROOT) as admin:
            admin.create_topic("SignedTopic", read_queue_nums=2, write_queue_nums=2)
        deadline = time.monotonic() + 5
        while (found := ns.routes.topic_route("SignedTopic")) is None:
            assert time.monotonic() < deadline, "SignedTopic not routed"
            time.sleep(0.01)
        assert found[0]["broker-a"].write_queue_nums == 2
        assert ns.topic_registration.counts["broker"] == 1
        assert ns.topic_registration.counts["topic"] >= 3  # the cluster's two topics and this
        assert cluster.call(broker.registrar.check_versions()) == 0
        assert ns.topic_registration.counts["version_query"] == 1
        assert ns.topic_registration.counts["version_changed"] == 0
        # anonymous: refused before any handler runs (nothing counted, nothing recorded)
        body = TopicRouteData(queue_datas=[QueueData("broker-a", 1, 1, 6)]).to_json()
        fields = {"brokerName": "broker-a", "brokerAddr": broker.address,
                  "clusterName": "DefaultCluster", "brokerId": "0"}
        anonymous = RemotingClient()
        try:
            for cmd in (RemotingCommand.request(RequestCode.REGISTER_TOPIC_IN_NAMESRV,
                                                {"topic": "Hijacked"}, body),
                        RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, fields,
                                                b'{"timestamp":0,"counter":0}')):
                r = cluster.call(anonymous.invoke(cluster.namesrv, cmd, 5))
                assert r.code == ResponseCode.NO_PERMISSION, (r.code, r.remark)
        finally:
            cluster.call(anonymous.close())
        assert ns.routes.topic_route("Hijacked") is None
        assert ns.topic_registration.counts["version_query"] == 1


def test_a_namesrv_without_single_topic_registration_gets_the_whole_table(tmp_path: Path) -> None:
    """A name server from before issue 38 answers REGISTER_TOPIC_IN_NAMESRV NOT_SUPPORTED: the
    broker sends it the whole table at once, as it did after every change before."""
    c = _Cluster(tmp_path, n_namesrv=1)
    h, ns = c.h, c.namesrvs[0]
    try:
        _wait_route(h, ns, "TBW102")
        del ns.server._handlers[RequestCode.REGISTER_TOPIC_IN_NAMESRV]
        h.send_ok("ForAnOldNamesrv", b"x")
        _wait_route(h, ns, "ForAnOldNamesrv")
        assert ns.topic_registration.counts["broker"] == 2
        assert ns.topic_registration.counts["topic"] == 0
    finally:
        c.close()


def test_a_table_past_the_plain_bound_registers_compressed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A plain whole-table body past PLAIN_REGISTER_BODY_MAX_BYTES (12 MiB: about 110,000
    topics, under a name server's 16 MiB frames) goes compressed, whatever compressed_register
    says; here the bound is lowered so that the broker's own topics pass it."""
    from orbitmq.broker import register_service

    monkeypatch.setattr(register_service, "PLAIN_REGISTER_BODY_MAX_BYTES", 200)
    with caplog.at_level(logging.INFO, logger="orbitmq.broker.register_service"):
        c = _Cluster(tmp_path, n_namesrv=1)
        try:
            route = TopicRouteData.from_json(_wait_route(c.h, c.namesrvs[0], "TBW102").body)
            assert route.broker_datas[0].broker_addrs == {0: c.h.addr}
            assert c.h.broker.registrar.registrations == 1
        finally:
            c.close()
    assert any("compressed: the plain table is" in r.getMessage() for r in caplog.records)
