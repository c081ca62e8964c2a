"""A master partitioned from etcd and from its slaves while producers still reach it (issue 18
acceptance), in network namespaces the test makes (testing/netns.py): etcd, the name server and
three brokers each in its own namespace, the producers in the test's own.

After the new master is elected no acknowledged send is lost (everything is pulled from the new
master after the heal), and a checker over the recorded history (which epoch, hence which
broker, acknowledged each send, and when the answer came) finds no two epochs acknowledging at
overlapping times beyond the fencing margin.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from test_failover_kill import read_all  # the same directory (pytest puts it on the path)

from orbitmq import Message, Producer, SendStatus
from orbitmq.errors import OrbitMQError
from orbitmq.testing.etcd import EtcdCluster, etcd_binary
from orbitmq.testing.failover_history import Ack, check_history, store_address
from orbitmq.testing.failover_set import FailoverSet, wait_for
from orbitmq.testing.netns import NetLab, netns_problem
from orbitmq.testing.process import ServerProcess

pytestmark = [
    pytest.mark.skipif(etcd_binary() is None,
                       reason="etcd is not installed (Debian: apt-get install etcd-server)"),
    pytest.mark.skipif(netns_problem() is not None, reason=str(netns_problem())),
]

MARGIN_S = 0.5


def test_a_partitioned_master_is_fenced_and_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    with NetLab(["etcd", "ns", "b1", "b2", "b3"]) as lab, \
            EtcdCluster(1, hosts=[lab.addr["etcd"]], prefixes=[lab.prefix["etcd"]],
                        root=tmp_path) as etcd:
        namesrv = ServerProcess(["namesrv", "--listen-host", lab.addr["ns"], "--port", "9876",
                                 "--allow-anonymous", "true"],
                                prefix=lab.prefix["ns"])
        namesrv.wait_ready("namesrv", timeout=60)
        ns_addr = f"{lab.addr['ns']}:9876"
        hosts = {m: lab.addr[f"b{m}"] for m in (1, 2, 3)}
        prefixes = {m: lab.prefix[f"b{m}"] for m in (1, 2, 3)}
        try:
            with FailoverSet(tmp_path / "brokers", etcd.endpoints, hosts=hosts, prefixes=prefixes,
                             namesrv=ns_addr, fence_margin_ms=int(MARGIN_S * 1000)) as brokers:
                run_partition(lab, brokers)
        finally:
            namesrv.stop()


def run_partition(lab: NetLab, brokers: FailoverSet) -> None:
    first = brokers.wait_master(in_sync=3, timeout=60)
    old = f"b{first.member}"
    acked: dict[str, tuple[bytes, int]] = {}
    acks: list[Ack] = []
    lock = threading.Lock()
    stop = threading.Event()

    def produce(index: int) -> None:
        with Producer(f"part-{index}", namesrv=brokers.namesrv, send_timeout=3.0) as producer:
            n = 0
            while not stop.is_set():
                body = b"p%d-%d" % (index, n)
                n += 1
                try:
                    result = producer.send(Message("Partition", body))
                except OrbitMQError:
                    time.sleep(0.05)
                    continue
                if result.status is SendStatus.OK:
                    assert result.master_epoch is not None
                    with lock:
                        acked[result.msg_id] = (body, result.master_epoch)
                        acks.append(Ack(result.master_epoch, time.monotonic(),
                                        store_address(result.offset_msg_id)))

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(acked) >= 300, "300 sends acknowledged", 60)
        lab.cut(old, "etcd")  # the producers (root) and the name server still reach it
        for other in (1, 2, 3):
            if other != first.member:
                lab.cut(old, f"b{other}")
        second = brokers.wait_master(epoch_above=first.epoch, timeout=30)

        def acked_by_second() -> int:
            with lock:
                return sum(1 for _, e in acked.values() if e == second.epoch)
        wait_for(lambda: acked_by_second() >= 200, "the new master acknowledges", 60)
        lab.heal()
        brokers.wait_master(in_sync=3, epoch_above=first.epoch, timeout=60)
        wait_for(lambda: acked_by_second() >= 400, "sends go on after the heal", 60)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    spans = check_history(acks, MARGIN_S)
    assert second.member != first.member and len(spans) >= 2
    stored = read_all(brokers.namesrv, "Partition", "partition-reader")
    lost = [msg_id for msg_id in acked if msg_id not in stored]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged sends lost"
    print(f"partition: acked={len(acked)} epochs={ {e: round(s.last - s.first, 2) for e, s in spans.items()} }")
