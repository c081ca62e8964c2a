"""A name server, a master and slaves in this process (each server on its own event loop, as in
separate processes), for the replication tests; and raw HA-port clients for bad input."""

from __future__ import annotations

import dataclasses
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from test_broker_support import BrokerHarness, broker_config

from orbitmq.config import BrokerConfig, BrokerRole, NamesrvConfig
from orbitmq.namesrv import NameServer
from orbitmq.transport import LoopThread

T = TypeVar("T")

WAIT_S = 20.0
FAST = {"register_broker_interval_ms": 500, "slave_sync_interval_ms": 200,
        "ha_send_heartbeat_interval_ms": 200}


def wait_for(check: Callable[[], T], what: str, timeout: float = WAIT_S) -> T:
    """``check()``'s first truthy value, polled every 20 ms; AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.02)


class Namesrv:
    def __init__(self) -> None:
        self.loop = LoopThread("namesrv")
        self.server = NameServer(NamesrvConfig(listen_port=0))
        self.loop.call(self.server.start())

    @property
    def address(self) -> str:
        return self.server.address

    def close(self) -> None:
        self.loop.call(self.server.stop())
        self.loop.stop()


def _config(path: Path, ns: Namesrv | None, store: dict[str, Any] | None,
            settings: dict[str, Any]) -> BrokerConfig:
    if ns is not None:
        settings.setdefault("namesrv_addr", ns.address)
    cfg = broker_config(path, **settings)
    return dataclasses.replace(cfg, store=dataclasses.replace(cfg.store, **store)) if store else cfg


def master_config(tmp: Path, ns: Namesrv | None, *, store: dict[str, Any] | None = None,
                  **kw: Any) -> BrokerConfig:
    return _config(tmp / "master", ns, store, {**FAST, "broker_role": BrokerRole.SYNC_MASTER, **kw})


def slave_config(tmp: Path, ns: Namesrv | None, broker_id: int = 1, *,
                 store: dict[str, Any] | None = None, **kw: Any) -> BrokerConfig:
    return _config(tmp / f"slave{broker_id}", ns, store,
                   {**FAST, "broker_role": BrokerRole.SLAVE, "broker_id": broker_id, **kw})


def ha_port(h: BrokerHarness) -> int:
    return h.broker.replication.server.port


def connected(master: BrokerHarness, count: int = 1) -> bool:
    return master.on_loop(lambda: master.broker.replication.progress.connected) >= count


def caught_up(master: BrokerHarness, slave: BrokerHarness) -> bool:
    end = master.broker.store.max_physical_offset()
    return slave.broker.store.max_physical_offset() == end and master.on_loop(
        lambda: master.broker.replication.progress.best_acked) == end


def commit_log_bytes(h: BrokerHarness) -> bytes:
    out = bytearray()
    for mf in h.broker.store.commit_log.mfq.files:
        out += mf.view[: mf.wrote_position]
    return bytes(out)


def restart_on_same_ports(h: BrokerHarness) -> BrokerHarness:
    """Stop ``h`` and start a broker on its store, its remoting and its HA ports (a master
    coming back where its slaves and clients look for it)."""
    port, ha = h.port, ha_port(h)
    config = h.config
    h.close()
    return BrokerHarness(dataclasses.replace(config, listen_port=port, ha_listen_port=ha))


class RawSlave:
    """A TCP client of a master's HA port that speaks (or breaks) the protocol by hand."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.buffer = bytearray()

    def report(self, offset: int) -> None:
        self.sock.sendall(struct.pack(">q", offset))

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self) -> tuple[int, bytes] | None:
        """The next frame, or None once the master closed the connection."""
        while True:
            if len(self.buffer) >= 12:
                offset, size = struct.unpack_from(">qi", self.buffer)
                if len(self.buffer) >= 12 + size:
                    data = bytes(self.buffer[12:12 + size])
                    del self.buffer[:12 + size]
                    return offset, data
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                return None
            if not chunk:
                return None
            self.buffer += chunk

    def closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True once the master closed the connection (frames read meanwhile are dropped)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()
