"""The official C++ client's PushConsumer (PyPI `rocketmq` 0.4.4) against `orbitmq standalone`:
concurrent and orderly, clustering and broadcasting, and a message it answers RECONSUME_LATER
coming back to it through CONSUMER_SEND_MSG_BACK, %RETRY% and the delay levels.

The servers of this module run with short delay levels, so a retry (level 3 + reconsume times)
comes back after about a second instead of ten. Broadcasting consumers start at the end of the
queue (no offset yet, RocketMQ's CONSUME_FROM_LAST_OFFSET), so probe messages are sent until
each consumer has seen one before the real messages go out; their topic has one queue, so a
consumer that saw a probe is pulling the queue the real messages land in.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from compat_support import (
    CppClient,
    OurClient,
    Outgoing,
    RawClient,
    RunningDriver,
    Servers,
    tail,
    unique,
    wait_for_default_route,
)

import orbitmq
from orbitmq.protocol.bodies import LockBatchRequestBody, LockBatchResponseBody, MessageQueue
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.testing import standalone_process

pytestmark = pytest.mark.compat

LEVELS = "1s 1s 1s 2s 2s 2s"
RETRY_LEVEL_MS = 1000  # level 3
SERVER_READY_TIMEOUT_S = 60.0
DELIVERY_WAIT_S = 30.0


@pytest.fixture(scope="module")
def servers(compat_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """Like conftest's, with short delay levels."""
    store = tmp_path_factory.mktemp("orbitmq-push-store")
    proc = standalone_process(str(store), "--message-delay-level", LEVELS)
    try:
        addrs = proc.wait_ready("namesrv", "broker", timeout=SERVER_READY_TIMEOUT_S)
        found = Servers(addrs["namesrv"], addrs["broker"], proc.output)
        wait_for_default_route(found)
        yield found
    finally:
        proc.stop()
        if proc.proc.stdout is not None:
            proc.proc.stdout.close()


