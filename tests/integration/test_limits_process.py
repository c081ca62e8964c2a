"""The limits measured on a real server process (``orbitmq standalone``): what 100 connections
announcing 16 MiB frames cost its memory, and the descriptor reserve under a low
RLIMIT_NOFILE. Each test names its own bound."""

from __future__ import annotations

import os
import socket
import struct
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from orbitmq import Message, Producer
from orbitmq.client.results import SendStatus
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand, encode
from orbitmq.protocol.frame import FrameDecoder
from orbitmq.testing.process import HOST_DISK_IGNORED, ServerProcess, standalone_process

ATTACKERS = 100
RSS_GROWTH_MAX_KIB = 32 * 1024  # issue 35's target: 100 x 9 bytes of a 16 MiB frame
NOFILE = 256
FD_RESERVE = 64
WAIT_S = 10.0


def vm_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def answered(addr: str) -> bool:
    """One request on a new connection is answered (REQUEST_CODE_NOT_SUPPORTED will do): the
    server's loop has run past every read that came before it."""
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as s:
        s.sendall(encode(RemotingCommand(code=65000, opaque=1)))
        head = s.recv(4, socket.MSG_WAITALL)
        (length,) = struct.unpack(">i", head)
        rest = b""
        while len(rest) < length:
            rest += s.recv(length - len(rest))
    [resp] = FrameDecoder().feed(head + rest)
    return resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


def test_a_hundred_16_mib_length_words_cost_the_broker_little_memory(tmp_path: Path):
    with standalone_process(str(tmp_path / "store")) as server:
        addr = server.wait_ready("broker")["broker"]
        host, _, port = addr.rpartition(":")
        assert answered(addr)
        before = vm_rss_kib(server.proc.pid)
        attackers = []
        try:
            # The length word, then (once the server has read it) 5 more bytes: two reads, the
            # second one into whatever the first made the server set aside.
            for _ in range(ATTACKERS):
                s = socket.create_connection((host, int(port)), timeout=WAIT_S)
                s.sendall(struct.pack(">i", 16 * 1024 * 1024 - 4))
                attackers.append(s)
            assert answered(addr)
            for s in attackers:
                s.sendall(b"\x00" * 5)
            assert answered(addr) and answered(addr)
            grown = vm_rss_kib(server.proc.pid) - before
            print(f"broker RSS growth for {ATTACKERS} x 9 bytes of a 16 MiB frame: "
                  f"{grown / 1024:.1f} MiB")
            assert grown < RSS_GROWTH_MAX_KIB
        finally:
            for s in attackers:
                s.close()
        assert server.stop() == 0


def limit_hits(metrics_addr: str) -> dict[tuple[str, str], float]:
    """(node_type, limit) -> orbitmq_limit_hits_total, scraped."""
    with urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=WAIT_S) as answer:
        text = answer.read().decode()
    return {(s.labels["node_type"], s.labels["limit"]): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "orbitmq_limit_hits_total"}


def closed_by_peer(s: socket.socket) -> bool:
    s.setblocking(False)  # (with a timeout, recv would wait for it first)
    try:
        return s.recv(1) == b""
    except (BlockingIOError, TimeoutError):  # nothing to read: still open
        return False
    except ConnectionResetError:
        return True


def test_sockets_never_take_the_descriptors_the_store_needs(tmp_path: Path):
    """Under RLIMIT_NOFILE 256, 400 idle sockets: those past the reserve are closed at accept,
    the store still creates, syncs and rolls segments for a producer connected before, and
    the server says so in one line."""
    args = ["standalone", "--namesrv-port", "0", "--broker-port", "0", "--console-port", "0",
            "--grpc-port", "-1", "--store", str(tmp_path / "store"), *HOST_DISK_IGNORED,
            "--flush-disk-type", "SYNC_FLUSH", "--mapped-file-size-commitlog", "65536",
            "--fd-reserve", str(FD_RESERVE), "--metrics-exporter-type", "PROM",
            "--metrics-prom-exporter-port", "0"]
    server = ServerProcess(args, prefix=["prlimit", f"--nofile={NOFILE}:{NOFILE}", "--"])
    flood: list[socket.socket] = []
    try:
        addrs = server.wait_ready("namesrv", "broker", "metrics")
        host, _, port = addrs["broker"].rpartition(":")
        with Producer("fd-reserve-producer", namesrv=addrs["namesrv"]) as producer:
            assert producer.send(Message("FdReserveTopic", b"first")).status is SendStatus.OK
            for _ in range(400):
                flood.append(socket.create_connection((host, int(port)), timeout=WAIT_S))
            deadline = time.monotonic() + WAIT_S
            while "descriptor reserve for the store is reached" not in server.output():
                assert time.monotonic() < deadline, server.output()[-3000:]
                time.sleep(0.05)
            deadline = time.monotonic() + WAIT_S
            while not any(closed_by_peer(s) for s in flood):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            # 200 x 1 KiB synced sends across 64 KiB segments: segments created and rolled,
            # every send synced, while the flood holds every descriptor sockets may take.
            for i in range(200):
                result = producer.send(Message("FdReserveTopic", bytes([i % 256]) * 1024))
                assert result.status is SendStatus.OK, result
        segments = os.listdir(tmp_path / "store" / "commitlog")
        assert len(segments) >= 3, segments
        for s in flood:
            s.close()
        # The flood gone, new clients are let in again.
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                if answered(addrs["broker"]):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.05)
        hits = limit_hits(addrs["metrics"])
        assert hits[("broker", "fd_reserve")] >= 1, hits
        assert hits[("nameserver", "fd_reserve")] == 0, hits
        assert server.stop() == 0, server.output()[-3000:]
        out = server.output()
        assert out.count("descriptor reserve for the store is reached") <= 2  # rate-limited
        assert "Traceback" not in out and "Too many open files" not in out, out[-3000:]
    finally:
        for s in flood:
            s.close()
        server.kill()
