"""SYSTEM_BUSY with RocketMQ's remarks for sends that waited in a stalled broker
(broker/fast_failure.py), through the native fast path's reads and the Python path alike, and
the SDK's producer backing off and retrying them."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from orbitmq import Message, Producer
from orbitmq.client.results import SendStatus
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand, encode
from orbitmq.protocol.frame import FrameDecoder
from orbitmq.testing.embedded import EmbeddedCluster
from orbitmq.testing.waits import EVENT_WAIT_S

TOPIC = "BusyTopic"
WAIT_S = EVENT_WAIT_S  # the stall's start, an answer


def send_frame(opaque: int, properties: str = "") -> bytes:
    uniq = f"UNIQ_KEY\x017F000001{os.getpid() & 0xFFFF:04X}000000000000{opaque:08X}\x02"
    ext = {"a": "busy_producer", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": uniq + properties, "j": "0",
           "k": "false", "m": "false"}
    return encode(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, opaque=opaque,
                                  ext_fields=ext, body=b"busy"))


def read_answer(sock: socket.socket) -> RemotingCommand:
    head = sock.recv(4, socket.MSG_WAITALL)
    (length,) = struct.unpack(">i", head)
    [answer] = FrameDecoder().feed(head + sock.recv(length, socket.MSG_WAITALL))
    return answer


def stall(cluster: EmbeddedCluster, seconds: float) -> None:
    """Hold the broker's event loop for ``seconds`` (returns once it is held)."""
    held = threading.Event()

    def hold() -> None:
        held.set()
        time.sleep(seconds)

    assert cluster._loop is not None
    cluster._loop.loop.call_soon_threadsafe(hold)
    assert held.wait(WAIT_S)


@pytest.mark.parametrize("properties", ["", "DELAY\x011\x02"], ids=["fast-path", "python-path"])
def test_a_send_held_by_a_stalled_broker_is_answered_system_busy(tmp_path: Path, properties: str):
    with EmbeddedCluster(tmp_path, broker_fast_failure_enable=True,
                         os_page_cache_busy_time_out_mills=600) as cluster:
        broker = cluster.brokers[0]
        host, _, port = broker.address.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
            sock.sendall(send_frame(1, properties))
            assert read_answer(sock).code == ResponseCode.SUCCESS  # the topic exists now
            stall(cluster, 0.3)
            sock.sendall(send_frame(2, properties))  # waits in the socket while the loop is held
            busy = read_answer(sock)
            assert busy.code == ResponseCode.SYSTEM_BUSY
            assert busy.remark.startswith("[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control "
                                          "for a while, period in queue: ")
            assert ", size of queue: 1" in busy.remark
            sock.sendall(send_frame(3, properties))
            assert read_answer(sock).code == ResponseCode.SUCCESS  # the loop runs again
            stall(cluster, 0.8)  # past os_page_cache_busy_time_out_mills
            sock.sendall(send_frame(4, properties))
            busy = read_answer(sock)
            assert busy.code == ResponseCode.SYSTEM_BUSY
            assert busy.remark.startswith("[PCBUSY_CLEAN_QUEUE]broker busy, start flow control")
        counts = broker.server.limit_counters.counts
        assert (counts["send_queue_wait"], counts["page_cache_busy"]) == (1, 1)
        assert broker.store.commit_log.max_offset > 0


def test_the_producer_backs_off_and_retries_a_busy_broker(tmp_path: Path):
    with EmbeddedCluster(tmp_path, broker_fast_failure_enable=True) as cluster, \
            Producer("busy-producer", namesrv=cluster.namesrv) as producer:
        assert producer.send(Message(TOPIC, b"first")).status is SendStatus.OK
        stall(cluster, 0.3)
        assert producer.send(Message(TOPIC, b"while busy")).status is SendStatus.OK
        assert cluster.brokers[0].server.limit_counters.counts["send_queue_wait"] == 1
