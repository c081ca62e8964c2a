"""The official RocketMQ 5 Python client against `orbitmq standalone`, over gRPC.

Producer: normal, FIFO (message groups), timer, transactional (commit, rollback, check-back
through Telemetry); SimpleConsumer: receive, ack, change invisibility, redelivery, dead letters;
PushConsumer: everything consumed, a failing listener retried. Each test uses topics and groups
of its own on the module's server.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from rmq5_support import Cluster, DriverFailed, Rmq5Driver, unique, wait_until

import orbitmq

pytestmark = pytest.mark.rmq5

RECEIVE_ROUNDS_MAX = 40


def receive_until(driver: Rmq5Driver, cid: str, want: int, invisible_s: int = 30,
                  max_each: int = 32) -> list[dict[str, Any]]:
    """Receive (long polling) until ``want`` messages came; bounded by rounds."""
    got: list[dict[str, Any]] = []
    for _ in range(RECEIVE_ROUNDS_MAX):
        got += driver.call("receive", id=cid, max=max_each, invisible_s=invisible_s)["messages"]
        if len(got) >= want:
            return got
    raise AssertionError(f"received {len(got)} of {want} messages: {got}")


def dlq_bodies(cluster: Cluster, group: str) -> list[bytes]:
    """What %DLQ%{group} holds, read with OrbitMQ's SDK over remoting."""
    with orbitmq.PullConsumer(unique("DlqReader"), namesrv=cluster.namesrv) as puller:
        try:
            queues = puller.fetch_queues(f"%DLQ%{group}")
        except orbitmq.errors.OrbitMQError:
            return []
        out: list[bytes] = []
        for mq in queues:
            out += [bytes(m.body) for m in puller.pull(mq, 0, max_nums=32).messages]
        return out


def test_normal_messages_receive_filter_and_ack(cluster: Cluster, driver: Rmq5Driver) -> None:
    topic = cluster.topic(unique("Normal"))
    driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[topic])
    sent = [driver.call("send", id="p", topic=topic, body=f"m{i}", tag="A" if i % 2 == 0 else "B",
                        keys=[f"k{i}"], properties={"color": "red"}) for i in range(4)]
    driver.call("simple", id="c", endpoint=cluster.endpoint, group=unique("G"), topic=topic,
                tag="A", await_s=2)
    got = receive_until(driver, "c", 2, invisible_s=2)
    assert sorted(m["body"] for m in got) == ["m0", "m2"]  # the tag filter passed over B
    by_body = {m["body"]: m for m in got}
    assert by_body["m0"]["id"] == sent[0]["message_id"]
    assert by_body["m2"]["keys"] == ["k2"] and by_body["m2"]["tag"] == "A"
    assert by_body["m2"]["properties"] == {"color": "red"}
    assert all(m["attempt"] == 1 and not m["corrupted"] for m in got)
    for m in got:
        driver.call("ack", id="c", handle=m["handle"])
    # Acked: not delivered again, although their invisible time (2 s) passes during this wait.
    again = driver.call("receive", id="c", max=32, invisible_s=2)["messages"]
    again += driver.call("receive", id="c", max=32, invisible_s=2)["messages"]
    assert again == []


def test_fifo_group_delivers_each_message_group_in_order(cluster: Cluster, driver: Rmq5Driver) -> None:
    topic = cluster.topic(unique("Fifo"), "FIFO", queues=2)
    group = cluster.group(unique("FifoG"), consume_message_orderly=True)
    driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[topic])
    for i in range(3):
        driver.call("send", id="p", topic=topic, body=f"a{i}", message_group="A")
    driver.call("simple", id="c", endpoint=cluster.endpoint, group=group, topic=topic, await_s=1)
    [first] = receive_until(driver, "c", 1, invisible_s=6, max_each=1)
    assert (first["body"], first["group"], first["attempt"]) == ("a0", "A", 1)
    # a0 is invisible and not acked: nothing more of its group meanwhile.
    assert driver.call("receive", id="c", max=1, invisible_s=6)["messages"] == []
    # Its invisibility passes unacked: a0 again (attempt 2), still before a1.
    [again] = receive_until(driver, "c", 1, invisible_s=30, max_each=1)
    assert (again["body"], again["attempt"]) == ("a0", 2)
    driver.call("ack", id="c", handle=again["handle"])
    for body in ("a1", "a2"):  # each only once the one before is acked
        [nxt] = receive_until(driver, "c", 1, invisible_s=30, max_each=1)
        assert (nxt["body"], nxt["attempt"]) == (body, 1)
        driver.call("ack", id="c", handle=nxt["handle"])


