"""The native fast path against the Python path, byte for byte (issue 16 item 3).

The same seeded request streams (fast_path_streams.py) go over a real socket, cut at random
places, to two brokers that differ only in ``native_fast_path_enable``. Their answers must be
the same bytes (each broker's own store host in the message ids set aside), their commit logs the
same bytes (but for the store time and the two ports, which differ by nature), their consume
queues, queue-offset tables and send counters equal. The fast path's broker must also answer in
request order, and must have taken a fair share of the sends itself (else the test proves
nothing).
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from fast_path_streams import (
    MAX_MESSAGE_SIZE,
    PLAIN_TOPIC,
    QUEUES,
    READ_ONLY_TOPIC,
    chunks,
    request_stream,
)
from test_broker_support import BrokerHarness, broker_config

from orbitmq.broker.native import NATIVE
from orbitmq.config import FlushDiskType
from orbitmq.protocol import stored
from orbitmq.protocol.bodies import Perm, TopicConfig

pytestmark = pytest.mark.skipif(NATIVE is None, reason="C speedups not built or turned off")

ANSWER_WAIT_S = 30.0
# Offsets in a stored message with IPv4 hosts (orbitmq.protocol.stored): BORNHOST at 48 (ip, port),
# STORETIMESTAMP at 56, STOREHOST at 64 (ip, port).
_BORN_PORT_AT, _STORE_TS_AT, _STORE_PORT_AT = 52, 56, 68


def _harness(path: Path, fast: bool, flush: FlushDiskType) -> BrokerHarness:
    cfg = broker_config(path, native_fast_path_enable=fast)
    cfg = dataclasses.replace(cfg, store=dataclasses.replace(
        cfg.store, max_message_size=MAX_MESSAGE_SIZE, flush_disk_type=flush))
    h = BrokerHarness(cfg)
    h.on_loop(lambda: h.broker.topics.update(TopicConfig(PLAIN_TOPIC, QUEUES, QUEUES)))
    h.on_loop(lambda: h.broker.topics.update(TopicConfig(READ_ONLY_TOPIC, 2, 2, int(Perm.READ))))
    return h


def _exchange(port: int, data: list[bytes], answered: int) -> list[tuple[int, bytes]]:
    """Writes ``data`` piece by piece while a thread reads the answers: (opaque, frame) each,
    in the order they came."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WAIT_S)
    got: list[tuple[int, bytes]] = []
    done = threading.Event()

    def read() -> None:
        buf = bytearray()
        try:
            while len(got) < answered:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                buf += chunk
                while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                    total = struct.unpack_from(">i", buf)[0]
                    frame = bytes(buf[: 4 + total])
                    del buf[: 4 + total]
                    got.append((_opaque(frame), frame))
        except OSError:
            pass
        finally:
            done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        for piece in data:
            sock.sendall(piece)
        assert done.wait(ANSWER_WAIT_S), f"{len(got)} of {answered} answers in {ANSWER_WAIT_S} s"
    finally:
        sock.close()
        reader.join(5)
    return got


def _opaque(frame: bytes) -> int:
    mixed = struct.unpack_from(">I", frame, 4)[0]
    header = frame[8 : 8 + (mixed & 0xFFFFFF)]
    if mixed >> 24 == 1:
        return int(struct.unpack_from(">i", header, 5)[0])
    return int(orjson.loads(header)["opaque"])


def _masked_log(h: BrokerHarness) -> bytes:
    """The commit log, store times and ports zeroed (they differ between two brokers)."""
    out = bytearray()
    directory = Path(h.config.store.store_path) / "commitlog"
    for name in sorted(os.listdir(directory)):
        seg = bytearray((directory / name).read_bytes())
        pos = 0
        while pos + 8 <= len(seg):
            total, magic = struct.unpack_from(">ii", seg, pos)
            if magic != stored.MAGIC_CODE or total <= 0:
                break
            for at, size in ((_BORN_PORT_AT, 4), (_STORE_TS_AT, 8), (_STORE_PORT_AT, 4)):
                seg[pos + at : pos + at + size] = bytes(size)
            pos += total
        out += seg
    return bytes(out)


