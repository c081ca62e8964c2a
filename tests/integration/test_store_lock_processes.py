"""A store directory is opened by one broker at a time (real processes, real sockets).

A second ``orbitmq broker`` or ``orbitmq standalone`` on a store in use exits at once with one line
naming the directory and the holder's pid, without touching the abort file or the checkpoint; the
first keeps serving, and every message it acknowledged survives a clean restart and a kill -9.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from orbitmq.client import Producer, PullConsumer, PullStatus
from orbitmq.errors import BrokerError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.message import Message
from orbitmq.testing import standalone_process
from orbitmq.testing.process import ServerProcess

TOPIC = "LockedStore"
EXIT_WAIT_S = 5.0  # the bound on a refused broker's exit (the acceptance)
READ_WAIT_S = 30.0


def _send(namesrv: str, first: int, count: int) -> list[bytes]:
    bodies = [f"locked-{i}".encode() for i in range(first, first + count)]
    with Producer("lock-producer", namesrv) as producer:
        for body in bodies:
            producer.send(Message(TOPIC, body))
    return bodies


def _read_all(consumer: PullConsumer) -> list[bytes]:
    found: list[bytes] = []
    for mq in consumer.fetch_queues(TOPIC):
        offset = 0
        for _ in range(1000):
            result = consumer.pull(mq, offset, max_nums=256)
            if result.status is not PullStatus.FOUND:
                break
            found += [m.body for m in result.messages]
            offset = result.next_begin_offset
    return found


def _assert_readable(namesrv: str, sent: list[bytes]) -> None:
    """Every message sent is read back, once the broker has registered its route and dispatched
    what it stored (both asynchronous, as in RocketMQ): waits up to READ_WAIT_S."""
    deadline = time.monotonic() + READ_WAIT_S
    found: list[bytes] = []
    with PullConsumer("lock-reader", namesrv) as consumer:
        while True:
            try:
                found = _read_all(consumer)
            except BrokerError as e:  # no route yet
                if e.code != ResponseCode.TOPIC_NOT_EXIST:
                    raise
            if sorted(found) == sorted(sent) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert sorted(found) == sorted(sent), f"{len(found)} of {len(sent)} read back"


def _stamp(path: Path) -> tuple[int, int, bytes]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, path.read_bytes()


def _refused(args: list[str], store: Path, holder_pid: int) -> None:
    """Run a second server on ``store``: it must exit non-zero within the bound, printing one
    line that names the directory and the holder's pid, and no traceback."""
    second = ServerProcess(args)
    try:
        rc = second.proc.wait(EXIT_WAIT_S)
    finally:
        second.kill()
    out = [line for line in second.output().splitlines() if line.strip()]
    assert rc != 0, out
    assert len(out) == 1, out
    assert str(store.resolve()) in out[0] and f"process {holder_pid}" in out[0], out
    assert "Traceback" not in second.output()


def test_a_second_broker_on_a_store_in_use_exits_and_acknowledged_messages_survive(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    first = standalone_process(str(store))
    try:
        namesrv = first.wait_ready("namesrv", "broker")["namesrv"]
        holder = first.proc.pid
        assert (store / "lock").read_text().strip() == str(holder)
        # Idle: the first broker rewrites neither file now, so any change would be the second's.
        abort, checkpoint = store / "abort", store / "checkpoint"
        idle = (_stamp(abort), _stamp(checkpoint))
        _refused(["broker", "--store", str(store), "--namesrv", namesrv, "--port", "0", "--grpc-port", "0"], store, holder)
        _refused(["standalone", "--store", str(store), "--namesrv-port", "0", "--broker-port", "0"],
                 store, holder)
        assert (_stamp(abort), _stamp(checkpoint)) == idle

        sent = _send(namesrv, 0, 20)
        _refused(["broker", "--store", str(store), "--namesrv", namesrv, "--port", "0", "--grpc-port", "0"], store, holder)
        sent += _send(namesrv, 20, 20)  # the first broker serves on
        _assert_readable(namesrv, sent)
        assert first.stop() == 0
    finally:
        first.stop()
    assert not (store / "abort").exists()

    again = standalone_process(str(store))  # clean restart
    try:
        namesrv = again.wait_ready("namesrv", "broker")["namesrv"]
        _assert_readable(namesrv, sent)
        sent += _send(namesrv, 40, 10)
        again.kill()  # kill -9: the kernel drops the lock with the process
    finally:
        again.kill()
    assert (store / "abort").exists()

    last = standalone_process(str(store))
    try:
        namesrv = last.wait_ready("namesrv", "broker")["namesrv"]
        assert (store / "lock").read_text().strip() == str(last.proc.pid)
        _assert_readable(namesrv, sent)
    finally:
        assert last.stop() == 0
    assert os.path.getsize(store / "lock") == 0
