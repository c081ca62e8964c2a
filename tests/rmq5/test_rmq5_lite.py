"""Lite topics (RocketMQ 5.5) with the official 5.x client's lite consumers, as its examples use
them: a LITE parent topic, messages sent with ``lite_topic``, a LiteSimpleConsumer and a
LitePushConsumer each subscribed to some lite topics (``subscribe_lite``; the client sends a
subscription split into characters, so its whole set, which it sends 30 s after its start or on
``subscribe_lite_all``, is what the broker keeps), an idle lite topic expiring after its TTL,
and a broker killed with kill -9 losing no acknowledged lite message.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from rmq5_support import (
    RMQ5_PYTHON,
    Cluster,
    Rmq5Driver,
    unique,
    wait_until,
)

pytestmark = pytest.mark.rmq5

LITE_DRIVER = Path(__file__).resolve().parent / "rmq5_lite_driver.py"
PER_LITE = 5
RECONNECT_WAIT_S = 60.0


class LiteDriver(Rmq5Driver):
    """Rmq5Driver running rmq5_lite_driver.py (its ops and the lite ones)."""

    def __init__(self, home: Path) -> None:  # noqa: D107 - as Rmq5Driver's, another script
        home.mkdir(parents=True, exist_ok=True)
        import os

        self.proc = subprocess.Popen([str(RMQ5_PYTHON), str(LITE_DRIVER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "HOME": str(home)})
        self.stderr: list[str] = []
        self._err = threading.Thread(target=self._pump_err, daemon=True)
        self._err.start()
        self._lock = threading.Lock()


@pytest.fixture
def lite_driver(rmq5_ready: None, tmp_path: Path) -> Any:
    d = LiteDriver(tmp_path / "client-home")
    try:
        yield d
    finally:
        d.close()


def _send_all(driver: LiteDriver, parent: str, lites: list[str], rounds: int, tag: str) -> None:
    for i in range(rounds):
        for lite in lites:
            driver.call("lite_send", id="p", topic=parent, lite_topic=lite, body=f"{lite}:{tag}{i}")


def _by_lite(messages: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for m in messages:
        out.setdefault(m["lite_topic"], []).append(m["body"])
    return out


def _drain(driver: LiteDriver, cid: str, want: int, *, ack: bool = True, batch: int = 16,
           timeout: float = 30.0) -> list[dict[str, Any]]:
    """Receive (acking each in order) until ``want`` messages came (bounded)."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(seen) < want and time.monotonic() < deadline:
        for m in driver.call("lite_receive", id=cid, max=batch, invisible_s=10)["messages"]:
            seen.append(m)
            if ack:
                driver.call("ack", id=cid, handle=m["handle"])
    return seen


def test_lite_consumers_receive_only_their_lite_topics_in_order(
        cluster: Cluster, lite_driver: LiteDriver) -> None:
    parent = cluster.topic(unique("LiteParent"), "LITE", queues=1)
    g_simple, g_push = unique("LiteS"), unique("LiteP")
    a, b, c = unique("lt-a"), unique("lt-b"), unique("lt-c")
    lite_driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[parent])
    _send_all(lite_driver, parent, [a, b, c], PER_LITE, "m")

    lite_driver.call("lite_simple", id="s", endpoint=cluster.endpoint, group=g_simple, topic=parent,
                     await_s=1)
    lite_driver.call("lite_push", id="q", endpoint=cluster.endpoint, group=g_push, topic=parent)
    lite_driver.call("subscribe_lite", id="s", names=[a, b], sync_all=True)
    lite_driver.call("subscribe_lite", id="q", names=[a, c], sync_all=True)

    got = _drain(lite_driver, "s", 2 * PER_LITE)
    assert _by_lite(got) == {a: [f"{a}:m{i}" for i in range(PER_LITE)],
                             b: [f"{b}:m{i}" for i in range(PER_LITE)]}
    assert all(m["topic"] == parent for m in got)
    pushed = wait_until("the push consumer consumed its lite topics", lambda: (
        lambda seen: seen if len(seen) >= 2 * PER_LITE else None)(
            lite_driver.call("consumed", id="q")["consumed"]))
    assert _by_lite(pushed) == {a: [f"{a}:m{i}" for i in range(PER_LITE)],
                                c: [f"{c}:m{i}" for i in range(PER_LITE)]}

    # Unsubscribed: nothing more of b for the simple consumer, nothing of c for the push one.
    lite_driver.call("unsubscribe_lite", id="s", name=b)
    lite_driver.call("unsubscribe_lite", id="q", name=c)
    _send_all(lite_driver, parent, [b, c, a], 2, "n")
    after = _drain(lite_driver, "s", 2)
    assert _by_lite(after) == {a: [f"{a}:n0", f"{a}:n1"]}
    assert lite_driver.call("lite_receive", id="s", max=16, invisible_s=10)["messages"] == []
    pushed = wait_until("the push consumer consumed a's new messages", lambda: (
        lambda seen: seen if len(seen) >= 2 * PER_LITE + 2 else None)(
            lite_driver.call("consumed", id="q")["consumed"]))
    assert _by_lite(pushed[2 * PER_LITE:]) == {a: [f"{a}:n0", f"{a}:n1"]}


