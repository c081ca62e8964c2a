"""A broker set in controller mode as real processes (docs/failover.md): a name server and
``members`` brokers that elect their master through etcd. Used by the failover tests and
available to users' own tests. Brokers run on 127.0.0.1, or each on its own address inside a
network namespace (``prefixes``: ``ip netns exec NS``, testing/netns.py) so that links can be
cut. What etcd says is read directly from etcd (``read``); every wait is bounded.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from orbitmq.broker.failover.rules import MasterRecord, SetState
from orbitmq.broker.failover.service import key_prefix
from orbitmq.testing.process import READY_WAIT_S, ServerProcess, host_disk_ignored

__all__ = ["FailoverSet", "read_etcd", "wait_for"]

READY_TIMEOUT_S = READY_WAIT_S
# One read of etcd by the test (not by the brokers): etcd answers in milliseconds, but a loaded
# machine can hold the test's or etcd's process for seconds.
READ_TIMEOUT_S = 10.0
T = TypeVar("T")


def wait_for(check: Callable[[], T | None], what: str, timeout: float) -> T:
    """``check()`` until it gives something (not None/False); AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def read_etcd(endpoint: str, cluster: str, name: str,
              timeout: float = READ_TIMEOUT_S) -> tuple[SetState | None, MasterRecord | None]:
    """The broker set's state and master records as one etcd endpoint holds them now."""
    prefix = key_prefix(cluster, name)
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    body = json.dumps({"key": base64.b64encode(prefix).decode(),
                       "range_end": base64.b64encode(end).decode()}).encode()
    request = urllib.request.Request(f"http://{endpoint}/v3/kv/range", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        answer = json.loads(resp.read())
    state = master = None
    for kv in answer.get("kvs", []):
        key = base64.b64decode(kv["key"])[len(prefix):]
        value = base64.b64decode(kv.get("value", ""))
        if key == b"state":
            state = SetState.from_json(value)
        elif key == b"master":
            master = MasterRecord.from_json(value)
    return state, master


class FailoverSet:
    """A name server and brokers ``1..members`` of set ``name`` in controller mode.

    Args:
        root: the stores go under it (``root/<name>-<member>``).
        controller_addr: ``etcd://...`` (testing/etcd.py's ``EtcdCluster.endpoints``).
        hosts / prefixes: per member, the address to listen on and the command prefix (a
            network namespace); default 127.0.0.1 and none.
        namesrv: an existing name server's address (else one is started on 127.0.0.1).
    """

    def __init__(self, root: Path, controller_addr: str, *, members: int = 3,
                 role: str = "SYNC_MASTER", name: str = "broker-a", ttl_s: int = 2,
                 fence_margin_ms: int = 500, not_catchup_ms: int = 1500,
                 hosts: dict[int, str] | None = None,
                 prefixes: dict[int, Sequence[str]] | None = None, namesrv: str | None = None,
                 flags: Sequence[str] = ()) -> None:
        self.root, self.controller_addr, self.name, self.role = Path(root), controller_addr, name, role
        self.ttl_s, self.fence_margin_ms, self.not_catchup_ms = ttl_s, fence_margin_ms, not_catchup_ms
        self.hosts = hosts or {}
        self.prefixes = prefixes or {}
        self.flags = list(flags)
        self.namesrv_process: ServerProcess | None = None
        if namesrv is None:
            self.namesrv_process = ServerProcess(["namesrv", "--port", "0"])
            namesrv = self.namesrv_process.wait_ready("namesrv", timeout=READY_TIMEOUT_S)["namesrv"]
        self.namesrv = namesrv
        self.brokers: dict[int, ServerProcess] = {}
        self.addresses: dict[int, str] = {}
        for member in range(1, members + 1):
            self.start_member(member, wait=False)
        for member in range(1, members + 1):
            self._wait_ready(member)

    def args(self, member: int) -> list[str]:
        # Members on a lab's addresses (network namespaces) listen beyond loopback: a test's
        # own cluster, run without access control on purpose.
        return ["broker", "--namesrv", self.namesrv, "--listen-host",
                self.hosts.get(member, "127.0.0.1"), "--allow-anonymous", "true",
                "--port", "0", "--ha-listen-port", "0",
                "--grpc-listen-port", "0",
                "--store", str(self.root / f"{self.name}-{member}"), "--broker-name", self.name,
                "--broker-role", self.role, "--broker-id", str(member),
                "--enable-controller-mode", "true", "--controller-addr", self.controller_addr,
                "--controller-lease-ttl-s", str(self.ttl_s),
                "--controller-fence-margin-ms", str(self.fence_margin_ms),
                "--controller-poll-interval-ms", "100",
                "--ha-max-time-slave-not-catchup-ms", str(self.not_catchup_ms),
                "--ha-send-heartbeat-interval-ms", "500", "--ha-housekeeping-interval-ms", "3000",
                "--mapped-file-size-commitlog", str(16 * 1024 * 1024),
                "--register-broker-interval-ms", "1000", "--slave-sync-interval-ms", "1000",
                *host_disk_ignored(self.flags), *self.flags]

    def start_member(self, member: int, *, wait: bool = True) -> ServerProcess:
        proc = ServerProcess(self.args(member), prefix=self.prefixes.get(member, ()))
        self.brokers[member] = proc
        if wait:
            self._wait_ready(member)
        return proc

    def _wait_ready(self, member: int) -> None:
        self.addresses[member] = self.brokers[member].wait_ready(
            "broker", timeout=READY_TIMEOUT_S)["broker"]

    def read(self) -> tuple[SetState | None, MasterRecord | None]:
        """The state and master records (from the first etcd endpoint that answers)."""
        errors = []
        for endpoint in self.controller_addr.removeprefix("etcd://").split(","):
            try:
                return read_etcd(endpoint, "DefaultCluster", self.name)
            except OSError as e:
                errors.append(f"{endpoint}: {e}")
        raise OSError("; ".join(errors))

    def wait_master(self, *, timeout: float = 30.0, epoch_above: int = 0,
                    in_sync: int = 1) -> MasterRecord:
        """Until etcd names a master with its HA address, of an epoch above ``epoch_above``,
        with at least ``in_sync`` members in its in-sync set."""
        def check() -> MasterRecord | None:
            try:
                state, master = self.read()
            except OSError:
                return None
            if (master is None or state is None or not master.ha_addr
                    or master.epoch <= epoch_above or len(state.in_sync) < in_sync):
                return None
            return master
        return wait_for(check, f"a master above epoch {epoch_above} with {in_sync} in sync", timeout)

    def kill(self, member: int) -> None:
        self.brokers[member].kill()

    def stop(self, member: int) -> None:
        self.brokers[member].stop()

    def close(self) -> None:
        for proc in self.brokers.values():
            proc.kill()  # stores are throwaway; a clean stop costs seconds each
        if self.namesrv_process is not None:
            self.namesrv_process.stop()

    def __enter__(self) -> FailoverSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
