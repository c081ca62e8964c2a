"""kill -9 of a broker (a real child process) whose sends take the native fast path, under
SYNC_FLUSH: after each restart every send it acknowledged is read back, byte for byte, at the
queue and queue offset its answer named. Segments are small, so that the fast path's hand-over
of a segment roll to the Python path happens under load too."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from orbitmq.broker.native import NATIVE
from orbitmq.client import PullConsumer, PullStatus
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand, decode_command, encode
from orbitmq.testing import standalone_process

pytestmark = pytest.mark.skipif(NATIVE is None, reason="C speedups not built or turned off")

TOPIC = "FastCrash"
ROUNDS = 3
WINDOW = 32
FLAGS = ("--flush-disk-type", "SYNC_FLUSH", "--mapped-file-size-commitlog", str(1 << 20))
# Sends acknowledged before the kill: a condition, bounded for a loaded 2-core machine (it was a
# 10 s pause that went on to the kill whatever had been acknowledged).
ACKED_WAIT_S = 60.0
Acked = dict[bytes, tuple[int, int]]  # body -> (queue id, queue offset)


def _frame(opaque: int, body: bytes) -> bytes:
    ext = {"a": "crash-producer", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(opaque % 4),
           "f": "0", "g": str(int(time.time() * 1000)), "h": "0",
           "i": f"UNIQ_KEY\x01{body.hex().upper()}\x02WAIT\x01true\x02", "j": "0",
           "k": "false", "m": "false"}
    return encode(RemotingCommand(code=int(RequestCode.SEND_MESSAGE_V2), opaque=opaque,
                                  ext_fields=ext, body=body))


def _send_until_killed(addr: str, acked: Acked, seq_start: int, stop: threading.Event) -> None:
    """Pipelined sends, WINDOW in flight; records what was acknowledged until the socket dies."""
    host, _, port = addr.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    bodies: dict[int, bytes] = {}
    buf, seq, in_flight = bytearray(), seq_start, 0
    try:
        while not stop.is_set():
            while in_flight < WINDOW:
                body = seq.to_bytes(8, "big") + random.randbytes(random.choice([10, 500, 3000]))
                bodies[seq] = body
                sock.sendall(_frame(seq, body))
                seq, in_flight = seq + 1, in_flight + 1
            chunk = sock.recv(1 << 16)
            if not chunk:
                return
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                total = struct.unpack_from(">i", buf)[0]
                answer = decode_command(bytes(buf[4 : 4 + total]))
                del buf[: 4 + total]
                in_flight -= 1
                if answer.code == ResponseCode.SUCCESS:
                    acked[bodies.pop(answer.opaque)] = (int(answer.ext_fields["queueId"]),
                                                        int(answer.ext_fields["queueOffset"]))
    except OSError:
        return  # the broker died under us
    finally:
        sock.close()


def _read_back(namesrv: str) -> dict[bytes, tuple[int, int]]:
    found: dict[bytes, tuple[int, int]] = {}
    with PullConsumer("crash-reader", namesrv) as consumer:
        for mq in consumer.fetch_queues(TOPIC):
            offset = 0
            while (got := consumer.pull(mq, offset, max_nums=64)).status is PullStatus.FOUND:
                for m in got.messages:
                    found[m.body] = (m.queue_id, m.queue_offset)
                offset = got.next_begin_offset
    return found


def test_kill_9_keeps_every_send_the_fast_path_acknowledged(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    acked: Acked = {}
    rng = random.Random(16)
    for round_no in range(ROUNDS):
        broker = standalone_process(store, *FLAGS)
        try:
            addrs = broker.wait_ready("namesrv", "broker")
            assert "native fast path on" in broker.output(), broker.output()[-2000:]
            if round_no:  # what was acknowledged before the last kill is all there
                found = _read_back(addrs["namesrv"])
                missing = [b for b, where in acked.items() if found.get(b) != where]
                assert not missing, f"round {round_no}: {len(missing)} of {len(acked)} lost"
            stop = threading.Event()
            before = len(acked)
            sender = threading.Thread(target=_send_until_killed,
                                      args=(addrs["broker"], acked, (round_no + 1) * 10_000_000, stop))
            sender.start()
            deadline = time.monotonic() + ACKED_WAIT_S
            while len(acked) < before + 200:
                assert time.monotonic() < deadline, (
                    f"round {round_no}: 200 sends not acknowledged in {ACKED_WAIT_S} s")
                assert sender.is_alive(), f"round {round_no}: the sender stopped"
                time.sleep(0.01)
            time.sleep(rng.uniform(0.05, 0.5))  # the random moment of the kill
            broker.kill()
            stop.set()
            sender.join(15)
            assert not sender.is_alive()
            assert len(acked) > before + 100, f"round {round_no}: too few sends acknowledged"
        finally:
            broker.kill()
    broker = standalone_process(store, *FLAGS)
    try:
        found = _read_back(broker.wait_ready("namesrv", "broker")["namesrv"])
        assert all(found.get(b) == where for b, where in acked.items())
    finally:
        assert broker.stop() == 0, broker.output()[-3000:]
