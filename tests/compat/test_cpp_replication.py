"""The official C++ client and a replicated broker set (issue 15): it reads from the slave after
the master dies, and the acceptance run with C++ and SDK producers sending while broker-a's
master is killed at a random moment (the broker sets of tests/faults/test_replication_failover.py:
sends fail over to broker-b, so every message is sent): every message answered SEND_OK is
readable from the slave, body, tags, keys and properties intact, checked with our SDK and with
the C++ client (``make test``: 2 seeds of 3,000 messages; ``--run-slow``: 20 seeds of 100,000).
Each seed prints a ``CPP-KILL-RUN`` line."""

from __future__ import annotations

import base64
import random
import sys
import threading
import time
from pathlib import Path

import pytest
from compat_support import CppClient

from orbitmq import Message, Producer, SendStatus
from orbitmq.testing.broker_set import BrokerSetProcesses

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from test_replication_failover import (  # noqa: E402
    KILLED,
    Sent,
    check_acked,
    intact,
    message,
    produce,
    read_all_from,
    start_broker_sets,
    wait_route_lists_the_slave_alone,
)

pytestmark = pytest.mark.compat
CPP_TIMEOUT_S = 1800.0
USER_PROPERTIES = ["seq", "seed"]


def _cpp_read(cpp: CppClient, topic: str, group: str) -> dict[str, dict[str, object]]:
    """The whole topic pulled by the C++ client, queue by queue from offset 0 to NO_NEW_MSG
    (msg id -> what it tells of the message). Through librocketmq's Pull with our offsets, not
    the wrapper's PullConsumer.pull: that keys its offsets by topic and queue id alone, so a
    second broker set's queue 0 is read from where the first one's ended."""
    result = cpp.run("pull_raw", CPP_TIMEOUT_S, group=group, topic=topic,
                     properties=USER_PROPERTIES, max_pulls=1_000_000)
    assert "pulled" in result, result
    for queue in result["pulled"]:
        last = queue["pulls"][-1]["status"] if queue["pulls"] else "no pull"
        assert last == "NO_NEW_MSG", (queue["broker_name"], queue["queue_id"], queue["pulls"][-3:])
    return {m["id"]: {**m, "broker_name": queue["broker_name"]}
            for queue in result["pulled"] for m in queue["messages"]}


def test_the_cpp_client_reads_from_the_slave_after_the_master_dies(
        compat_python: Path, tmp_path: Path) -> None:
    topic = "CppFromSlave"
    with BrokerSetProcesses(tmp_path / "set") as brokers:
        brokers.wait_slaves_connected()
        sent = {}
        with Producer("cpp-slave-p", namesrv=brokers.namesrv) as producer:
            for i in range(300):
                r = producer.send(Message(topic, b"m%d" % i, keys=[f"k{i}"],
                                          properties={"seq": str(i)}))
                assert r.status is SendStatus.OK
                sent[r.msg_id] = i
        brokers.kill(0)
        cpp = CppClient(compat_python, brokers.namesrv, tmp_path / "cpp-home")
        got = _cpp_read(cpp, topic, "cpp-slave-reader")
        assert set(got) == set(sent)
        for msg_id, m in got.items():
            assert base64.b64decode(m["body_b64"]) == b"m%d" % sent[msg_id]
            assert m["properties"]["seq"] == str(sent[msg_id])


def _cpp_spec(topic: str, seed: int, n: int) -> dict[str, object]:
    """Message ``n`` as the C++ driver builds it (the same message as the SDK's ``message``)."""
    m = message(topic, seed, n)
    return {"topic": topic, "body": m.body.decode("latin-1"), "tags": m.tags,
            "keys": " ".join(m.keys), "properties": dict(m.properties)}


def _cpp_as_sent(topic: str, seed: int, n: int) -> Message:
    """What the C++ client stores for ``_cpp_spec``: the driver encodes its text as UTF-8."""
    m = message(topic, seed, n)
    return Message(topic, m.body.decode("latin-1").encode("utf-8"), tags=m.tags, keys=m.keys,
                   properties=dict(m.properties))


def _check_cpp_read(theirs: dict[str, dict[str, object]], expected: dict[str, Message],
                    seed: int) -> None:
    """Every acknowledged message (msg id -> as sent) read by the C++ client, intact."""
    missing = [msg_id for msg_id in expected if msg_id not in theirs]
    assert not missing, f"seed {seed}: {len(missing)} SEND_OK messages not read by C++"
    for msg_id, sent in expected.items():
        m = theirs[msg_id]
        props = {k: v for k, v in m["properties"].items() if v is not None}  # type: ignore[union-attr]
        problem = intact(sent, base64.b64decode(m["body_b64"]), props)  # type: ignore[arg-type]
        assert problem is None, f"seed {seed}: {msg_id} read by C++: {problem}"


