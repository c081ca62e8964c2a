"""Registration with every name server: at start, right after a topic appears, and unregistration
at stop; a name server that is down does not hold the others up."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from test_broker_support import BrokerHarness, broker_config

from orbitmq.config import NamesrvConfig
from orbitmq.namesrv import NameServer
from orbitmq.protocol.bodies import TopicRouteData
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
        # one round at start and one for the new topic (the interval is 60 s), each to every
        # name server
        assert h.broker.registrar.registrations == 2 * len(c.namesrvs)
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
