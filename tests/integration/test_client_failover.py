"""Brokers that stop: producers fail over, routes forget the broker, committed offsets survive.

One broker runs in this process (on a loop thread); the one that dies runs in a child process and
is killed with SIGKILL, so nothing of it says goodbye: the name server learns it from the closed
connection (or, failing that, from ``broker_expire_ms``, set small here, with brokers re-registering often
enough to stay alive).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from orbitmq.assembly import build_broker
from orbitmq.client import Admin, Producer, PullConsumer, SendStatus
from orbitmq.config import BrokerConfig, NamesrvConfig, StoreConfig
from orbitmq.errors import TimeoutError
from orbitmq.namesrv import NameServer
from orbitmq.protocol.message import Message
from orbitmq.testing.waits import EVENT_WAIT_S
from orbitmq.transport.loop import LoopThread

MiB = 1024 * 1024
TOPIC = "FailoverTopic"

CHILD_BROKER = """
import asyncio, sys
from orbitmq.assembly import build_broker
from orbitmq.config import BrokerConfig, StoreConfig

async def main():
    name, namesrv, path = sys.argv[1:4]
    broker = build_broker(BrokerConfig(
        broker_name=name, listen_port=0, grpc_listen_port=0, namesrv_addr=namesrv,
        register_broker_interval_ms=200,
        store=StoreConfig(store_path=path, mapped_file_size_commitlog=8 * 1024 * 1024)))
    await broker.start()
    print("READY", broker.address, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def wait_until(predicate: Callable[[], object], timeout: float = EVENT_WAIT_S,
               what: str = "") -> None:
    """Poll ``predicate`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.01)


def store_config(path: str) -> StoreConfig:
    return StoreConfig(store_path=path, mapped_file_size_commitlog=8 * MiB)


@pytest.fixture
def namesrv() -> Iterator[tuple[LoopThread, NameServer]]:
    loop = LoopThread("test-servers")
    ns = NameServer(NamesrvConfig(listen_port=0, broker_expire_ms=1500,
                                  scan_not_active_broker_interval_ms=100))
    loop.call(ns.start())
    try:
        yield loop, ns
    finally:
        loop.call(ns.stop())
        loop.stop()


def start_child_broker(name: str, namesrv: str, path: str) -> subprocess.Popen[str]:
    """A broker in a child process; returns once it serves (bounded wait on its READY line)."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD_BROKER, name, namesrv, path],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("READY"):
        proc.kill()
        proc.wait(10)
        proc.stdout.close()
        raise AssertionError(f"child broker did not start: {line!r}")
    return proc


def route_brokers(ns: NameServer, topic: str) -> set[str]:
    found = ns.routes.topic_route(topic)
    return set(found[0]) if found else set()


@pytest.mark.parametrize("failure", ["killed", "hung"])
def test_producer_fails_over_when_a_broker_dies(namesrv, tmp_path, failure):
    """killed: SIGKILL, its connections close at once. hung: SIGSTOP, its connections stay open
    but nothing answers; the name server expires it after broker_expire_ms and the producer,
    after one timed-out attempt, keeps away from it."""
    loop, ns = namesrv
    broker_a = build_broker(BrokerConfig(broker_name="broker-a", listen_port=0, grpc_listen_port=0,
                                             namesrv_addr=ns.address,
                                             register_broker_interval_ms=200,
                                             store=store_config(str(tmp_path / "a"))))
    loop.call(broker_a.start())
    child = start_child_broker("broker-b", ns.address, str(tmp_path / "b"))
    try:
        wait_until(lambda: len(ns.routes.cluster_info()[0]) == 2, what="two brokers")
        with Admin(ns.address) as admin:
            assert admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4) == [
                "broker-a", "broker-b"]
        wait_until(lambda: route_brokers(ns, TOPIC) == {"broker-a", "broker-b"},
                   what="topic on both brokers")
        with Producer("failover-producer", ns.address, send_timeout=1.0) as producer:
            before = [producer.send(Message(TOPIC, b"before")) for _ in range(16)]
            assert {r.queue.broker_name for r in before} == {"broker-a", "broker-b"}

            os.kill(child.pid, signal.SIGKILL if failure == "killed" else signal.SIGSTOP)
            after, timeouts = [], 0
            for i in range(40):
                try:
                    after.append(producer.send(Message(TOPIC, f"after-{i}".encode())))
                except TimeoutError:
                    timeouts += 1
            assert timeouts == 0 if failure == "killed" else timeouts <= 1
            assert all(r.status is SendStatus.OK for r in after)
            assert {r.queue.broker_name for r in after} == {"broker-a"}

            wait_until(lambda: route_brokers(ns, TOPIC) == {"broker-a"}, what="route update")
            queues = producer.fetch_publish_queues(TOPIC)
            assert {q.broker_name for q in queues} == {"broker-a"}
        with PullConsumer("failover-consumer", ns.address) as consumer:
            assert {q.broker_name for q in consumer.fetch_queues(TOPIC)} == {"broker-a"}
    finally:
        child.kill()  # SIGKILL ends a stopped process too
        child.wait(10)
        assert child.stdout is not None
        child.stdout.close()
        loop.call(broker_a.stop())


def test_committed_offsets_survive_a_broker_restart(namesrv, tmp_path):
    loop, ns = namesrv
    broker = build_broker(BrokerConfig(listen_port=0, ha_listen_port=0, grpc_listen_port=0,
                                           namesrv_addr=ns.address,
                                           register_broker_interval_ms=200,
                                           store=store_config(str(tmp_path / "broker"))))
    loop.call(broker.start())
    port = int(broker.address.rpartition(":")[2])
    wait_until(lambda: ns.routes.cluster_info()[0], what="broker registration")
    try:
        with Admin(ns.address) as admin:
            admin.create_topic("Durable", read_queue_nums=4, write_queue_nums=4)
        wait_until(lambda: "Durable" in ns.routes.topics(), what="topic route")
        with Producer("durable-producer", ns.address) as producer:
            for i in range(20):
                producer.send(Message("Durable", f"{i}".encode()))
        with PullConsumer("durable-group", ns.address) as consumer:
            queues = consumer.fetch_queues("Durable")
            committed = {mq: i + 1 for i, mq in enumerate(queues)}
            for mq, offset in committed.items():
                consumer.update_offset(mq, offset)
            consumer.persist_offsets()

            loop.call(broker.stop())
            broker = build_broker(BrokerConfig(
                listen_port=port, ha_listen_port=0, grpc_listen_port=0,  # port + 1 may be taken
                namesrv_addr=ns.address, register_broker_interval_ms=200,
                store=store_config(str(tmp_path / "broker"))))
            loop.call(broker.start())
            # The same consumer reconnects on its own and reads what it committed before.
            assert {mq: consumer.fetch_offset(mq) for mq in queues} == committed
            assert sum(consumer.max_offset(mq) for mq in queues) == 20
        with PullConsumer("durable-group", ns.address) as fresh:
            fresh.fetch_queues("Durable")
            assert {mq: fresh.fetch_offset(mq) for mq in queues} == committed
    finally:
        loop.call(broker.stop())