def test_timer_message_not_received_before_its_time(cluster: Cluster, driver: Rmq5Driver) -> None:
    topic = cluster.topic(unique("Timer"), "DELAY")
    driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[topic])
    driver.call("simple", id="c", endpoint=cluster.endpoint, group=unique("TG"), topic=topic, await_s=1)
    due_s = int(time.time()) + 3
    driver.call("send", id="p", topic=topic, body="later", delivery_s=due_s)
    got: list[dict[str, Any]] = []
    for _ in range(RECEIVE_ROUNDS_MAX):
        answer = driver.call("receive", id="c", max=32, invisible_s=30)
        if answer["messages"]:
            got = answer["messages"]
            assert answer["at_ms"] >= due_s * 1000, "received before its delivery time"
            break
    assert [m["body"] for m in got] == ["later"]
    assert got[0]["delivery_ms"] == due_s * 1000


def test_transactions_commit_rollback_and_check_back(cluster: Cluster, driver: Rmq5Driver) -> None:
    topic = cluster.topic(unique("Tx"), "TRANSACTION")
    driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[topic], check_verdict="commit")
    driver.call("send", id="p", topic=topic, body="committed", transaction="commit")
    driver.call("send", id="p", topic=topic, body="rolled-back", transaction="rollback")
    withheld = driver.call("send", id="p", topic=topic, body="checked", transaction="withhold")
    driver.call("simple", id="c", endpoint=cluster.endpoint, group=unique("TxG"), topic=topic, await_s=2)
    got = receive_until(driver, "c", 2)
    assert sorted(m["body"] for m in got) == ["checked", "committed"]
    assert withheld["message_id"] in driver.call("checks", id="p")["checks"]
    assert driver.call("receive", id="c", max=32, invisible_s=30)["messages"] == []


def test_change_invisible_redelivery_and_dead_letters(cluster: Cluster, driver: Rmq5Driver) -> None:
    topic = cluster.topic(unique("Retry"))
    group = cluster.group(unique("RetryG"), retry_max_times=1)  # two deliveries at most
    driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[topic])
    driver.call("send", id="p", topic=topic, body="poison")
    driver.call("simple", id="c", endpoint=cluster.endpoint, group=group, topic=topic, await_s=2)
    [first] = receive_until(driver, "c", 1, invisible_s=60)
    old = first["handle"]
    new = driver.call("change", id="c", handle=old, invisible_s=1)["handle"]
    assert new != old
    with pytest.raises(DriverFailed) as refused:
        driver.call("ack", id="c", handle=old)
    assert "40013" in str(refused.value) or "receipt handle" in str(refused.value)
    [second] = receive_until(driver, "c", 1, invisible_s=1)
    assert (second["body"], second["attempt"]) == ("poison", 2)
    # Not acked again: past the group's attempts it goes to %DLQ%{group}, never delivered again.
    assert wait_until("dead letter stored", lambda: dlq_bodies(cluster, group)) == [b"poison"]
    assert driver.call("receive", id="c", max=32, invisible_s=30)["messages"] == []


def test_push_consumer_consumes_all_and_retries_a_failing_listener(cluster: Cluster,
                                                                  driver: Rmq5Driver) -> None:
    topic = cluster.topic(unique("Push"))
    driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[topic])
    ids = {driver.call("send", id="p", topic=topic, body=f"p{i}")["message_id"] for i in range(5)}
    driver.call("push", id="c", endpoint=cluster.endpoint, group=unique("PushG"), topic=topic,
                fail_first=1)  # every message fails once, then succeeds

    def settled() -> list[dict[str, Any]] | None:
        seen = driver.call("consumed", id="c")["consumed"]
        done = {m["id"] for m in seen if m["attempt"] == 2}
        return seen if done == ids else None

    seen = wait_until("every message consumed twice", settled, timeout=60)
    for mid in ids:
        assert sorted(m["attempt"] for m in seen if m["id"] == mid)[:2] == [1, 2]
