"""etcd servers for tests (controller mode, docs/failover.md): Debian's ``etcd`` binary
(``etcd-server`` package, scripts/system-deps.sh) run as child processes on free ports, one node
or a cluster of three, each with its data in a temporary directory. Readiness is etcd's own
answer to a status request through its JSON gateway; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from orbitmq.testing.waits import READY_WAIT_S

__all__ = ["EtcdNode", "EtcdCluster", "etcd_binary", "free_port"]

READY_TIMEOUT_S = READY_WAIT_S  # etcd starts in a second; a loaded machine, an election, longer


def etcd_binary() -> str | None:
    """The etcd server binary, or None (then the tests that need it skip, saying so)."""
    return shutil.which("etcd")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class EtcdNode:
    """One etcd member. ``client_addr`` is ``host:port`` of its client (gateway) URL."""

    def __init__(self, name: str, host: str, client_port: int, peer_port: int, data_dir: Path,
                 prefix: Sequence[str] = ()) -> None:
        self.name, self.host = name, host
        self.client_addr = f"{host}:{client_port}"
        self.peer_url = f"http://{host}:{peer_port}"
        self.data_dir = data_dir
        self.prefix = list(prefix)  # e.g. ``ip netns exec NS``
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.with_suffix(".log")

    def start(self, initial_cluster: str, state: str = "new") -> None:
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError("etcd is not installed (Debian: apt-get install etcd-server)")
        client_url = f"http://{self.client_addr}"
        args = [*self.prefix, binary, "--name", self.name, "--data-dir", str(self.data_dir),
                "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls",
                self.peer_url, "--initial-cluster", initial_cluster,
                "--initial-cluster-state", state, "--initial-cluster-token", "orbitmq-test",
                "--heartbeat-interval", "100", "--election-timeout", "1000"]
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()

    def status(self, timeout: float = 1.0) -> tuple[str, str, str] | None:
        """(this member's id, the id of the leader it knows, "0" for none, its raft term), or
        None when the member does not answer."""
        request = urllib.request.Request(f"http://{self.client_addr}/v3/maintenance/status",
                                         data=b"{}", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                answer = json.loads(resp.read())
        except (OSError, urllib.error.URLError, ValueError):
            return None
        member = str(answer.get("header", {}).get("member_id", ""))
        return member, str(answer.get("leader") or "0"), str(answer.get("raftTerm") or "0")

    def healthy(self, timeout: float = 1.0) -> bool:
        """Whether the member answers a status request with a leader known."""
        status = self.status(timeout)
        return status is not None and status[1] != "0"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class EtcdCluster:
    """``size`` etcd members (1 or 3) on ``hosts`` (default 127.0.0.1 for each), started and
    waited for; ``endpoints`` is what ``controller_addr`` takes (``etcd://...``)."""

    def __init__(self, size: int = 1, *, hosts: Sequence[str] | None = None,
                 prefixes: Sequence[Sequence[str]] | None = None, root: Path | None = None) -> None:
        hosts = list(hosts or ["127.0.0.1"] * size)
        prefixes = list(prefixes or [()] * size)
        self._tmp = None if root is not None else tempfile.TemporaryDirectory(prefix="orbitmq-etcd-")
        base = Path(root if root is not None else self._tmp.name)  # type: ignore[union-attr]
        self.nodes = []
        for i in range(size):
            client, peer = (2379, 2380) if prefixes[i] else (free_port(hosts[i]), free_port(hosts[i]))
            self.nodes.append(EtcdNode(f"etcd{i}", hosts[i], client, peer, base / f"etcd{i}",
                                       prefixes[i]))
        for node in self.nodes:
            node.start(self.initial_cluster)
        self.wait_healthy()

    @property
    def initial_cluster(self) -> str:
        """``--initial-cluster`` of every member (a member started again on its data directory
        rejoins with it)."""
        return ",".join(f"{n.name}={n.peer_url}" for n in self.nodes)

    def leader(self, timeout: float = 1.0) -> EtcdNode | None:
        """The member most running members name leader now (None when no leader is known):
        a leader cut off alone may still call itself leader until its check of the quorum
        fails; the majority's answer is the one that counts."""
        ids: dict[str, EtcdNode] = {}
        votes: dict[str, int] = {}
        for node in self.nodes:
            status = node.status(timeout) if node.running() else None
            if status is None:
                continue
            ids[status[0]] = node
            if status[1] != "0":
                votes[status[1]] = votes.get(status[1], 0) + 1
        if not votes:
            return None
        best = max(votes, key=lambda k: votes[k])
        return ids.get(best)

    def agreed_leader(self, timeout: float = 1.0) -> EtcdNode | None:
        """The leader every member names in one term, or None until they all do. A member
        healed after a cut names the leader it last knew before it has taken the leader's
        term (and one that campaigned alone returns with a higher term and forces an
        election: etcd 3.4 has no pre-vote by default), so a majority's leader just after a
        heal may be deposed, or commit nothing while its one peer catches up."""
        named: set[tuple[str, str]] = set()
        ids: dict[str, EtcdNode] = {}
        for node in self.nodes:
            status = node.status(timeout) if node.running() else None
            if status is None or status[1] == "0":
                return None
            ids[status[0]] = node
            named.add((status[1], status[2]))
        if len(named) != 1:
            return None
        return ids.get(named.pop()[0])

    def restart(self, node: EtcdNode, timeout: float = READY_TIMEOUT_S) -> None:
        """Start a killed member again on its data directory and wait until it knows a leader."""
        node.start(self.initial_cluster)
        self.wait_healthy([node], timeout)

    @property
    def endpoints(self) -> str:
        return "etcd://" + ",".join(n.client_addr for n in self.nodes)

    def wait_healthy(self, nodes: Sequence[EtcdNode] | None = None,
                     timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        for node in nodes or self.nodes:
            while not node.healthy():
                if node.proc is not None and node.proc.poll() is not None:
                    raise RuntimeError(f"etcd {node.name} exited:\n{node.log_tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd {node.name} not ready in {timeout} s:\n"
                                       f"{node.log_tail()}")
                time.sleep(0.05)

    def close(self) -> None:
        for node in self.nodes:
            node.kill()
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                self._tmp.cleanup()

    def __enter__(self) -> EtcdCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
