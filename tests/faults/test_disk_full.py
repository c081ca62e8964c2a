"""A broker (a real child process) whose store lies on a small file system that runs full.

The test mounts a size-limited tmpfs (we run as root; skipped, saying why, where mounting is not
allowed) and fills it with ballast files while a broker serves sends:
- no room for a new commit log segment: sends are refused with SERVICE_NOT_AVAILABLE and a remark
  saying so; once the ballast goes, sends are taken again, without a restart;
- room in the segment but none for a queue's or the index's next page: the send is acknowledged,
  dispatch waits, later sends are refused saying why; once space is back, the waiting message
  becomes readable and sends are taken;
- used space above ``disk_space_warning_level_ratio``: refused, then taken once it falls.
The broker never dies (a store through a mapping into unallocated space would be a SIGBUS), and
every acknowledged message is read back after a clean restart and after a kill -9.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from orbitmq.client import Producer, PullConsumer, PullStatus
from orbitmq.errors import BrokerError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.message import Message
from orbitmq.testing import standalone_process
from orbitmq.testing.process import ServerProcess

MiB = 1 << 20
FS_SIZE = 32 * MiB
SEGMENT = MiB
BIG = 100 * 1024  # body of the messages that fill segments
TOPIC, FRESH = "DiskFull", "DiskFullFresh"
WAIT_S = 20.0  # bound of every wait for the broker to change its mind
# The file system is the test's own, so the default disk ratios apply (named, so that the harness
# does not turn them off as it does for brokers on the shared host disk).
BROKER_FLAGS = ("--mapped-file-size-commitlog", str(SEGMENT), "--flush-disk-type", "SYNC_FLUSH",
                "--disk-max-used-space-ratio", "0.75")


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "fs"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_SIZE}", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=True)


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _ballast(path: Path, size: int | None) -> None:
    """A file of ``size`` bytes of real data, or (None) as large as the file system allows."""
    chunk = b"\xab" * MiB
    with open(path, "wb") as f:
        written = 0
        while size is None or written < size:
            n = len(chunk) if size is None else min(len(chunk), size - written)
            try:
                f.write(chunk[:n])
                f.flush()
            except OSError as e:
                assert e.errno == errno.ENOSPC
                return
            written += n


def _queue(n: int) -> Any:
    def select(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        return sorted(queues, key=lambda q: q.queue_id)[n]

    return select


class Sender:
    """Sends without retries (a refusal surfaces as BrokerError) and remembers what was acked."""

    def __init__(self, namesrv: str, acked: dict[str, list[bytes]]) -> None:
        self.producer = Producer("disk-full-producer", namesrv, retry_times_when_send_failed=0,
                                 compress_over=1 << 30, send_timeout=10.0)
        self.producer.start()
        self.acked = acked  # topic -> bodies acknowledged, across broker restarts
        self.seq = sum(map(len, acked.values()))

    def send(self, topic: str, size: int, queue: int = 0) -> BrokerError | None:
        self.seq += 1
        body = self.seq.to_bytes(4, "big") + os.urandom(size)
        try:
            self.producer.send(Message(topic, body), _queue(queue))
        except BrokerError as e:
            return e
        self.acked[topic].append(body)
        return None

    def until_refused(self, topic: str, size: int, queue: int = 0, count_max: int = 400) -> BrokerError:
        for _ in range(count_max):
            refused = self.send(topic, size, queue)
            if refused is not None:
                return refused
        raise AssertionError(f"{count_max} sends of {size} bytes were all taken")

    def until_taken(self, topic: str, size: int, queue: int = 0) -> None:
        deadline = time.monotonic() + WAIT_S
        while (refused := self.send(topic, size, queue)) is not None:
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, refused
            assert time.monotonic() < deadline, f"still refused after {WAIT_S} s: {refused.remark}"
            time.sleep(0.1)

    def close(self) -> None:
        self.producer.shutdown()


def _read_all(namesrv: str, topic: str) -> list[bytes]:
    found: list[bytes] = []
    with PullConsumer("disk-full-reader", namesrv) as consumer:
        for mq in consumer.fetch_queues(topic):
            offset = 0
            while (got := consumer.pull(mq, offset, max_nums=64)).status is PullStatus.FOUND:
                found += [m.body for m in got.messages]
                offset = got.next_begin_offset
    return sorted(found)


def _wait_readable(namesrv: str, acked: dict[str, list[bytes]]) -> None:
    deadline = time.monotonic() + WAIT_S
    for topic, bodies in acked.items():
        while True:
            try:
                found = _read_all(namesrv, topic)
            except BrokerError as e:  # the route is registered a moment after the ready line
                assert e.code == ResponseCode.TOPIC_NOT_EXIST, e
                found = []
            if found == sorted(bodies) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert found == sorted(bodies), f"{topic}: {len(found)} of {len(bodies)} acknowledged read back"


def _start(store: Path, *flags: str) -> tuple[ServerProcess, str]:
    proc = standalone_process(str(store), *BROKER_FLAGS, *flags)
    return proc, proc.wait_ready("namesrv", "broker")["namesrv"]


def _alive(proc: ServerProcess) -> None:
    assert proc.proc.poll() is None, f"the broker died (rc={proc.proc.returncode}):\n{proc.output()[-3000:]}"


@pytest.mark.parametrize("store_type", ["default", "compact"])  # queue pages mapped, or pwritten
def test_full_disk_refuses_sends_keeps_what_was_acknowledged_and_recovers(
        small_fs: Path, store_type: str) -> None:
    store = small_fs / "store"
    typed = ("--store-type", store_type)
    # No clean rounds in the first part: the refusals there come from the failing allocations.
    broker, namesrv = _start(store, *typed, "--clean-resource-interval-ms", "600000")
    acked: dict[str, list[bytes]] = {TOPIC: [], FRESH: []}
    sender = Sender(namesrv, acked)
    try:
        assert sender.send(TOPIC, 10) is None
        assert sender.send(FRESH, 10, queue=0) is None  # FRESH's other queues have no files yet
        _ballast(small_fs / "ballast-1", _free(small_fs) - 2 * SEGMENT - SEGMENT // 2)

        # 1. No room for the next commit log segment.
        refused = sender.until_refused(TOPIC, BIG)
        _alive(broker)
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, refused
        assert "no space for a new commit log segment" in refused.remark, refused.remark
        assert len(sender.acked[TOPIC]) > 10
        (small_fs / "ballast-1").unlink()
        sender.until_taken(TOPIC, BIG)  # no restart: tried again within a second

        # 2. Room in the segment, none for the page of a queue that has no file yet.
        _ballast(small_fs / "ballast-2", None)
        assert _free(small_fs) < 4096
        assert sender.send(FRESH, 10, queue=3) is None  # stored: acknowledged
        refused = sender.until_refused(TOPIC, 10, count_max=50)
        _alive(broker)
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, refused
        assert "consume queue and index writes wait for space" in refused.remark, refused.remark
        (small_fs / "ballast-2").unlink()
        _wait_readable(namesrv, sender.acked)  # the waiting message was dispatched
        sender.until_taken(TOPIC, 10)
        _alive(broker)
    finally:
        sender.close()
        rc = broker.stop()
    assert rc == 0, broker.output()[-3000:]

    # 3. A clean restart; used space above the warning ratio refuses, then falls again.
    broker, namesrv = _start(store, *typed, "--clean-resource-interval-ms", "100",
                             "--disk-space-warning-level-ratio", "0.6")
    sender = Sender(namesrv, acked)
    try:
        _wait_readable(namesrv, acked)
        st = os.statvfs(small_fs)
        target_used = int(0.7 * st.f_blocks * st.f_frsize)
        _ballast(small_fs / "ballast-3", target_used - (st.f_blocks - st.f_bfree) * st.f_frsize)
        deadline = time.monotonic() + WAIT_S
        while (refused_or_none := sender.send(TOPIC, 10)) is None:
            assert time.monotonic() < deadline, "sends still taken above the warning ratio"
            time.sleep(0.05)
        assert refused_or_none.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert "above disk_space_warning_level_ratio 0.6" in refused_or_none.remark
        (small_fs / "ballast-3").unlink()
        sender.until_taken(TOPIC, 10)
        _alive(broker)
    finally:
        sender.close()
        broker.kill()  # kill -9: what was acknowledged (SYNC_FLUSH) is on the disk

    broker, namesrv = _start(store, *typed)
    try:
        _wait_readable(namesrv, acked)
    finally:
        assert broker.stop() == 0
