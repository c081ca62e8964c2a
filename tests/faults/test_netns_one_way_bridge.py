"""The one-way cut and the bridge of testing/netns.py, each on its own, with real processes in
network namespaces the test makes: a TCP listener in every namespace, connects and datagrams
sent from inside the others.

- One-way (A's packets to B dropped): A's connect to B times out, B's datagrams reach A, A's do
  not reach B; B's connect to A times out too (A's SYN-ACK is one of A's packets to B). Healed,
  A connects to B again.
- Bridge (A and B apart, C in neither half): A and B each reach C and C reaches both; A and B do
  not reach each other.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from orbitmq.testing.netns import NetLab, netns_problem

pytestmark = pytest.mark.skipif(netns_problem() is not None, reason=str(netns_problem()))

TCP_PORT, UDP_PORT = 7100, 7101
CONNECT_TIMEOUT_S = 1.5
PROBE_TIMEOUT_S = 20  # one probe process, started and run to its end (a loaded machine)

LISTEN = f"""
import socket, sys, threading
host = sys.argv[1]
tcp = socket.create_server((host, {TCP_PORT}))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind((host, {UDP_PORT}))
def datagrams():
    while True:
        data, peer = udp.recvfrom(100)
        print("udp", data.decode(), flush=True)
threading.Thread(target=datagrams, daemon=True).start()
print("ready", flush=True)
while True:
    conn, _ = tcp.accept()
    conn.close()
"""

CONNECT = f"""
import socket, sys
try:
    socket.create_connection((sys.argv[1], {TCP_PORT}), timeout={CONNECT_TIMEOUT_S}).close()
    print("connected")
except socket.timeout:
    print("timeout")
except OSError as e:
    print("error", e)
"""

SEND_UDP = f"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(3):
    s.sendto(sys.argv[2].encode(), (sys.argv[1], {UDP_PORT}))
"""


class Listener:
    """A TCP and UDP listener inside one namespace; a thread collects the datagrams it prints."""

    def __init__(self, lab: NetLab, name: str) -> None:
        self.proc = subprocess.Popen([*lab.prefix[name], sys.executable, "-c", LISTEN,
                                      lab.addr[name]], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"
        self.datagrams: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.datagrams.put(line.strip().removeprefix("udp "))

    def received(self, payload: str, timeout: float) -> bool:
        """Whether the datagram ``payload`` arrives within ``timeout``."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                if self.datagrams.get(timeout=left) == payload:
                    return True
            except queue.Empty:
                return False
        return False

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@contextmanager
def listeners(lab: NetLab) -> Iterator[dict[str, Listener]]:
    started: dict[str, Listener] = {}
    try:
        for name in lab.names:
            started[name] = Listener(lab, name)
        yield started
    finally:
        for listener in started.values():
            listener.close()


def connect(lab: NetLab, src: str, dst: str) -> str:
    result = subprocess.run([*lab.prefix[src], sys.executable, "-c", CONNECT, lab.addr[dst]],
                            capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    return result.stdout.strip()


def send_udp(lab: NetLab, src: str, dst: str, payload: str) -> None:
    subprocess.run([*lab.prefix[src], sys.executable, "-c", SEND_UDP, lab.addr[dst], payload],
                   check=True, timeout=PROBE_TIMEOUT_S)


def test_a_one_way_cut_drops_one_direction_only() -> None:
    with NetLab(["a", "b"]) as lab, listeners(lab) as ears:
        assert connect(lab, "a", "b") == "connected"
        lab.cut_one_way("a", "b")
        assert lab.cuts() == [("a", "b")]
        assert connect(lab, "a", "b") == "timeout"  # a's SYN never reaches b
        send_udp(lab, "b", "a", "b-to-a")
        assert ears["a"].received("b-to-a", timeout=5.0)  # b's packets still reach a
        send_udp(lab, "a", "b", "a-to-b")
        assert not ears["b"].received("a-to-b", timeout=1.0)
        # b's SYN arrives, a's SYN-ACK (a packet from a to b) does not: b's connect hangs too
        assert connect(lab, "b", "a") == "timeout"
        lab.heal("a", "b")
        assert lab.cuts() == []
        assert connect(lab, "a", "b") == "connected"
        send_udp(lab, "a", "b", "a-to-b-healed")
        assert ears["b"].received("a-to-b-healed", timeout=5.0)


def test_a_bridge_keeps_both_halves_reaching_the_bridge_node_only() -> None:
    with NetLab(["a", "b", "c"]) as lab, listeners(lab):
        lab.cut_between(["a"], ["b"])
        assert connect(lab, "a", "c") == "connected"
        assert connect(lab, "b", "c") == "connected"
        assert connect(lab, "c", "a") == "connected"
        assert connect(lab, "c", "b") == "connected"
        assert connect(lab, "a", "b") == "timeout"
        assert connect(lab, "b", "a") == "timeout"
        with pytest.raises(ValueError, match="both halves"):
            lab.cut_between(["a", "c"], ["c"])
        lab.heal()
        assert connect(lab, "a", "b") == "connected"
