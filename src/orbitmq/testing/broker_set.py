"""A replicated broker set as real processes: a name server, a master and its slaves, each an
``orbitmq`` child process on free ports of 127.0.0.1 (docs/replication.md).

Used by the failover tests, ``bench/ha_bench.py`` and ``examples/ha``; available to users' own
tests. A master can be killed (SIGKILL) and started again on its store at the same address, so
that its slaves and clients find it where they left it. Every wait is bounded.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from orbitmq.testing.process import READY_WAIT_S, ServerProcess, host_disk_ignored

__all__ = ["BrokerSetProcesses", "SEGMENT_SIZE_DEFAULT"]

SEGMENT_SIZE_DEFAULT = 64 * 1024 * 1024  # commit log segments: 1 GiB each would be a lot of disk
READY_TIMEOUT_S = READY_WAIT_S


class BrokerSetProcesses:
    """``orbitmq namesrv`` + a master (``role``) + ``slaves`` slaves of broker set ``name``.

    Args:
        root: the stores go under it (``root/<name>-<id>``).
        role: ASYNC_MASTER or SYNC_MASTER.
        slaves: how many slaves (ids 1..slaves).
        broker_flags: more ``orbitmq broker`` flags for every broker.
        segment_size: ``--mapped-file-size-commitlog``.
    """

    def __init__(self, root: Path, *, role: str = "SYNC_MASTER", slaves: int = 1,
                 name: str = "broker-a", broker_flags: Sequence[str] = (),
                 segment_size: int = SEGMENT_SIZE_DEFAULT, namesrv: str | None = None) -> None:
        self.root = Path(root)
        self.role = role
        self.name = name
        self.flags = [*broker_flags]
        self.segment_size = segment_size
        self.namesrv_process: ServerProcess | None = None
        if namesrv is None:
            self.namesrv_process = ServerProcess(["namesrv", "--port", "0"])
            namesrv = self.namesrv_process.wait_ready("namesrv", timeout=READY_TIMEOUT_S)["namesrv"]
        self.namesrv = namesrv
        self.brokers: dict[int, ServerProcess] = {}
        self.addresses: dict[int, str] = {}
        self.ha_addresses: dict[int, str] = {}
        self.start_broker(0)
        for broker_id in range(1, slaves + 1):
            self.start_broker(broker_id)

    def args(self, broker_id: int, port: str = "0", ha_port: str = "0") -> list[str]:
        role = self.role if broker_id == 0 else "SLAVE"
        return ["broker", "--namesrv", self.namesrv, "--port", port, "--ha-listen-port", ha_port,
                "--store", str(self.root / f"{self.name}-{broker_id}"), "--broker-name", self.name,
                "--broker-role", role, "--broker-id", str(broker_id),
                "--mapped-file-size-commitlog", str(self.segment_size),
                "--register-broker-interval-ms", "1000", "--slave-sync-interval-ms", "1000",
                "--grpc-listen-port", "0",
                *host_disk_ignored(self.flags), *self.flags]

    def start_broker(self, broker_id: int, *, same_address: bool = False) -> ServerProcess:
        """Start broker ``broker_id`` (again on its old ports with ``same_address``)."""
        port, ha = "0", "0"
        if same_address:
            port = self.addresses[broker_id].rpartition(":")[2]
            ha = self.ha_addresses.get(broker_id, ":0").rpartition(":")[2]
        proc = ServerProcess(self.args(broker_id, port, ha))
        roles = ("broker", "ha") if broker_id == 0 else ("broker",)
        found = proc.wait_ready(*roles, timeout=READY_TIMEOUT_S)
        self.brokers[broker_id] = proc
        self.addresses[broker_id] = found["broker"]
        if "ha" in found:
            self.ha_addresses[broker_id] = found["ha"]
        return proc

    @property
    def master(self) -> ServerProcess:
        return self.brokers[0]

    def kill(self, broker_id: int = 0) -> None:
        """SIGKILL a broker (the master by default): no chance to clean up."""
        self.brokers[broker_id].kill()

    def stop(self, broker_id: int) -> None:
        self.brokers[broker_id].stop()

    def wait_slaves_connected(self, count: int | None = None, timeout: float = 30.0) -> None:
        """Until the master counts ``count`` (default: every slave) HA connections."""
        from orbitmq.client import Admin

        want = len(self.brokers) - 1 if count is None else count
        deadline = time.monotonic() + timeout
        with Admin(self.namesrv, timeout=5.0) as admin:
            while True:
                status = admin.broker_ha_status(self.addresses[0])
                if len(status.links) >= want:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{want} slave(s) not connected within {timeout} s "
                                       f"(connected: {len(status.links)})")
                time.sleep(0.1)

    def close(self) -> None:
        for proc in reversed(list(self.brokers.values())):
            proc.stop()
        if self.namesrv_process is not None:
            self.namesrv_process.stop()

    def __enter__(self) -> BrokerSetProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