def test_a_lite_topic_is_received_in_order_one_at_a_time(
        cluster: Cluster, lite_driver: LiteDriver) -> None:
    """FIFO per lite topic: while a message is invisible, its lite topic gives nothing more;
    unacked, it comes again (attempt 2) before the next."""
    parent = cluster.topic(unique("LiteFifo"), "LITE", queues=1)
    group, lite = unique("LiteF"), unique("lt")
    lite_driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[parent])
    _send_all(lite_driver, parent, [lite], 3, "f")
    lite_driver.call("lite_simple", id="s", endpoint=cluster.endpoint, group=group, topic=parent,
                     await_s=1)
    lite_driver.call("subscribe_lite", id="s", names=[lite], sync_all=True)
    first = wait_until("a first batch", lambda: lite_driver.call(
        "lite_receive", id="s", max=1, invisible_s=2)["messages"])
    assert [m["body"] for m in first] == [f"{lite}:f0"]
    assert lite_driver.call("lite_receive", id="s", max=16, invisible_s=2)["messages"] == []
    again = wait_until("f0 again after its invisible time", lambda: lite_driver.call(
        "lite_receive", id="s", max=1, invisible_s=10)["messages"], timeout=15)
    assert [(m["body"], m["attempt"]) for m in again] == [(f"{lite}:f0", 2)]
    lite_driver.call("ack", id="s", handle=again[0]["handle"])
    rest = _drain(lite_driver, "s", 2)
    assert [m["body"] for m in rest] == [f"{lite}:f1", f"{lite}:f2"]


def test_sync_refusals(cluster: Cluster, lite_driver: LiteDriver) -> None:
    """A lite send to a topic that is not LITE, and a lite name the broker refuses."""
    normal = cluster.topic(unique("NotLite"), queues=1)
    parent = cluster.topic(unique("LiteBad"), "LITE", queues=1)
    lite_driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[normal, parent])
    refused = lite_driver.try_call("lite_send", id="p", topic=normal, lite_topic="x", body="b")
    assert not refused["ok"] and "LITE" in refused["message"]
    refused = lite_driver.try_call("lite_send", id="p", topic=parent, lite_topic="bad name", body="b")
    assert not refused["ok"] and "lite topic" in refused["message"]


def test_an_idle_lite_topic_expires_after_its_ttl(rmq5_ready: None, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "store", "--lite-topic-ttl-s", "2")
    driver = LiteDriver(tmp_path / "home")
    try:
        parent = cluster.topic(unique("LiteTtl"), "LITE", queues=1)
        idle, busy = unique("idle"), unique("busy")
        driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[parent])
        _send_all(driver, parent, [idle, busy], 1, "t")
        queues = tmp_path / "store" / "broker" / "consumequeue"
        if not queues.exists():
            queues = next(p for p in (tmp_path / "store").rglob("consumequeue"))
        idle_dir = queues / f"%LMQ%{parent}%{idle}"
        busy_dir = queues / f"%LMQ%{parent}%{busy}"
        wait_until("the lite topics' queues exist", lambda: idle_dir.exists() and busy_dir.exists())
        started = time.monotonic()
        while idle_dir.exists():  # busy keeps getting messages meanwhile
            driver.call("lite_send", id="p", topic=parent, lite_topic=busy, body="keep")
            assert time.monotonic() - started < 15, "the idle lite topic did not expire"
            time.sleep(0.3)
        assert time.monotonic() - started >= 1.0  # not before its TTL
        assert busy_dir.exists()
        # Gone with its messages: a consumer of it finds nothing; a new message creates it anew.
        driver.call("lite_simple", id="s", endpoint=cluster.endpoint, group=unique("LiteTtlG"),
                    topic=parent, await_s=1)
        driver.call("subscribe_lite", id="s", names=[idle], sync_all=True)
        assert driver.call("lite_receive", id="s", max=16, invisible_s=10)["messages"] == []
        driver.call("lite_send", id="p", topic=parent, lite_topic=idle, body="again")
        got = _drain(driver, "s", 1)
        assert [m["body"] for m in got] == ["again"]
    finally:
        driver.close()
        cluster.stop()


