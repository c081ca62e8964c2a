"""Bad input on the HA port (issue 15 acceptance): random bytes, an offset beyond the end, reports
that are not what the slave was sent, a connection that stalls, a master that sends garbage.
Neither store is ever corrupted and a SYNC_MASTER never acknowledges anything early: a send is
SEND_OK only once a real slave holds it."""

from __future__ import annotations

import random
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from replication_support import (
    RawSlave,
    caught_up,
    commit_log_bytes,
    connected,
    ha_port,
    master_config,
    slave_config,
    wait_for,
)
from test_broker_support import BrokerHarness

from orbitmq.broker.replication.master import WRITE_BUFFER_HIGH
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.stored import peek


@pytest.fixture
def master(tmp_path: Path) -> Iterator[BrokerHarness]:
    h = BrokerHarness(master_config(tmp_path, None, ha_housekeeping_interval_ms=1500,
                                    store={"sync_flush_timeout_ms": 400}))
    yield h
    h.close()


def _acked(master: BrokerHarness) -> int:
    return master.on_loop(lambda: master.broker.replication.progress.best_acked)


def _links(master: BrokerHarness) -> int:
    return master.on_loop(lambda: master.broker.replication.progress.connected)


@pytest.mark.parametrize("seed", range(5))
def test_random_bytes_close_the_connection_and_acknowledge_nothing(master: BrokerHarness,
                                                                   seed: int) -> None:
    rng = random.Random(seed)
    assert master.send("Bad", b"before").code == ResponseCode.SLAVE_NOT_AVAILABLE
    log = commit_log_bytes(master)
    raw = RawSlave(ha_port(master))
    raw.send(rng.randbytes(rng.randrange(16, 4000)))
    assert raw.closed_by_peer(), "the master keeps a connection that sent garbage"
    raw.close()
    assert _acked(master) == -1 and _links(master) == 0
    r = master.send("Bad", b"after")
    assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE, (r.code, r.remark)
    assert commit_log_bytes(master).startswith(log)


def test_a_first_report_beyond_the_end_is_told_where_the_master_ends_and_closed(
        master: BrokerHarness) -> None:
    assert master.send("Bad", b"x").code == ResponseCode.SLAVE_NOT_AVAILABLE
    end = master.broker.store.max_physical_offset()
    raw = RawSlave(ha_port(master))
    raw.report(end + 1_000_000)
    assert raw.frame() == (end, b"")  # a heartbeat: "my log ends here"
    assert raw.closed_by_peer()
    raw.close()
    assert _acked(master) == -1


@pytest.mark.parametrize("lie", ["past_what_was_sent", "inside_a_frame", "backwards"])
def test_a_report_that_is_not_what_the_slave_was_sent_closes_the_connection(
        master: BrokerHarness, lie: str) -> None:
    for i in range(3):
        master.send("Bad", b"message %d" % i)
    raw = RawSlave(ha_port(master))
    raw.report(0)
    frame = raw.frame()
    assert frame is not None and frame[0] == 0 and frame[1]
    end = len(frame[1])
    request = master.broker.store.replication_frame(0, 1 << 20)
    assert request is not None and request[1] == end  # one frame held everything
    sent = threading.Event()

    def send_one_sync() -> None:  # a send waiting on this "slave" must not be acknowledged
        codes.append(master.send("Bad", b"waits").code)
        sent.set()

    codes: list[int] = []
    if lie == "past_what_was_sent":
        raw.report(end + 8)
    elif lie == "inside_a_frame":
        raw.report(end - 1)
    else:
        raw.report(end)
        threading.Thread(target=send_one_sync, daemon=True).start()
        wait_for(lambda: _acked(master) == end, "the honest report counts")
        raw.report(end - 8)
    assert raw.closed_by_peer()
    assert _acked(master) in (-1, end)
    if lie == "backwards":
        assert sent.wait(10) and codes == [ResponseCode.FLUSH_SLAVE_TIMEOUT]
    raw.close()


def test_a_stalled_connection_holds_bounded_memory_and_is_dropped(tmp_path: Path) -> None:
    master = BrokerHarness(master_config(
        tmp_path, None, ha_housekeeping_interval_ms=6000,
        store={"sync_flush_timeout_ms": 300, "mapped_file_size_commitlog": 8 * 1024 * 1024}))
    raw = RawSlave(ha_port(master))
    try:
        raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.report(0)  # then never reads nor reports
        wait_for(lambda: _links(master) == 1, "the connection is open")
        buffered = []
        for i in range(12):  # 12 MiB that the stalled slave never takes
            r = master.send("Stall", bytes([i]) * 1_000_000)
            assert r.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (r.code, r.remark)
            status = master.on_loop(master.broker.replication.ha_status)
            link = status["haConnectionInfo"][0]
            # Nothing acknowledged, ever: 0 (it lacked nothing of the empty log it joined).
            assert link["slaveAckOffset"] == 0
            buffered.append(link["bufferedBytes"])
        # The transport stopped taking frames at its high-water mark: the master holds at most
        # that and one frame, however much the slave does not read.
        assert max(buffered) <= WRITE_BUFFER_HIGH + 1_100_000
        assert master.broker.store.max_physical_offset() > 2 * WRITE_BUFFER_HIGH
        wait_for(lambda: _links(master) == 0, "housekeeping drops the silent connection")
        assert master.send("Stall", b"now").code == ResponseCode.SLAVE_NOT_AVAILABLE
    finally:
        raw.close()
        master.close()


class _FakeMaster:
    """A TCP server on the HA side that answers a slave's first report with ``payload``."""

    def __init__(self, payload: bytes) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.payload = payload
        self.conns = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns += 1
            try:
                conn.recv(8)
                conn.sendall(self.payload)
                conn.recv(8)  # waits until the slave closes
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("garbage", ["header", "frame"])
def test_a_slave_never_writes_a_garbled_frame(tmp_path: Path, master: BrokerHarness,
                                              garbage: str) -> None:
    for i in range(5):
        master.send("Src", b"genuine %d" % i)
    frame = master.broker.store.replication_frame(0, 1 << 20)
    assert frame is not None
    data = bytearray(frame[0])
    first = peek(bytes(data))
    data[first.body_at + 2] ^= 0x55  # a byte of the first message's body: its CRC disagrees
    payload = (struct.pack(">qi", 0, -3) if garbage == "header"
               else struct.pack(">qi", 0, len(data)) + bytes(data))
    fake = _FakeMaster(payload)
    slave = BrokerHarness(slave_config(tmp_path, None, ha_master_address=f"127.0.0.1:{fake.port}"))
    try:
        wait_for(lambda: fake.conns >= 2, "the slave closes and connects again")
        assert slave.broker.store.max_physical_offset() == 0
        assert slave.broker.replication.client.refused is None  # garbage is not a divergence
    finally:
        slave.close()
        fake.close()


def test_after_bad_input_a_real_slave_still_replicates_exactly(tmp_path: Path,
                                                               master: BrokerHarness) -> None:
    raw = RawSlave(ha_port(master))
    raw.send(b"\xff" * 64)
    assert raw.closed_by_peer()
    slave = BrokerHarness(slave_config(tmp_path, None,
                                       ha_master_address=f"127.0.0.1:{ha_port(master)}"))
    try:
        wait_for(lambda: connected(master), "the real slave connects")
        for i in range(20):
            r = master.send("After", b"ok %d" % i)
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        wait_for(lambda: caught_up(master, slave), "the copy")
        assert commit_log_bytes(slave) == commit_log_bytes(master)
    finally:
        slave.close()
        raw.close()

