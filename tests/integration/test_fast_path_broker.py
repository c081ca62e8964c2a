"""The native fast path inside a real broker, over real sockets: it waits for the durability
conditions as the Python path does (a failed sync answers FLUSH_DISK_TIMEOUT, never SUCCESS),
hands everything to the Python path while the store refuses puts or while it is suspended, and
keeps the answers of one connection in request order around a request the Python path answers
later."""

from __future__ import annotations

import dataclasses
import re
import select
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_broker_support import BrokerHarness, broker_config

from orbitmq.broker.native import NATIVE
from orbitmq.config import BrokerRole, FlushDiskType
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand, decode_command, encode
from orbitmq.protocol.stored import iter_stored_messages
from orbitmq.store import PutMessageStatus, flush
from orbitmq.testing.waits import EVENT_WAIT_S

pytestmark = pytest.mark.skipif(NATIVE is None, reason="C speedups not built or turned off")

TOPIC = "FastBroker"


def _harness(path: Path, flush: FlushDiskType, fast: bool = True) -> BrokerHarness:
    cfg = broker_config(path, native_fast_path_enable=fast)
    cfg = dataclasses.replace(cfg, store=dataclasses.replace(cfg.store, flush_disk_type=flush))
    h = BrokerHarness(cfg)
    h.on_loop(lambda: h.broker.topics.update(TopicConfig(TOPIC, 4, 4)))
    return h


@pytest.fixture
def sync_h(tmp_path: Path) -> Iterator[BrokerHarness]:
    h = _harness(tmp_path / "sync", FlushDiskType.SYNC_FLUSH)
    try:
        yield h
    finally:
        h.close()


def _send(opaque: int, topic: str = TOPIC, body: bytes = b"body") -> bytes:
    ext = {"a": "p", "b": topic, "c": "TBW102", "d": "4", "e": str(opaque % 4), "f": "0",
           "g": "1767000000000", "h": "0", "i": f"UNIQ_KEY\x01U{opaque}\x02", "j": "0",
           "k": "false", "m": "false"}
    return encode(RemotingCommand(code=int(RequestCode.SEND_MESSAGE_V2), opaque=opaque,
                                  ext_fields=ext, body=body))


def _exchange(h: BrokerHarness, data: bytes, answers: int) -> list[RemotingCommand]:
    with socket.create_connection(("127.0.0.1", h.port), timeout=15) as sock:
        sock.sendall(data)
        buf, out = bytearray(), []
        while len(out) < answers:
            chunk = sock.recv(1 << 16)
            assert chunk, f"connection closed after {len(out)} answers"
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                total = struct.unpack_from(">i", buf)[0]
                out.append(decode_command(bytes(buf[4 : 4 + total])))
                del buf[: 4 + total]
        return out


class _FailingSync:
    """A segment's file region whose syncs fail (EIO), as a dying disk's would."""

    def __init__(self, region: Any) -> None:
        self._region = region
        self.buf = region.buf

    def sync(self, start: int, end: int) -> None:
        raise OSError(5, "Input/output error (injected)")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._region, name)


def _fail_syncs(h: BrokerHarness) -> None:
    def swap() -> None:
        mf = h.broker.store.commit_log.mfq.files[-1]
        mf._region = _FailingSync(mf._region)

    h.on_loop(swap)


def _counts(h: BrokerHarness) -> dict[str, int]:
    assert h.broker.fast_path is not None
    return h.on_loop(h.broker.fast_path.counts)


def test_a_failed_sync_answers_flush_disk_timeout_never_success(sync_h: BrokerHarness) -> None:
    assert _exchange(sync_h, _send(1), 1)[0].code == ResponseCode.SUCCESS  # a segment exists
    handled = _counts(sync_h)["handled"]
    _fail_syncs(sync_h)
    answers = _exchange(sync_h, b"".join(_send(i) for i in range(2, 6)), 4)
    assert _counts(sync_h)["handled"] > handled, "the fast path took none of them"
    first = answers[0]
    assert first.code == ResponseCode.FLUSH_DISK_TIMEOUT, (first.code, first.remark)
    assert first.remark == "flush to disk timed out" and "msgId" in first.ext_fields
    # then the store refuses puts (the failed sync holds): the Python path says why
    refused = _exchange(sync_h, _send(9), 1)[0]
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert "syncing the commit log failed" in (refused.remark or "")


