"""A broker killed in the middle of a receive/ack loop, and 4.x and 5.x clients sharing topics.

Restart: the official 5.x SimpleConsumer receives and acks half of what it gets, the broker is
killed (kill -9) and started again on the same store and ports, the consumer goes on: no acked
message comes back, every unacked one does (after its invisible time).

Cross-protocol: the official C++ 4.x client (.venv-compat) sends, the 5.x SimpleConsumer
receives; the 5.x producer sends, OrbitMQ's SDK (remoting) pulls it; and a group consumed by a
live 4.x consumer refuses a 5.x receive (one model at a time).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rmq5_support import REPO, Cluster, DriverFailed, Rmq5Driver, unique, wait_until

import orbitmq

pytestmark = pytest.mark.rmq5

sys.path.insert(0, str(REPO / "tests" / "compat"))  # the C++ client's runner (tests/compat)
from compat_support import COMPAT_PYTHON, CppClient, compat_venv_problem  # noqa: E402

SENT = 12
ROUNDS_MAX = 60
RECONNECT_WAIT_S = 120.0  # gRPC's reconnect backoff grows to tens of seconds


def test_kill_and_restart_in_a_receive_ack_loop(rmq5_ready: None, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "store")
    driver = Rmq5Driver(tmp_path / "home")
    try:
        topic = cluster.topic(unique("Restart"), queues=2)
        group = unique("RestartG")
        driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[topic])
        bodies = {driver.call("send", id="p", topic=topic, body=f"r{i}")["message_id"]: f"r{i}"
                  for i in range(SENT)}
        driver.call("simple", id="c", endpoint=cluster.endpoint, group=group, topic=topic, await_s=1)
        acked: set[str] = set()
        unacked: set[str] = set()
        got = driver.call("receive", id="c", max=SENT // 2, invisible_s=3)["messages"]
        assert got, "nothing received before the restart"
        for i, m in enumerate(got):
            if i % 2 == 0:
                driver.call("ack", id="c", handle=m["handle"])
                acked.add(m["id"])
            else:
                unacked.add(m["id"])
        cluster.stop(kill=True)  # kill -9: no clean shutdown
        cluster.start()
        seen_after: list[dict[str, Any]] = []
        errors: list[str] = []
        deadline = time.monotonic() + RECONNECT_WAIT_S
        while time.monotonic() < deadline:
            answer = driver.try_call("receive", id="c", max=32, invisible_s=30)
            if not answer.get("ok"):
                # The client's channel reconnects with a backoff (calls fail fast meanwhile).
                errors.append(f"{answer.get('error')}: {answer.get('message')}")
                time.sleep(0.5)
                continue
            for m in answer["messages"]:
                seen_after.append(m)
                driver.call("ack", id="c", handle=m["handle"])
            if {m["id"] for m in seen_after} | acked >= set(bodies):
                break
        ids_after = [m["id"] for m in seen_after]
        assert not acked & set(ids_after), "an acked message was delivered again"
        assert unacked <= set(ids_after), f"an unacked message was lost; errors: {errors[-3:]}"
        assert set(ids_after) | acked == set(bodies)
        assert len(ids_after) == len(set(ids_after))
    finally:
        driver.close()
        cluster.stop()


@pytest.fixture
def cpp(cluster: Cluster, tmp_path: Path) -> CppClient:
    problem = compat_venv_problem()
    if problem is not None:
        pytest.skip(f"C++ client unavailable: {problem}")
    return CppClient(COMPAT_PYTHON, cluster.namesrv, tmp_path / "cpp-home")


def test_cpp_4x_client_sends_5x_simple_consumer_receives(cluster: Cluster, driver: Rmq5Driver,
                                                        cpp: CppClient) -> None:
    topic = cluster.topic(unique("Cross4to5"))
    result = cpp.run("send_sync", group=unique("CppP"), warmup_topic=topic, messages=[
        {"topic": topic, "body": f"cpp{i}", "tags": "T", "keys": f"key{i}",
         "properties": {"origin": "cpp"}} for i in range(3)])
    assert all(r["status"] == "OK" for r in result["results"]), result
    driver.call("simple", id="c", endpoint=cluster.endpoint, group=unique("G5"), topic=topic,
                tag="T", await_s=2)
    got: list[dict[str, Any]] = []
    for _ in range(ROUNDS_MAX):
        got += driver.call("receive", id="c", max=32, invisible_s=30)["messages"]
        if len([m for m in got if m["body"].startswith("cpp")]) >= 3:
            break
    mine = sorted((m for m in got if m["body"].startswith("cpp")), key=lambda m: m["body"])
    assert [m["body"] for m in mine] == ["cpp0", "cpp1", "cpp2"]
    assert mine[1]["tag"] == "T" and mine[1]["keys"] == ["key1"]
    assert mine[1]["properties"].get("origin") == "cpp" and not any(m["corrupted"] for m in mine)


def test_5x_producer_sends_our_sdk_pulls_and_one_model_per_group(cluster: Cluster,
                                                                driver: Rmq5Driver) -> None:
    topic = cluster.topic(unique("Cross5to4"), queues=1)
    driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[topic])
    sent = driver.call("send", id="p", topic=topic, body="from5", tag="T5", keys=["kk"],
                       properties={"size": "7"})
    with orbitmq.PullConsumer(unique("Sdk"), namesrv=cluster.namesrv) as puller:
        [mq] = puller.fetch_queues(topic)
        msgs = wait_until("the 5.x message pulled", lambda: puller.pull(mq, 0, max_nums=32).messages)
    [m] = msgs
    assert bytes(m.body) == b"from5" and m.tags == "T5" and m.keys == ["kk"]
    assert m.properties["size"] == "7" and m.msg_id == sent["message_id"]
    # A group a live 4.x consumer heartbeats for refuses 5.x receives.
    group = unique("OneModel")
    consumer = orbitmq.PushConsumer(group, namesrv=cluster.namesrv)
    consumer.subscribe(topic, "*")(lambda messages, context: orbitmq.ConsumeResult.SUCCESS)
    consumer.start()
    try:
        driver.call("simple", id="c", endpoint=cluster.endpoint, group=group, topic=topic, await_s=1)
        refused = wait_until("a 5.x receive refused", lambda: _refused(driver))
        assert "one model at a time" in refused
    finally:
        consumer.shutdown()


def _refused(driver: Rmq5Driver) -> str | None:
    try:
        driver.call("receive", id="c", max=1, invisible_s=30)
    except DriverFailed as e:
        return str(e)
    return None