def one_queue_topic(servers: Servers, prefix: str) -> str:
    topic = unique(prefix)
    with orbitmq.Admin(servers.namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
    return topic


def outgoing(topic: str, prefix: str, count: int) -> list[Outgoing]:
    return [Outgoing(topic, f"{prefix}-{i}".encode(), tags="TagA", keys=[f"{prefix}-key-{i}"])
            for i in range(count)]


def bodies_of(result: dict[str, Any]) -> list[bytes]:
    assert "start" not in result, f"the C++ push consumer did not start: {result['start']}"
    return [base64.b64decode(m["body_b64"]) for m in result["messages"]]


def wait_bodies(driver: RunningDriver, wanted: set[bytes], timeout: float = DELIVERY_WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not wanted <= {b for _, b in driver.received_so_far()}:
        assert time.monotonic() < deadline, (
            f"missing {sorted(wanted - {b for _, b in driver.received_so_far()})}")
        time.sleep(0.05)


def probe_until_pulling(ours: OurClient, topic: str, drivers: list[RunningDriver]) -> None:
    """Sends probes until every driver received one (it is then pulling the topic's queue)."""
    deadline = time.monotonic() + DELIVERY_WAIT_S
    for i in range(1000):
        ours.send(unique("CompatProbe"), [Outgoing(topic, f"probe-{i}".encode())])
        time.sleep(0.2)
        if all(any(b.startswith(b"probe-") for _, b in d.received_so_far()) for d in drivers):
            return
        assert time.monotonic() < deadline, "a broadcasting consumer never received a probe"


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
def test_clustering_push_consumer(cpp: CppClient, ours: OurClient, servers: Servers,
                                  orderly: bool) -> None:
    topic = one_queue_topic(servers, "CompatPushCluster")
    sent = outgoing(topic, "cluster", 8)
    ours.send(unique("CompatSdkProducer"), sent)
    push = cpp.start("push", group=unique("CompatPushGroup"), topic=topic, expect=8,
                     wait_s=DELIVERY_WAIT_S, orderly=orderly, message_model="CLUSTERING")
    got = bodies_of(push.result())
    if orderly:  # one queue, one consumer: exactly the order of the queue
        assert got == [o.body for o in sent]
    else:
        assert sorted(got) == sorted(o.body for o in sent)


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
def test_broadcasting_push_consumers_each_get_every_message(
        cpp: CppClient, ours: OurClient, servers: Servers, tmp_path: Path, orderly: bool) -> None:
    topic = one_queue_topic(servers, "CompatPushBroadcast")
    group = unique("CompatBroadcastGroup")
    stop = tmp_path / "stop"
    common = {"group": group, "topic": topic, "wait_s": 50, "stop_file": str(stop),
              "orderly": orderly, "message_model": "BROADCASTING"}
    drivers = [cpp.start("push", timeout=70, **common) for _ in range(2)]
    for d in drivers:
        d.wait_event("started")
    probe_until_pulling(ours, topic, drivers)
    sent = outgoing(topic, "broadcast", 6)
    ours.send(unique("CompatSdkProducer"), sent)
    for d in drivers:
        wait_bodies(d, {o.body for o in sent})
    stop.touch()
    for d in drivers:
        real = [b for b in bodies_of(d.result()) if not b.startswith(b"probe-")]
        if orderly:  # one queue: in order, each message once
            assert real == [o.body for o in sent]
        else:  # consume threads may interleave
            assert sorted(real) == sorted(o.body for o in sent)


def test_reconsume_later_brings_the_message_back(cpp: CppClient, ours: OurClient, raw: RawClient,
                                                 servers: Servers) -> None:
    """The C++ wrapper hands a pulled batch to the listener message by message and fails the whole
    batch on the first RECONSUME_LATER, so the test sends one message. The client resolves the
    route of %RETRY%{group} when it starts, before its first heartbeat makes the broker create the
    topic (as RocketMQ's does), so the retry topic is created first: otherwise the client would
    only start pulling it at its next rebalance, 20 s later."""
    topic = one_queue_topic(servers, "CompatPushRetry")
    group = unique("CompatRetryGroup")
    with orbitmq.Admin(servers.namesrv) as admin:
        admin.create_topic(f"%RETRY%{group}", read_queue_nums=1, write_queue_nums=1)
    ours.send(unique("CompatSdkProducer"), outgoing(topic, "retry", 1))
    push = cpp.start("push", group=group, topic=topic, expect=2, wait_s=DELIVERY_WAIT_S,
                     reconsume_later={"retry-0": 1})
    result = push.result()
    assert result["complete"], f"{result}; server output:\n{tail(servers.output())}"
    first, again = result["messages"]
    assert base64.b64decode(first["body_b64"]) == base64.b64decode(again["body_b64"]) == b"retry-0"
    assert first["reconsume_times"] == 0 and again["reconsume_times"] == 1
    assert again["topic"] == topic  # the client shows a retried message under its own topic
    assert again["id"] == first["id"]  # same UNIQ_KEY: the same message to the application
    assert again["store_timestamp"] - first["store_timestamp"] >= RETRY_LEVEL_MS
    assert result["waited_s"] < RETRY_LEVEL_MS / 1000 + 5, "the retry came back late"

    [stored] = raw.stored(servers.broker, f"%RETRY%{group}", 0)
    assert stored.properties["RETRY_TOPIC"] == topic
    assert stored.properties["ORIGIN_MESSAGE_ID"] == first["id"]
    assert stored.reconsume_times == 1


def test_orderly_consumer_holds_its_queue_locks(cpp: CppClient, ours: OurClient, raw: RawClient,
                                                servers: Servers, tmp_path: Path) -> None:
    topic = one_queue_topic(servers, "CompatPushLock")
    group = unique("CompatLockGroup")
    ours.send(unique("CompatSdkProducer"), outgoing(topic, "lock", 1))
    stop = tmp_path / "stop"
    push = cpp.start("push", timeout=70, group=group, topic=topic, wait_s=50, orderly=True,
                     stop_file=str(stop))
    push.wait_event("received")  # it consumes, so it holds the lock on the queue
    mq = MessageQueue(topic, "broker-a", 0)

    def lock_as_someone_else() -> list[MessageQueue]:
        body = LockBatchRequestBody(group, "compat-intruder", [mq]).to_json()
        resp = raw.invoke(servers.broker, RequestCode.LOCK_BATCH_MQ, {}, body)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        return LockBatchResponseBody.from_json(bytes(resp.body)).lock_ok_mq_set

    assert lock_as_someone_else() == []
    # GET_CONSUMER_RUNNING_INFO through the broker: the C++ client names the queue it holds (in
    # its fastjson-like body, MessageQueue objects as keys).
    with orbitmq.Admin(servers.namesrv) as admin:
        holders = admin.queue_holders(group)
    assert holders.get(mq) in raw.consumer_ids(servers.broker, group), holders
    stop.touch()
    bodies_of(push.result())
    # At shutdown the C++ client unlocks its queues (or its closed connection releases them).
    deadline = time.monotonic() + 10
    while not lock_as_someone_else():
        assert time.monotonic() < deadline, "the queue stayed locked after the consumer left"
        time.sleep(0.1)