def run_seed(compat_python: Path, tmp_path: Path, seed: int, count: int) -> str:
    """SDK and C++ producers (half of ``count`` each), broker-a's master killed at a random
    moment, both clients read the whole topic; returns the run's summary line."""
    began = time.monotonic()
    rng = random.Random(seed)
    topic = f"CppFailover{seed}"
    half = count // 2
    sets = start_broker_sets(tmp_path / f"set{seed}", topic)
    try:
        cpp = CppClient(compat_python, sets.namesrv, tmp_path / f"cpp-home-{seed}")
        started = tmp_path / f"cpp-started-{seed}"
        driver = cpp.start("send_sync", CPP_TIMEOUT_S, group=f"cpp-p{seed}",
                           messages=[_cpp_spec(topic, seed, n) for n in range(half)],
                           stop_after_errors=20, started_file=str(started),
                           warmup_topic=topic)
        sent, stop = Sent(), threading.Event()
        sdk = threading.Thread(target=produce, args=(sets.namesrv, topic, seed,
                                                     range(half, 2 * half), sent, stop))
        deadline = time.monotonic() + 120
        while not started.exists():
            assert time.monotonic() < deadline, "the C++ producer did not start"
            time.sleep(0.05)
        sdk.start()
        kill_after = rng.randrange(1, max(2, half * 2 // 5))  # SDK sends broker-a answered OK
        while sent.on(KILLED) < kill_after and sdk.is_alive():
            time.sleep(0.002)
        assert sdk.is_alive(), "the SDK producer ended before the kill"
        sets.a.kill(0)
        kill_at = sent.attempted
        sdk.join(CPP_TIMEOUT_S)
        assert not sdk.is_alive(), "the SDK producer did not stop"
        results = driver.result()["results"]
        cpp_acked = {r["msg_id"]: n for n, r in enumerate(results) if r.get("status") == "OK"}
        not_sent = sum(1 for r in results if r.get("error") == "NotSent")
        assert sent.attempted == half and len(results) == half and not not_sent, (
            sent.attempted, len(results), not_sent)
        wait_route_lists_the_slave_alone(sets.namesrv, topic)
        ours = read_all_from(sets.namesrv, topic, f"sdk-reader{seed}")
        check_acked(ours, sent.acked, topic, seed, "SDK")
        for msg_id, n in cpp_acked.items():
            assert msg_id in ours, f"seed {seed}: C++ message {n} not read by the SDK"
            problem = intact(_cpp_as_sent(topic, seed, n), *ours[msg_id])
            assert problem is None, f"seed {seed}: C++ message {n} read by the SDK: {problem}"
        theirs = _cpp_read(cpp, topic, f"cpp-reader{seed}")
        expected = {msg_id: message(topic, seed, n) for n, (msg_id, _) in sent.acked.items()}
        expected.update({msg_id: _cpp_as_sent(topic, seed, n) for msg_id, n in cpp_acked.items()})
        _check_cpp_read(theirs, expected, seed)
        cpp_errors = len(results) - len(cpp_acked)
        cpp_on_a = sum(1 for msg_id in cpp_acked if theirs[msg_id]["broker_name"] == KILLED)
        assert cpp_acked, f"no C++ send answered OK: {results[:3]}"
        return (f"CPP-KILL-RUN seed={seed} count={2 * half} sdk_attempted={sent.attempted} "
                f"sdk_send_ok={len(sent.acked)} (broker-a {sent.on(KILLED)}) "
                f"cpp_attempted={len(results)} cpp_send_ok={len(cpp_acked)} (broker-a {cpp_on_a}) "
                f"cpp_not_ok={cpp_errors} killed_after_sdk_sends={kill_at} "
                f"read_by_sdk={len(ours)} read_by_cpp={len(theirs)} "
                f"sdk_outcomes={dict(sorted(sent.outcomes.items()))} "
                f"seconds={time.monotonic() - began:.1f}")
    finally:
        sets.close()


@pytest.mark.parametrize("seed", range(2))
def test_cpp_and_sdk_send_ok_survive_a_master_kill(compat_python: Path, tmp_path: Path,
                                                    seed: int) -> None:
    print(run_seed(compat_python, tmp_path, seed, 3_000))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20))
def test_cpp_and_sdk_send_ok_survive_a_master_kill_full(compat_python: Path, tmp_path: Path,
                                                         seed: int) -> None:
    print(run_seed(compat_python, tmp_path, seed, 100_000))
