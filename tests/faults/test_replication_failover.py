"""A master killed with SIGKILL (issue 15 acceptance), real processes throughout: a name server,
a SYNC_MASTER and a SLAVE.

- Producers send while the master is killed at a random moment (seeded): every message answered
  SEND_OK is readable from the slave, body and properties intact. ``make test`` runs 3 seeds of
  5,000 messages; ``--run-slow`` the full run, 20 seeds of 100,000 (tests/compat adds the C++
  client on both sides).
- A push consumer group keeps consuming from the slave after the master dies, re-reading at most
  what it consumed since its last offset commit, and the master takes over again when it
  returns; nothing is skipped.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from orbitmq import (
    Admin,
    ConsumeFrom,
    ConsumeResult,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
    SendStatus,
)
from orbitmq.client.results import PullStatus
from orbitmq.client.route import subscribe_queues_from_route
from orbitmq.errors import OrbitMQError
from orbitmq.testing.broker_set import BrokerSetProcesses

STORED = (SendStatus.OK, SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE)
FAILURES_MAX = 20  # consecutive failed sends after which a producer stops (the master is gone)
PRODUCERS = 2


def _message(topic: str, seed: int, n: int) -> Message:
    rng = random.Random(seed * 1_000_003 + n)
    # No NUL byte: the C++ client (tests/compat) reads bodies as C strings.
    body = rng.randbytes(rng.choice((16, 200, 1500))).replace(b"\0", b"\1")
    return Message(topic, body, tags=f"t{n % 3}", keys=[f"k{n}"],
                   properties={"seq": str(n), "seed": str(seed)})


def _produce(namesrv: str, topic: str, seed: int, numbers: range,
             acked: dict[int, tuple[str, bytes]], stop: threading.Event) -> None:
    """Send ``numbers`` one by one; record (msg id, body) of each SEND_OK."""
    failures = 0
    with Producer(f"failover-p{seed}", namesrv=namesrv, send_timeout=2.0,
                  retry_times_when_send_failed=1) as producer:
        for n in numbers:
            if stop.is_set() or failures >= FAILURES_MAX:
                return
            msg = _message(topic, seed, n)
            try:
                result = producer.send(msg)
            except OrbitMQError:
                failures += 1
                continue
            failures = 0
            if result.status is SendStatus.OK:
                acked[n] = (result.msg_id, msg.body)


def read_all_from(namesrv: str, topic: str, group: str) -> dict[str, tuple[bytes, dict[str, str]]]:
    """Every message of ``topic`` (msg id -> body, properties) pulled through the SDK, each queue
    from offset 0 to its end."""
    out: dict[str, tuple[bytes, dict[str, str]]] = {}
    with PullConsumer(group, namesrv=namesrv) as consumer:
        for mq in consumer.fetch_queues(topic):
            offset = 0
            while True:
                result = consumer.pull(mq, offset, 32)
                for m in result.messages:
                    out[m.msg_id] = (bytes(m.body), dict(m.properties))
                if result.status is not PullStatus.FOUND:
                    break
                offset = result.next_begin_offset
    return out


def run_kill_seed(tmp_path: Path, seed: int, count: int) -> tuple[int, int]:
    """One seed of the acceptance run; returns (messages acknowledged, seconds to the kill)."""
    rng = random.Random(seed)
    topic = f"Failover{seed}"
    with BrokerSetProcesses(tmp_path / f"seed{seed}") as brokers:
        brokers.wait_slaves_connected()
        acked: dict[int, tuple[str, bytes]] = {}
        stop = threading.Event()
        share = count // PRODUCERS
        threads = [threading.Thread(target=_produce, args=(
            brokers.namesrv, topic, seed, range(i * share, (i + 1) * share), acked, stop))
            for i in range(PRODUCERS)]
        for t in threads:
            t.start()
        # The kill's moment: a random point of the run, measured in messages acknowledged.
        kill_after = rng.randrange(1, count)
        deadline = time.monotonic() + 600
        while len(acked) < kill_after and any(t.is_alive() for t in threads):
            if time.monotonic() > deadline:
                break
            time.sleep(0.005)
        started = time.monotonic()
        brokers.kill(0)
        for t in threads:
            t.join(300)
        assert not any(t.is_alive() for t in threads), "producers did not stop"
        stored = read_all_from(brokers.namesrv, topic, f"reader{seed}")
        missing = [n for n, (msg_id, _) in acked.items() if msg_id not in stored]
        assert not missing, f"seed {seed}: {len(missing)} SEND_OK messages not on the slave"
        for n, (msg_id, body) in acked.items():
            got_body, props = stored[msg_id]
            assert got_body == body, f"seed {seed}: message {n} body differs"
            assert props.get("seq") == str(n) and props.get("KEYS") == f"k{n}", props
        return len(acked), int(time.monotonic() - started)


@pytest.mark.parametrize("seed", range(3))
def test_every_send_ok_is_on_the_slave_after_a_master_kill(tmp_path: Path, seed: int) -> None:
    acked, _ = run_kill_seed(tmp_path, seed, 5_000)
    assert acked > 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20))
def test_every_send_ok_is_on_the_slave_after_a_master_kill_full(tmp_path: Path, seed: int) -> None:
    acked, _ = run_kill_seed(tmp_path, seed, 100_000)
    assert acked > 0


def test_a_push_consumer_group_fails_over_to_the_slave_and_back(tmp_path: Path) -> None:
    topic, group = "PushFailover", "push-failover"
    with BrokerSetProcesses(tmp_path) as brokers:
        brokers.wait_slaves_connected()
        ns = brokers.namesrv
        sent: set[str] = set()
        with Producer("push-failover-p", namesrv=ns) as producer:
            for i in range(400):
                r = producer.send(Message(topic, b"first %d" % i, keys=[f"k{i}"]))
                assert r.status is SendStatus.OK
                sent.add(r.msg_id)
        got: list[str] = []
        lock = threading.Lock()

        def on_message(messages: list, context: object) -> ConsumeResult:
            time.sleep(0.01)  # slow: the master dies while the group is halfway
            with lock:
                got.extend(m.msg_id for m in messages)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(group, namesrv=ns, consume_from=ConsumeFrom.FIRST,
                                poll_name_server_interval=1.0, persist_consumer_offset_interval=0.5,
                                pull_suspend_time=2.0, pull_timeout=10.0,
                                pull_delay_on_exception=0.5, consume_thread_nums=1)
        consumer.subscribe(topic, "*")(on_message)
        consumer.start()
        try:
            _until(lambda: len(got) >= 100, "the group consumes from the master")
            with Admin(ns) as admin:
                queues = subscribe_queues_from_route(topic, admin.topic_route(topic))
                committed = sum(max(0, admin.consumer_offset(group, mq)) for mq in queues)
            brokers.kill(0)
            with lock:
                consumed_at_kill = len(got)
            _until(lambda: sent <= set(got), "the group reads everything from the slave", 90)
            duplicates = sum(c - 1 for c in Counter(got).values())
            assert duplicates <= consumed_at_kill - committed, (duplicates, consumed_at_kill,
                                                                 committed)
            brokers.start_broker(0, same_address=True)  # the master returns where it was
            brokers.wait_slaves_connected()
            more: set[str] = set()
            with Producer("push-failover-p2", namesrv=ns) as producer:
                for i in range(100):
                    r = producer.send(Message(topic, b"later %d" % i))
                    assert r.status in STORED
                    more.add(r.msg_id)
            _until(lambda: more <= set(got), "the group reads what the master took after", 90)
            with Admin(ns) as admin:  # the master serves the group's pulls again
                _until(lambda: int(admin.broker_runtime_info(brokers.addresses[0])
                                   .get("msgGetTotalTodayNow", 0)) > 0, "pulls from the master", 60)
        finally:
            consumer.shutdown()


def _until(check: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)