def test_kill_9_loses_no_acknowledged_lite_message(rmq5_ready: None, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "store")
    driver = LiteDriver(tmp_path / "home")
    try:
        parent = cluster.topic(unique("LiteKill"), "LITE", queues=1)
        group = unique("LiteK")
        lites = [unique("k1"), unique("k2")]
        driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[parent])
        _send_all(driver, parent, lites, 4, "k")  # every send answered: stored
        driver.call("lite_simple", id="s", endpoint=cluster.endpoint, group=group, topic=parent,
                    await_s=1)
        driver.call("subscribe_lite", id="s", names=lites, sync_all=True)
        before = _drain(driver, "s", 2, batch=1)  # the first of each lite topic, acked
        acked = {m["body"] for m in before}
        assert acked == {f"{lite}:k0" for lite in lites}
        cluster.stop(kill=True)
        cluster.start()
        seen: list[dict[str, Any]] = []
        errors: list[str] = []
        deadline = time.monotonic() + RECONNECT_WAIT_S
        while time.monotonic() < deadline and len(seen) < 6:
            # The broker keeps subscriptions in memory: the client's whole set again.
            if not driver.try_call("subscribe_lite", id="s", names=[], sync_all=True)["ok"]:
                time.sleep(0.5)
                continue
            answer = driver.try_call("lite_receive", id="s", max=16, invisible_s=10)
            if not answer.get("ok"):
                errors.append(f"{answer.get('error')}: {answer.get('message')}")
                time.sleep(0.5)
                continue
            for m in answer["messages"]:
                seen.append(m)
                driver.call("ack", id="s", handle=m["handle"])
        by_lite = _by_lite(seen)
        for lite in lites:
            assert by_lite.get(lite) == [f"{lite}:k{i}" for i in range(1, 4)], \
                (by_lite, errors[-5:])
        assert not acked & {m["body"] for m in seen}
    finally:
        driver.close()
        cluster.stop()


def test_sdk_producer_sends_to_lite_topics(cluster: Cluster, lite_driver: LiteDriver) -> None:
    """OrbitMQ's SDK (remoting) sends with ``lite_topic``; the official LiteSimpleConsumer
    receives each lite topic in order; a lite send to a topic that is not LITE is refused."""
    import orbitmq

    parent = cluster.topic(unique("LiteSdk"), "LITE", queues=1)
    normal = cluster.topic(unique("NotLiteSdk"), queues=1)
    group, lite = unique("LiteSdkG"), unique("sdk")
    with orbitmq.Producer(unique("lite-sdk-p"), namesrv=cluster.namesrv) as producer:
        for i in range(3):
            producer.send(orbitmq.Message(parent, f"s{i}".encode(), lite_topic=lite))
        with pytest.raises(orbitmq.BrokerError, match="not a LITE topic") as refused:
            producer.send(orbitmq.Message(normal, b"x", lite_topic=lite))
        print(refused.value)
        with pytest.raises(orbitmq.BrokerError, match="expected type is LITE"):
            producer.send(orbitmq.Message(parent, b"x"))  # a LITE topic takes lite messages only
    lite_driver.call("lite_simple", id="s", endpoint=cluster.endpoint, group=group, topic=parent,
                     await_s=1)
    lite_driver.call("subscribe_lite", id="s", names=[lite], sync_all=True)
    got = _drain(lite_driver, "s", 3)
    assert [(m["lite_topic"], m["body"]) for m in got] == [(lite, f"s{i}") for i in range(3)]


