"""Namespaces with the official RocketMQ 5 Python client: ``ClientConfiguration(namespace=...)``.

Two namespaces use the same topic and group names on one server; each client sees only its own
namespace's messages, received messages show the bare topic name with the namespace beside it,
the namespace's dead letters land in ``%DLQ%NS%group``, and the stored names are ``NS%name`` as
OrbitMQ's SDK (over remoting) reads them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from rmq5_support import REPO, RMQ5_PYTHON, Cluster, Rmq5Driver, unique, wait_until
from test_rmq5_client import dlq_bodies, receive_until

import orbitmq

pytestmark = pytest.mark.rmq5


def stored_bodies(cluster: Cluster, topic: str) -> list[str]:
    """What ``topic`` (a stored name) holds, read with OrbitMQ's SDK."""
    with orbitmq.PullConsumer(unique("Reader"), namesrv=cluster.namesrv) as puller:
        out: list[str] = []
        for mq in puller.fetch_queues(topic):
            out += [bytes(m.body).decode() for m in puller.pull(mq, 0, max_nums=32).messages]
        return sorted(out)


def test_two_namespaces_with_the_same_topic_do_not_see_each_other(cluster: Cluster,
                                                                   driver: Rmq5Driver) -> None:
    topic, group = unique("Orders"), unique("Billing")
    spaces = (unique("nsA"), unique("nsB"))
    for ns in spaces:
        cluster.topic(f"{ns}%{topic}")
    for ns in spaces:
        driver.call("producer", id=f"p-{ns}", endpoint=cluster.endpoint, namespace=ns, topics=[topic])
        for i in range(3):
            driver.call("send", id=f"p-{ns}", topic=topic, body=f"{ns}-{i}")
    for ns in spaces:
        driver.call("simple", id=f"c-{ns}", endpoint=cluster.endpoint, namespace=ns, group=group,
                    topic=topic, await_s=1)
    for ns in spaces:
        got = receive_until(driver, f"c-{ns}", 3)
        assert sorted(m["body"] for m in got) == [f"{ns}-{i}" for i in range(3)]
        assert {(m["topic"], m["namespace"]) for m in got} == {(topic, ns)}
        for m in got:
            driver.call("ack", id=f"c-{ns}", handle=m["handle"])
        assert driver.call("receive", id=f"c-{ns}", max=32, invisible_s=2)["messages"] == []
    # Stored apart, under NS%topic; the bare name holds nothing (it does not even exist).
    for ns in spaces:
        assert stored_bodies(cluster, f"{ns}%{topic}") == [f"{ns}-{i}" for i in range(3)]
    with orbitmq.Admin(namesrv=cluster.namesrv) as admin:
        assert topic not in admin.list_topics()


def test_a_namespace_push_consumer_and_its_dead_letters(cluster: Cluster, driver: Rmq5Driver) -> None:
    ns, topic, group = unique("nsP"), unique("Jobs"), unique("Workers")
    cluster.topic(f"{ns}%{topic}")
    cluster.topic(f"{topic}")  # the same name outside any namespace: never read by the consumer
    cluster.group(f"{ns}%{group}", retry_max_times=1)
    driver.call("producer", id="plain", endpoint=cluster.endpoint, topics=[topic])
    driver.call("send", id="plain", topic=topic, body="outside")
    driver.call("producer", id="p", endpoint=cluster.endpoint, namespace=ns, topics=[topic])
    ids = {driver.call("send", id="p", topic=topic, body=f"job{i}")["message_id"] for i in range(3)}
    driver.call("push", id="c", endpoint=cluster.endpoint, namespace=ns, group=group, topic=topic,
                fail_first=2)  # every message fails twice: past the group's 2 attempts

    def settled() -> list[dict[str, Any]] | None:
        seen = driver.call("consumed", id="c")["consumed"]
        return seen if {m["id"] for m in seen if m["attempt"] == 2} == ids else None

    seen = wait_until("every message delivered twice", settled, timeout=60)
    assert {m["body"] for m in seen} == {f"job{i}" for i in range(3)}
    assert {(m["topic"], m["namespace"]) for m in seen} == {(topic, ns)}
    dead = wait_until("dead letters stored", lambda: len(dlq_bodies(cluster, f"{ns}%{group}")) == 3
                      and dlq_bodies(cluster, f"{ns}%{group}"), timeout=60)
    assert sorted(dead) == [f"job{i}".encode() for i in range(3)]


def test_transactions_in_a_namespace_commit_and_check_back(cluster: Cluster,
                                                          driver: Rmq5Driver) -> None:
    """EndTransaction and the broker's check-back (a Telemetry command carrying the message,
    answered by the producer with an EndTransaction of its own) work in a namespace."""
    ns, topic = unique("nsT"), unique("Tx")
    cluster.topic(f"{ns}%{topic}", "TRANSACTION")
    driver.call("producer", id="p", endpoint=cluster.endpoint, namespace=ns, topics=[topic],
                check_verdict="commit")
    driver.call("send", id="p", topic=topic, body="committed", transaction="commit")
    driver.call("send", id="p", topic=topic, body="rolled-back", transaction="rollback")
    withheld = driver.call("send", id="p", topic=topic, body="checked", transaction="withhold")
    driver.call("simple", id="c", endpoint=cluster.endpoint, namespace=ns, group=unique("TxG"),
                topic=topic, await_s=2)
    got = receive_until(driver, "c", 2)
    assert sorted(m["body"] for m in got) == ["checked", "committed"]
    assert {(m["topic"], m["namespace"]) for m in got} == {(topic, ns)}
    assert withheld["message_id"] in driver.call("checks", id="p")["checks"]


def test_the_docs_namespace_example_runs(cluster: Cluster, tmp_path: Path) -> None:
    """docs/rocketmq5.md shows examples/rocketmq5_namespaces.py as it is, and it runs."""
    example = REPO / "examples" / "rocketmq5_namespaces.py"
    body = example.read_text()
    assert body[body.index("import sys"):] in (REPO / "docs" / "rocketmq5.md").read_text()
    for ns in ("shop", "bank"):
        with orbitmq.Admin(namesrv=cluster.namesrv) as admin:
            if f"{ns}%Orders" not in admin.list_topics():
                cluster.topic(f"{ns}%Orders")
    out = subprocess.run([str(RMQ5_PYTHON), str(example), cluster.endpoint], capture_output=True,
                         text=True, timeout=120, env={"HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == ["shop received [('Orders', 'shop', 'shop order 1')]",
                                       "bank received [('Orders', 'bank', 'bank order 1')]"]
