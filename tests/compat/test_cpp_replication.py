"""The official C++ client and a replicated broker set (issue 15): it reads from the slave after
the master dies, and the acceptance run with C++ and SDK producers sending while the master is
killed at a random moment: every message answered SEND_OK is readable from the slave, checked
with our SDK and with the C++ client (``make test``: 2 seeds of 3,000 messages; ``--run-slow``:
20 seeds of 100,000)."""

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
from test_replication_failover import _produce, read_all_from  # noqa: E402

pytestmark = pytest.mark.compat
CPP_TIMEOUT_S = 900.0


def _cpp_messages(topic: str, seed: int, numbers: range) -> list[dict[str, object]]:
    rng = random.Random(seed)
    return [{"topic": topic, "body": f"cpp-{seed}-{n}-" + "x" * rng.choice((8, 300, 1200)),
             "tags": "cpp", "keys": f"cpp{n}", "properties": {"seq": str(n)}} for n in numbers]


def _cpp_read(cpp: CppClient, topic: str, group: str) -> dict[str, dict[str, object]]:
    result = cpp.run("pull", CPP_TIMEOUT_S, group=group, topic=topic, properties=["seq"])
    assert "error" not in result, result.get("message")
    return {m["id"]: m for m in result["messages"]}


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


def run_seed(compat_python: Path, tmp_path: Path, seed: int, count: int) -> int:
    """SDK and C++ producers, the master killed at a random moment, both clients read the
    slave; returns how many messages were acknowledged."""
    rng = random.Random(seed)
    topic = f"CppFailover{seed}"
    with BrokerSetProcesses(tmp_path / f"set{seed}") as brokers:
        brokers.wait_slaves_connected()
        cpp = CppClient(compat_python, brokers.namesrv, tmp_path / f"cpp-home-{seed}")
        half = count // 2
        started = tmp_path / f"cpp-started-{seed}"
        driver = cpp.start("send_sync", CPP_TIMEOUT_S, group=f"cpp-p{seed}",
                           messages=_cpp_messages(topic, seed, range(half)),
                           stop_after_errors=5, started_file=str(started),
                           warmup_topic=topic)
        acked: dict[int, tuple[str, bytes]] = {}
        stop = threading.Event()
        sdk = threading.Thread(target=_produce, args=(brokers.namesrv, topic, seed,
                                                      range(half, count), acked, stop))
        deadline = time.monotonic() + 120
        while not started.exists():
            assert time.monotonic() < deadline, "the C++ producer did not start"
            time.sleep(0.05)
        sdk.start()
        kill_after = rng.randrange(1, half)
        while len(acked) < kill_after and sdk.is_alive():
            time.sleep(0.005)
        brokers.kill(0)
        sdk.join(300)
        cpp_results = driver.result()["results"]
        cpp_acked = {r["msg_id"]: n for n, r in enumerate(cpp_results)
                     if r.get("status") == "SEND_OK"}
        ours = read_all_from(brokers.namesrv, topic, f"sdk-reader{seed}")
        theirs = _cpp_read(cpp, topic, f"cpp-reader{seed}")
        for reader, stored in (("SDK", ours), ("C++", theirs)):
            missing = [n for n, (msg_id, _) in acked.items() if msg_id not in stored]
            missing += [n for msg_id, n in cpp_acked.items() if msg_id not in stored]
            assert not missing, f"seed {seed}: {len(missing)} SEND_OK messages not read by {reader}"
        for msg_id, n in cpp_acked.items():
            body, props = ours[msg_id]
            assert body.decode().startswith(f"cpp-{seed}-{n}-") and props["seq"] == str(n)
        for n, (msg_id, body) in acked.items():
            m = theirs[msg_id]
            assert base64.b64decode(m["body_b64"]) == body
            assert m["properties"]["seq"] == str(n)
        return len(acked) + len(cpp_acked)


@pytest.mark.parametrize("seed", range(2))
def test_cpp_and_sdk_send_ok_survive_a_master_kill(compat_python: Path, tmp_path: Path,
                                                    seed: int) -> None:
    assert run_seed(compat_python, tmp_path, seed, 3_000) > 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20))
def test_cpp_and_sdk_send_ok_survive_a_master_kill_full(compat_python: Path, tmp_path: Path,
                                                         seed: int) -> None:
    assert run_seed(compat_python, tmp_path, seed, 100_000) > 0