def test_a_lone_producers_sends_are_synced_and_answered_in_their_read(
        sync_h: BrokerHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    """One send in flight at a time (the one-at-a-time workload): each read is synced by the
    loop itself and answered right away (DurableSave.sync_alone), no group wait; and each
    answer comes after a sync that covered its message."""
    monkeypatch.setattr(flush, "INLINE_SYNC_MAX_S", 3600.0)  # a slow shared disk changes nothing
    saver = sync_h.broker.saver
    statuses: list[object] = []
    alone = saver.sync_alone

    def spy(end: int) -> object:
        status = alone(end)
        statuses.append(status)
        return status

    sync_h.on_loop(lambda: setattr(saver, "sync_alone", spy))
    store = sync_h.broker.store
    with socket.create_connection(("127.0.0.1", sync_h.port), timeout=15) as sock:
        for i in range(1, 9):
            sock.sendall(_send(i))
            buf = bytearray()
            while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
                chunk = sock.recv(1 << 16)
                assert chunk, "connection closed"
                buf += chunk
            answer = decode_command(bytes(buf[4:]))
            assert answer.code == ResponseCode.SUCCESS, (answer.code, answer.remark)
            # The answer names the message's commit log offset: a sync covered it already.
            offset = int(answer.ext_fields["msgId"][-16:], 16)
            assert sync_h.on_loop(store.flushed_physical_offset) > offset
    # The first read made the segment (the Python path); the later ones, alone, were synced
    # in their read (the second may still see the first's iteration as a busy one).
    assert statuses.count(PutMessageStatus.PUT_OK) >= 6, statuses
    assert sync_h.on_loop(lambda: saver._groups) == {}


def test_failed_sync_answers_are_the_python_paths(tmp_path: Path) -> None:
    got = []
    for fast in (True, False):
        h = _harness(tmp_path / str(fast), FlushDiskType.SYNC_FLUSH, fast)
        try:
            _exchange(h, _send(1), 1)
            _fail_syncs(h)
            answers = _exchange(h, b"".join(_send(i) for i in range(2, 5)), 3)
            port = f"{h.port:08X}"
            got.append([(a.code, a.remark, {k: v.replace(port, "PORT") for k, v in
                                            a.ext_fields.items()}) for a in answers])
        finally:
            h.close()
    assert got[0] == got[1]


def test_suspended_it_takes_nothing(tmp_path: Path) -> None:
    h = _harness(tmp_path / "s", FlushDiskType.ASYNC_FLUSH)
    try:
        fp = h.broker.fast_path
        assert fp is not None and fp.accepting
        h.on_loop(lambda: fp.suspend("role", "a slave takes no sends"))
        assert not fp.accepting
        before = _counts(h)
        assert _exchange(h, _send(1), 1)[0].code == ResponseCode.SUCCESS  # the Python path
        assert _counts(h) == before
        h.on_loop(lambda: fp.resume("role"))
        assert _exchange(h, _send(2), 1)[0].code == ResponseCode.SUCCESS
        assert _counts(h)["handled"] == before["handled"] + 1
    finally:
        h.close()


def test_off_by_config_and_on_a_slave(tmp_path: Path) -> None:
    h = _harness(tmp_path / "off", FlushDiskType.ASYNC_FLUSH, fast=False)
    try:
        assert h.broker.fast_path is None
    finally:
        h.close()
    h = BrokerHarness(broker_config(tmp_path / "slave", broker_id=1, broker_role=BrokerRole.SLAVE))
    try:
        assert h.broker.fast_path is not None and not h.broker.fast_path.accepting
    finally:
        h.close()
    # a role change while running (a failover) turns it off and on again
    h = _harness(tmp_path / "changes", FlushDiskType.ASYNC_FLUSH)
    try:
        fast = h.broker.fast_path
        assert fast is not None and fast.accepting
        h.on_loop(lambda: h.broker.role.change(BrokerRole.SLAVE, 1))
        assert not fast.accepting
        h.on_loop(lambda: h.broker.role.change(BrokerRole.ASYNC_MASTER, 0))
        assert fast.accepting
    finally:
        h.close()


def test_answers_keep_request_order_around_an_answer_given_later(tmp_path: Path) -> None:
    """A send that creates its topic is answered once its route is published (later); the plain
    sends read with it must not overtake it, nor a read that waits for the dispatch."""
    h = _harness(tmp_path / "o", FlushDiskType.ASYNC_FLUSH)
    try:
        wait = encode(RemotingCommand(code=int(RequestCode.GET_MAX_OFFSET), opaque=3,
                                      ext_fields={"topic": TOPIC, "queueId": "0"}))
        data = b"".join([_send(1), _send(2, topic="FastBrokerNew"), wait,
                         *(_send(i) for i in range(4, 40))])
        answers = _exchange(h, data, 39)
        assert [a.opaque for a in answers] == list(range(1, 40))
        assert all(a.code == ResponseCode.SUCCESS for a in answers)
        assert _counts(h)["handled"] >= 36
    finally:
        h.close()


def _read_answer(sock: socket.socket) -> RemotingCommand:
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
        chunk = sock.recv(1 << 16)
        assert chunk, "connection closed before an answer"
        buf += chunk
    total = struct.unpack_from(">i", buf)[0]
    assert len(buf) == 4 + total, "one answer expected"
    return decode_command(buf[4:])


def test_a_lone_send_reaches_a_waiting_consumer_before_its_answer(tmp_path: Path) -> None:
    """A read of one send to a topic a pull waits on: the dispatch and the pull's answer first,
    then the send's answer (DurableSave.deliver_first). The loopback has put the pull's answer
    in the consumer's socket before the producer's answer was even written. The pulls are read
    in C (FastPath.peek) and those at the queue's end held without a read."""
    h = _harness(tmp_path / "d", FlushDiskType.ASYNC_FLUSH)
    try:
        with socket.create_connection(("127.0.0.1", h.port), timeout=15) as consumer, \
                socket.create_connection(("127.0.0.1", h.port), timeout=15) as producer:
            producer.sendall(_send(4))  # the first segment (a fresh store has none: Python's)
            assert _read_answer(producer).code == ResponseCode.SUCCESS
            for round_ in range(3):
                pull = RemotingCommand.request(RequestCode.PULL_MESSAGE, h.pull_fields(
                    TOPIC, 1, round_, suspend_ms=20_000))
                pull.opaque = 100 + round_
                consumer.sendall(encode(pull))
                deadline = time.monotonic() + EVENT_WAIT_S
                while h.on_loop(lambda: h.broker.pull.long_poll.held_count) != 1:
                    assert time.monotonic() < deadline, "the pull was not held"
                    time.sleep(0.005)
                producer.sendall(_send(4 * round_ + 1, body=f"m{round_}".encode()))
                ack = _read_answer(producer)
                assert (ack.code, ack.opaque) == (ResponseCode.SUCCESS, 4 * round_ + 1)
                ready, _, _ = select.select([consumer], [], [], 0)
                assert ready, "the send was answered before its waiting consumer had it"
                answer = _read_answer(consumer)
                assert (answer.code, answer.opaque) == (ResponseCode.SUCCESS, 100 + round_)
                assert [m.body for m in iter_stored_messages(answer.body)] == [f"m{round_}".encode()]
        counts = _counts(h)
        assert counts["handled"] >= 3  # the fast path took the sends of the rounds
        assert counts["pulls"] == 3  # and read the pulls in C (held at the queue's end: 1, 2)
    finally:
        h.close()


def test_the_docs_example_runs() -> None:
    """docs/performance.md's example, as written: a plain send answered by the fast path."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "performance.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "0", "1"]


def test_a_permission_wiped_at_runtime_refuses_sends_as_the_python_path_does(tmp_path: Path) -> None:
    """UPDATE_BROKER_CONFIG brokerPermission=4 changes the live config: from the next read on
    the fast path leaves sends to the Python path, which refuses them NO_PERMISSION."""
    h = _harness(tmp_path / "p", FlushDiskType.ASYNC_FLUSH)
    try:
        assert _exchange(h, _send(1), 1)[0].code == ResponseCode.SUCCESS
        assert _exchange(h, _send(2), 1)[0].code == ResponseCode.SUCCESS
        handled = _counts(h)["handled"]
        assert handled >= 1
        changed = h.invoke(RequestCode.UPDATE_BROKER_CONFIG, {}, b"brokerPermission=4\n")
        assert changed.code == ResponseCode.SUCCESS, changed.remark
        refused = _exchange(h, _send(3), 1)[0]
        assert refused.code == ResponseCode.NO_PERMISSION, (refused.code, refused.remark)
        assert _counts(h)["handled"] == handled
    finally:
        h.close()
