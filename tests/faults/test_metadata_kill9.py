"""kill -9 of a broker (a real child process) while a client creates topics and commits consumer
offsets one after the other: after each restart every topic and every offset the broker answered
as done is there (the metadata store, store/metadata_db.py: each change one small transaction,
written before its answer; the WAL survives the process dying). Rounds of kill and restart, the
kill at a random moment; every loop and wait bounded."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from pathlib import Path

import orjson

from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand, decode_command, encode
from orbitmq.protocol.headers import CreateTopicRequestHeader
from orbitmq.testing import standalone_process
from orbitmq.testing.waits import EVENT_WAIT_S

ROUNDS = 3
CHANGES_MAX = 20_000  # requests one round's client sends at most (it is killed long before)
ANSWERED_MIN = 150  # changes answered before the kill may come
GROUPS = 40
QUEUES = 8
OFFSET_TOPIC = "MetaOffsets"
SOCKET_TIMEOUT_S = 10.0


class _Conn:
    """One blocking remoting connection: a request, then its answer."""

    def __init__(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S)
        self.opaque = 0
        self.buf = bytearray()

    def call(self, code: int, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
        self.opaque += 1
        self.sock.sendall(encode(RemotingCommand(code=int(code), opaque=self.opaque,
                                                 ext_fields=fields, body=body)))
        while True:
            if len(self.buf) >= 4:
                total = struct.unpack_from(">i", self.buf)[0]
                if len(self.buf) >= 4 + total:
                    answer = decode_command(bytes(self.buf[4:4 + total]))
                    del self.buf[:4 + total]
                    assert answer.opaque == self.opaque
                    return answer
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            self.buf += chunk

    def close(self) -> None:
        self.sock.close()


def _topic_fields(name: str) -> dict[str, str]:
    return CreateTopicRequestHeader(name, read_queue_nums=2, write_queue_nums=2).to_ext_fields()


def _offset_fields(group: str, qid: int, offset: int) -> dict[str, str]:
    return {"consumerGroup": group, "topic": OFFSET_TOPIC, "queueId": str(qid),
            "commitOffset": str(offset)}


class _Changes:
    """What the broker answered as done: topics created, and the last offset per queue."""

    def __init__(self) -> None:
        self.topics: set[str] = set()
        self.offsets: dict[tuple[str, int], int] = {}
        self.count = 0


def _change_until_killed(addr: str, done: _Changes, round_no: int, stop: threading.Event) -> None:
    """Alternately creates a topic and commits an offset (always higher for its queue) until
    the broker dies, recording what it answered SUCCESS."""
    conn = _Conn(addr)
    try:
        for i in range(CHANGES_MAX):
            if stop.is_set():
                return
            seq = round_no * CHANGES_MAX + i
            if i % 2 == 0:
                name = f"Meta-{seq}"
                if conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _topic_fields(name)).code == 0:
                    done.topics.add(name)
            else:
                key = (f"meta-group-{seq % GROUPS}", (seq // GROUPS) % QUEUES)
                if conn.call(RequestCode.UPDATE_CONSUMER_OFFSET,
                             _offset_fields(key[0], key[1], seq)).code == ResponseCode.SUCCESS:
                    done.offsets[key] = seq
            done.count += 1
    except OSError:
        return  # the broker died under us
    finally:
        conn.close()


def _check(addr: str, done: _Changes, round_no: int) -> None:
    conn = _Conn(addr)
    try:
        r = conn.call(RequestCode.GET_ALL_TOPIC_CONFIG, {})
        assert r.code == ResponseCode.SUCCESS, r.remark
        held = set(orjson.loads(r.body)["topicConfigTable"])
        lost = done.topics - held
        assert not lost, f"round {round_no}: {len(lost)} of {len(done.topics)} topics lost"
        for (group, qid), offset in done.offsets.items():
            r = conn.call(RequestCode.QUERY_CONSUMER_OFFSET, {
                "consumerGroup": group, "topic": OFFSET_TOPIC, "queueId": str(qid)})
            stored = int(r.ext_fields.get("offset", -1)) if r.code == ResponseCode.SUCCESS else -1
            # A commit sent after the last answered one may have been stored before the kill.
            assert stored >= offset, (round_no, group, qid, stored, offset)
    finally:
        conn.close()


def test_kill_9_keeps_every_topic_and_offset_the_broker_answered(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    done = _Changes()
    rng = random.Random(38)
    for round_no in range(ROUNDS):
        broker = standalone_process(store, "--flush-consumer-offset-interval-ms", "3600000")
        try:
            addrs = broker.wait_ready("namesrv", "broker")
            if round_no:
                _check(addrs["broker"], done, round_no)
            stop = threading.Event()
            before = done.count
            client = threading.Thread(target=_change_until_killed,
                                      args=(addrs["broker"], done, round_no, stop))
            client.start()
            deadline = time.monotonic() + EVENT_WAIT_S * 2
            while done.count < before + ANSWERED_MIN:
                assert time.monotonic() < deadline, f"round {round_no}: too few changes answered"
                assert client.is_alive(), f"round {round_no}: the client stopped"
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.3))  # the random moment of the kill
            broker.kill()
            stop.set()
            client.join(SOCKET_TIMEOUT_S + 5)
            assert not client.is_alive()
        finally:
            broker.kill()
    broker = standalone_process(store)
    try:
        _check(broker.wait_ready("namesrv", "broker")["broker"], done, ROUNDS)
        assert len(done.topics) >= ROUNDS * ANSWERED_MIN // 2 - ROUNDS
    finally:
        assert broker.stop() == 0, broker.output()[-3000:]
