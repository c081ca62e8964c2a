"""Lite topics with OrbitMQ's SDK (remoting): Message(lite_topic=...) sends, LiteConsumer reads
each subscribed lite topic in order from the group's committed offset, and `orbitmq send
--lite-topic` / `orbitmq consume --lite` do the same from the command line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import orbitmq
from orbitmq.testing import ServerProcess, standalone_process


@pytest.fixture
def namesrv(tmp_path: Path) -> Iterator[str]:
    proc: ServerProcess = standalone_process(str(tmp_path / "store"))
    try:
        yield proc.wait_ready("namesrv", "broker")["namesrv"]
    finally:
        proc.stop()


def _parent(namesrv: str, name: str) -> str:
    with orbitmq.Admin(namesrv=namesrv) as admin:
        admin.create_topic(name, read_queue_nums=1, write_queue_nums=1,
                           attributes="+message.type=LITE")
    return name


def test_sdk_lite_consumer_reads_its_lite_topics_in_order_from_its_offset(namesrv: str) -> None:
    parent = _parent(namesrv, "Sessions")
    with orbitmq.Producer("lite-p", namesrv=namesrv) as producer:
        for i in range(4):
            for lite in ("s1", "s2", "s3"):
                producer.send(orbitmq.Message(parent, f"{lite}:{i}".encode(), lite_topic=lite))
    with orbitmq.LiteConsumer("LiteG", parent, namesrv=namesrv) as consumer:
        consumer.subscribe_lite("s1")
        consumer.subscribe_lite("s2")
        got: list[orbitmq.MessageExt] = []
        for _ in range(20):
            got += consumer.poll(3, timeout=2)
            if len(got) >= 8:
                break
        by_lite: dict[str, list[str]] = {}
        for m in got:
            assert m.topic == parent
            by_lite.setdefault(m.properties["__LITE_TOPIC"], []).append(m.body.decode())
        assert by_lite == {"s1": [f"s1:{i}" for i in range(4)], "s2": [f"s2:{i}" for i in range(4)]}
        consumer.unsubscribe_lite("s2")
        with orbitmq.Producer("lite-p2", namesrv=namesrv) as producer:
            producer.send(orbitmq.Message(parent, b"s1:4", lite_topic="s1"))
            producer.send(orbitmq.Message(parent, b"s2:4", lite_topic="s2"))
        more = consumer.poll(8, timeout=5)
        assert [m.body for m in more] == [b"s1:4"]
    # Committed at shutdown: the group goes on after what it consumed.
    with orbitmq.LiteConsumer("LiteG", parent, namesrv=namesrv) as again:
        again.subscribe_lite("s1")
        again.subscribe_lite("s3")
        rest = again.poll(16, timeout=5)
        assert sorted(m.body.decode() for m in rest) == [f"s3:{i}" for i in range(4)]
    with pytest.raises(orbitmq.ClientError):
        orbitmq.LiteConsumer("LiteG", parent, namesrv=namesrv).subscribe_lite("no spaces")


def test_cli_sends_and_consumes_a_lite_topic(namesrv: str) -> None:
    parent = _parent(namesrv, "CliSessions")
    cli = [sys.executable, "-m", "orbitmq.cli.main"]
    sent = subprocess.run([*cli, "send", "--namesrv", namesrv, "-t", parent, "--lite-topic", "job-7",
                           "--lines", "one\ntwo"], capture_output=True, text=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    got = subprocess.run([*cli, "consume", "--namesrv", namesrv, "-t", parent, "-g", "CliLite",
                          "--lite", "job-7", "--count", "2", "--timeout", "20"],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    assert "one" in got.stdout and "two" in got.stdout
    assert got.stdout.index("one") < got.stdout.index("two")
    bad = subprocess.run([*cli, "send", "--namesrv", namesrv, "-t", parent, "--lite-topic", "a b",
                          "x"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "lite topic" in bad.stderr


def test_the_docs_sdk_lite_block_runs(namesrv: str, capsys: pytest.CaptureFixture[str]) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "rocketmq5.md").read_text()
    start = doc.index('import orbitmq\n\nwith orbitmq.Producer("sessions-app"')
    block = doc[start:doc.index("```", start)]
    _parent(namesrv, "Sessions")
    exec(compile(block.replace("127.0.0.1:9876", namesrv), "rocketmq5.md", "exec"), {})
    assert capsys.readouterr().out == "session-1 b'hello'\n"


def test_async_lite_consumer(namesrv: str) -> None:
    import asyncio

    parent = _parent(namesrv, "AsyncSessions")
    with orbitmq.Producer("lite-ap", namesrv=namesrv) as producer:
        for i in range(3):
            producer.send(orbitmq.Message(parent, f"a{i}".encode(), lite_topic="a"))

    async def go() -> list[bytes]:
        async with orbitmq.AsyncLiteConsumer("AsyncLiteG", parent, namesrv=namesrv) as consumer:
            consumer.subscribe_lite("a")
            return [m.body for m in await consumer.poll(8, timeout=5)]

    assert asyncio.run(go()) == [b"a0", b"a1", b"a2"]