def _queues(h: BrokerHarness) -> dict[str, bytes]:
    """Consume queue files; a delay level's tags codes (delivery times: store time + delay) zeroed."""
    root = Path(h.config.store.store_path) / "consumequeue"
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            raw = bytearray(p.read_bytes())
            if p.relative_to(root).parts[0] == "SCHEDULE_TOPIC_XXXX":
                for at in range(12, len(raw), 20):
                    raw[at : at + 8] = bytes(8)
            out[str(p.relative_to(root))] = bytes(raw)
    return out


_RECALL_HANDLE = re.compile(rb"(recallHandle[^A-Za-z0-9]{1,6})([A-Za-z0-9_=-]{8,})")


def _masked_answer(frame: bytes) -> bytes:
    """A delay level's send answer carries a recall handle holding its delivery time (send time
    + delay): masked, at its length, as the delivery times in the queues are."""
    return _RECALL_HANDLE.sub(lambda m: m.group(1) + b"H" * len(m.group(2)), frame)


def _state(h: BrokerHarness, answers: list[tuple[int, bytes]]) -> dict[str, Any]:
    h.wait_dispatched()
    ip, port = h.broker.host.store_host
    own = (bytes(map(int, ip.split("."))) + port.to_bytes(4, "big")).hex().upper().encode()

    def put_counters() -> dict[str, dict[str, tuple[Any, ...]]]:
        return {kind: {topic: (c.msgs, c.size, c.times, list(c.by_size))
                       for topic, c in table.items()}
                for kind, table in h.broker.stats.put.items()}

    return {
        "answers": {opaque: _masked_answer(frame.replace(own, b"S" * 16)) for opaque, frame in answers},
        "log": _masked_log(h),
        "queues": _queues(h),
        "table": h.on_loop(lambda: dict(h.broker.store.commit_log.topic_queue_table)),
        "counters": h.on_loop(put_counters),
    }


def _run(tmp_path: Path, seed: int, flush: FlushDiskType) -> None:
    stream = request_stream(seed)
    data = chunks(b"".join(stream.frames), random.Random(seed))
    states, fast_counts = [], {}
    for fast in (True, False):
        h = _harness(tmp_path / f"{'fast' if fast else 'python'}-{seed}", fast, flush)
        try:
            answers = _exchange(h.port, data, stream.answered)
            states.append(_state(h, answers))
            if fast:
                assert h.broker.fast_path is not None
                fast_counts = h.broker.fast_path.counts()
                opaques = [opaque for opaque, _ in answers if opaque not in stream.unordered]
                assert opaques == sorted(opaques), "the fast path's broker answered out of order"
        finally:
            h.close()
    native, python = states
    assert native["answers"].keys() == python["answers"].keys()
    for opaque, frame in python["answers"].items():
        if opaque not in stream.volatile:
            assert native["answers"][opaque] == frame, f"seed {seed}: answer to opaque {opaque}"
    assert native["table"] == python["table"]
    assert native["queues"] == python["queues"]
    assert native["counters"] == python["counters"]
    assert native["log"] == python["log"], f"seed {seed}: the commit logs differ"
    assert fast_counts["handled"] >= len(stream.frames) // 4, fast_counts
    assert fast_counts["declined"] > 0 and fast_counts["errors"] == 0, fast_counts
    assert fast_counts["pulls"] > 0, fast_counts  # pulls read in C, answered as Python's


@pytest.mark.parametrize("seed", range(6))
def test_async_flush_streams_give_the_same_bytes(tmp_path: Path, seed: int) -> None:
    _run(tmp_path, seed, FlushDiskType.ASYNC_FLUSH)


@pytest.mark.parametrize("seed", range(100, 103))
def test_sync_flush_streams_give_the_same_bytes(tmp_path: Path, seed: int) -> None:
    _run(tmp_path, seed, FlushDiskType.SYNC_FLUSH)


def test_the_stream_has_what_it_must_decline() -> None:
    """The generator really mixes in what the fast path declines (so the tests above cover the
    hand-over both ways), and is reproducible."""
    frames = b"".join(request_stream(7).frames)
    assert frames == b"".join(request_stream(7).frames)
    for needle in (b"DELAY", b"TRAN_MSG", b"user-prop", b"TIMER_DELIVER_MS", b"producerGroup",
                   b"FastNew0", b"TBW102", READ_ONLY_TOPIC.encode()):
        assert needle in frames, needle
    started = time.monotonic()
    request_stream(8, 1000)
    assert time.monotonic() - started < 30