def test_the_docs_lite_example_runs(cluster: Cluster, tmp_path: Path) -> None:
    from rmq5_support import REPO

    example = REPO / "examples" / "rocketmq5_lite.py"
    assert example.read_text() in (REPO / "docs" / "rocketmq5.md").read_text()
    cluster.topic("Sessions", "LITE", queues=1)
    out = subprocess.run([str(RMQ5_PYTHON), str(example), cluster.endpoint], capture_output=True,
                         text=True, timeout=120, env={"HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == ["received ['session-1:hello', 'session-1:bye']"]


def test_the_clients_periodic_whole_set_is_the_subscription(
        cluster: Cluster, lite_driver: LiteDriver) -> None:
    """Without subscribe_lite_all: subscribe_lite alone sends the name split into characters
    (the 5.1.2 client's bug), and the client's whole set, sent 30 s after its start, is what
    the broker then serves (the one test that waits for it)."""
    parent = cluster.topic(unique("LiteResync"), "LITE", queues=1)
    group, lite, other = unique("LiteR"), unique("lt-r"), unique("lt-o")
    lite_driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[parent])
    _send_all(lite_driver, parent, [lite, other], 2, "r")
    lite_driver.call("lite_push", id="q", endpoint=cluster.endpoint, group=group, topic=parent)
    started = time.monotonic()
    lite_driver.call("subscribe_lite", id="q", names=[lite])
    pushed = wait_until("the push consumer consumed after the client's resync", lambda: (
        lambda seen: seen if len(seen) >= 2 else None)(
            lite_driver.call("consumed", id="q")["consumed"]), timeout=60)
    assert time.monotonic() - started > 5  # not from the split pieces: from the whole set
    assert _by_lite(pushed) == {lite: [f"{lite}:r0", f"{lite}:r1"]}


def test_the_wildcard_subscribes_every_lite_topic_of_the_parent(
        cluster: Cluster, lite_driver: LiteDriver) -> None:
    parent = cluster.topic(unique("LiteAll"), "LITE", queues=1)
    group, a, b = unique("LiteW"), unique("w-a"), unique("w-b")
    lite_driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[parent])
    _send_all(lite_driver, parent, [a, b], 2, "w")
    lite_driver.call("lite_simple", id="s", endpoint=cluster.endpoint, group=group, topic=parent,
                     await_s=1)
    lite_driver.call("subscribe_lite", id="s", names=["*"], sync_all=True)
    got = _drain(lite_driver, "s", 4)
    assert _by_lite(got) == {a: [f"{a}:w0", f"{a}:w1"], b: [f"{b}:w0", f"{b}:w1"]}


def test_a_lite_message_past_its_attempts_goes_to_the_groups_dlq(
        cluster: Cluster, lite_driver: LiteDriver) -> None:
    """Retries per lite topic: never acked, a message comes again (attempt 2), then goes to
    %DLQ%{group} with its parent as RETRY_TOPIC, and the lite topic goes on with the next."""
    import orbitmq

    parent = cluster.topic(unique("LiteDlq"), "LITE", queues=1)
    group, lite = cluster.group(unique("LiteD"), retry_max_times=1), unique("d")
    lite_driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[parent])
    _send_all(lite_driver, parent, [lite], 2, "d")
    lite_driver.call("lite_simple", id="s", endpoint=cluster.endpoint, group=group, topic=parent,
                     await_s=1)
    lite_driver.call("subscribe_lite", id="s", names=[lite], sync_all=True)
    attempts = []
    for _ in range(2):  # d0 twice, never acked
        got = wait_until("d0 delivered", lambda: lite_driver.call(
            "lite_receive", id="s", max=1, invisible_s=1)["messages"], timeout=15)
        attempts.append((got[0]["body"], got[0]["attempt"]))
    assert attempts == [(f"{lite}:d0", 1), (f"{lite}:d0", 2)]
    after = wait_until("d1 after d0 went to the DLQ", lambda: lite_driver.call(
        "lite_receive", id="s", max=1, invisible_s=10)["messages"], timeout=15)
    assert [m["body"] for m in after] == [f"{lite}:d1"]
    with orbitmq.PullConsumer(unique("dlq-reader"), namesrv=cluster.namesrv) as puller:
        dlq = puller.fetch_queues(f"%DLQ%{group}")
        got_dlq = puller.pull(dlq[0], 0, 8).messages
    assert [m.body for m in got_dlq] == [f"{lite}:d0".encode()]
    assert got_dlq[0].properties["RETRY_TOPIC"] == parent
