"""The chaos clusters whose stores lie on the power-loss layer (orbitmq.testing.lazyfs).

- ``power``: one ``orbitmq standalone`` with SYNC_FLUSH on the layer. Its faults: a power cut
  (what the store did not fdatasync is dropped, the server is killed -9 in the same instant, the
  layer is mounted again and the server started on what survived), a disk stall (every file
  operation of the store blocks), a full disk (writes and allocations fail with ENOSPC), and a
  plain kill -9 (the page cache survives it). Its promise: nothing acknowledged is lost.
- ``power-async``: the same server with ASYNC_FLUSH (``flush_interval_commit_log`` of
  ASYNC_FLUSH_INTERVAL_MS) under power cuts. Its promise is a bound, computed from the history
  once the run ends: at most the sends acknowledged in the flush interval (plus
  FLUSH_SLACK_S for the flush's own time) before each cut, or between the cut and the kill.
- ``power-all``: a SYNC_MASTER and its SLAVE, both SYNC_FLUSH, each store on a layer of its own:
  a power cut takes every replica at once, then both start again; and a stall or a full disk
  of the master's store alone. Its promise: nothing acknowledged lost.

Each is skipped (ClusterUnavailable) where the layer cannot mount (no /dev/fuse, no libfuse, no
mfusepy: :func:`orbitmq.testing.lazyfs.lazyfs_problem`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path

from orbitmq.testing.broker_set import BrokerSetProcesses
from orbitmq.testing.chaos.checker import SYNC_FLUSH, Outcome, Promise, Send
from orbitmq.testing.chaos.clusters import (
    SEGMENT_SIZE,
    ChaosCluster,
    ClusterUnavailable,
    start_standalone,
)
from orbitmq.testing.chaos.schedule import Fault, FaultKind, FaultMenu
from orbitmq.testing.etcd import free_port
from orbitmq.testing.lazyfs import LazyFs, lazyfs_problem
from orbitmq.testing.process import ServerProcess
from orbitmq.testing.waits import EVENT_WAIT_S, READY_WAIT_S

__all__ = ["PowerStandaloneCluster", "PowerSetCluster", "POWER_KINDS", "ASYNC_FLUSH_INTERVAL_MS",
           "FLUSH_SLACK_S", "async_loss_bound"]

POWER_KINDS = ("power", "power-async", "power-all")
ASYNC_FLUSH_INTERVAL_MS = 500  # RocketMQ's flushIntervalCommitLog default
# A flush that began within the interval may still be writing when the power goes: its own time
# on the layer (a Python FUSE process) is part of the window whose acknowledged sends may be lost.
FLUSH_SLACK_S = 0.5
STALL_HOLD_S = (1.0, 4.0)
FULL_HOLD_S = (1.0, 4.0)
POWER_HOLD_S = (0.3, 2.0)  # how long the power stays off
KILL_HOLD_S = (0.5, 2.0)
SYNC_FLUSH_SYNC_MASTER = Promise("SYNC_FLUSH+SYNC_MASTER")


@dataclasses.dataclass(frozen=True)
class Cut:
    """One power cut: when the layer dropped what was unsynced and when the last server on it
    was dead (seconds on the history's clock, or ``time.monotonic`` as recorded), and what the
    layer said it dropped."""

    cut_at_s: float
    killed_at_s: float
    dropped: dict[str, object]


def async_loss_bound(sends: list[Send], cuts: list[Cut], window_s: float) -> int:
    """Acknowledged sends an ASYNC_FLUSH store may lose to ``cuts``: those acknowledged within
    ``window_s`` before a cut, or between the cut and the kill (the server still answers from
    its page cache until it dies). A send's answer comes after it was stored, so its
    acknowledgement time bounds its store time from above: counting by it can only widen the
    window."""
    acked = sorted(s.at_s for s in sends if s.outcome is Outcome.ACKED)
    total = 0
    for cut in cuts:
        lo, hi = cut.cut_at_s - window_s, cut.killed_at_s
        total += sum(1 for t in acked if lo < t <= hi)
    return total


def _lazyfs(root: Path) -> LazyFs:
    problem = lazyfs_problem()
    if problem is not None:
        raise ClusterUnavailable(f"no power-loss layer: {problem}")
    return LazyFs(root / "disk", root / "mnt")


class PowerStandaloneCluster(ChaosCluster):
    """``orbitmq standalone`` on the layer (``flush``: SYNC_FLUSH or ASYNC_FLUSH)."""

    def __init__(self, root: Path, *, flush: str = "SYNC_FLUSH") -> None:
        super().__init__()
        self.flush = flush
        self.name = "power" if flush == "SYNC_FLUSH" else "power-async"
        self.cuts: list[Cut] = []  # on time.monotonic
        self.bound: int | None = None  # ASYNC_FLUSH: computed by promise_for
        if flush == "SYNC_FLUSH":
            self.promise = SYNC_FLUSH
            self.menu = FaultMenu(
                targets={FaultKind.POWER: ("standalone",), FaultKind.STALL: ("standalone",),
                         FaultKind.FULL: ("standalone",), FaultKind.KILL: ("standalone",)},
                holds_s={FaultKind.POWER: POWER_HOLD_S, FaultKind.STALL: STALL_HOLD_S,
                         FaultKind.FULL: FULL_HOLD_S, FaultKind.KILL: KILL_HOLD_S})
        else:
            self.promise = Promise("ASYNC_FLUSH", log_tail_loss=True)  # bound: promise_for
            self.menu = FaultMenu(targets={FaultKind.POWER: ("standalone",)},
                                  holds_s={FaultKind.POWER: POWER_HOLD_S})
            self.notes.append(f"ASYNC_FLUSH every {ASYNC_FLUSH_INTERVAL_MS} ms: the promise is "
                              f"a bound on the acknowledged sends lost to each cut (window "
                              f"{ASYNC_FLUSH_INTERVAL_MS / 1000 + FLUSH_SLACK_S:g} s before it)")
        self.fs = _lazyfs(root)
        self.store = str(root / "mnt" / "standalone")
        self.namesrv_port, self.broker_port = free_port(), free_port()
        self.grpc_port = free_port()
        self.namesrv = f"127.0.0.1:{self.namesrv_port}"
        self.grpc_endpoint = f"127.0.0.1:{self.grpc_port}"
        try:
            self.proc = self._start()
        except BaseException:
            self.fs.close()
            raise

    def _start(self) -> ServerProcess:
        return start_standalone(self.store, self.namesrv_port, self.broker_port, self.grpc_port,
                                "--flush-disk-type", self.flush,
                                "--flush-interval-commitlog-ms", str(ASYNC_FLUSH_INTERVAL_MS))

    def apply(self, fault: Fault) -> str:
        pid = self.proc.proc.pid
        if fault.kind is FaultKind.POWER:
            cut_at = time.monotonic()
            dropped = self.fs.power_cut()
            self.proc.kill()
            self.cuts.append(Cut(cut_at, time.monotonic(), dropped))
            return f"pid {pid}; the layer dropped {dropped.get('dropped_bytes')} bytes"
        if fault.kind is FaultKind.STALL:
            self.fs.stall(fault.hold_s + EVENT_WAIT_S)  # cleared by the heal
        elif fault.kind is FaultKind.FULL:
            self.fs.full()
        elif fault.kind is FaultKind.KILL:
            self.proc.kill()
        return f"pid {pid}"

    def heal(self, fault: Fault) -> None:
        if fault.kind is FaultKind.POWER:
            self.fs.remount()
            self.proc = self._start()
        elif fault.kind in (FaultKind.STALL, FaultKind.FULL):
            self.fs.clear()
        elif fault.kind is FaultKind.KILL:
            self.proc = self._start()

    def settle(self) -> None:
        self.proc.wait_ready("namesrv", "broker", timeout=READY_WAIT_S)

    def promise_for(self, sends: list[Send], started: float) -> Promise:
        """The promise as checked: SYNC_FLUSH's zero, or ASYNC_FLUSH's bound from the cuts.
        ``started``: the history's start (time.monotonic), whose clock the sends use."""
        if self.flush == "SYNC_FLUSH":
            return self.promise
        cuts = [dataclasses.replace(c, cut_at_s=c.cut_at_s - started,
                                    killed_at_s=c.killed_at_s - started) for c in self.cuts]
        self.bound = async_loss_bound(sends, cuts, ASYNC_FLUSH_INTERVAL_MS / 1000 + FLUSH_SLACK_S)
        return Promise("ASYNC_FLUSH", lost_acknowledged_max=self.bound, log_tail_loss=True)

    def figures(self) -> dict[str, object]:
        out: dict[str, object] = {
            "power_cuts": len(self.cuts),
            "dropped_bytes": sum(int(str(c.dropped.get("dropped_bytes", 0))) for c in self.cuts)}
        if self.bound is not None:
            out["lost_acknowledged_bound"] = self.bound
        return out

    def servers(self) -> dict[str, ServerProcess]:
        return {"standalone": self.proc}

    def close(self) -> None:
        self.resume_all()
        with contextlib.suppress(Exception):
            self.fs.clear()
        try:
            self.proc.stop()
        finally:
            self.fs.close()


class PowerSetCluster(ChaosCluster):
    """A SYNC_MASTER and its SLAVE, both SYNC_FLUSH, each store on its own layer: ``power all``
    cuts both (one cut after the other, then both killed, before either restarts); ``stall
    master`` and ``full master`` hit the master's store alone."""

    name = "power-all"
    promise = SYNC_FLUSH_SYNC_MASTER

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.menu = FaultMenu(
            targets={FaultKind.POWER: ("all",), FaultKind.STALL: ("master",),
                     FaultKind.FULL: ("master",)},
            holds_s={FaultKind.POWER: POWER_HOLD_S, FaultKind.STALL: STALL_HOLD_S,
                     FaultKind.FULL: FULL_HOLD_S})
        self.cuts: list[dict[str, object]] = []
        problem = lazyfs_problem()
        if problem is not None:
            raise ClusterUnavailable(f"no power-loss layer: {problem}")
        name = "broker-a"
        self.fs: dict[int, LazyFs] = {}
        try:
            for broker_id in (0, 1):  # each store directory is a mount of its own
                self.fs[broker_id] = LazyFs(root / f"disk-{broker_id}",
                                            root / "set" / f"{name}-{broker_id}")
            self.set = BrokerSetProcesses(root / "set", role="SYNC_MASTER", slaves=1, name=name,
                                          broker_flags=["--flush-disk-type", "SYNC_FLUSH"],
                                          segment_size=SEGMENT_SIZE)
        except BaseException:
            self._close_fs()
            raise
        try:
            self.namesrv = self.set.namesrv
            self.set.wait_slaves_connected(timeout=EVENT_WAIT_S)
        except BaseException:
            self.close()
            raise

    def apply(self, fault: Fault) -> str:
        if fault.kind is FaultKind.STALL:
            self.fs[0].stall(fault.hold_s + EVENT_WAIT_S)  # cleared by the heal
            return f"the store of broker 0 at {self.set.addresses[0]}"
        if fault.kind is FaultKind.FULL:
            self.fs[0].full()
            return f"the store of broker 0 at {self.set.addresses[0]}"
        dropped = [self.fs[i].power_cut() for i in sorted(self.fs)]
        for broker_id in sorted(self.set.brokers):
            self.set.kill(broker_id)
        total = sum(int(str(d.get("dropped_bytes", 0))) for d in dropped)
        self.cuts.append({"dropped_bytes": total})
        return (f"brokers {', '.join(self.set.addresses[i] for i in sorted(self.set.brokers))}; "
                f"the layers dropped {total} bytes")

    def heal(self, fault: Fault) -> None:
        if fault.kind in (FaultKind.STALL, FaultKind.FULL):
            self.fs[0].clear()
            return
        for fs in self.fs.values():
            fs.remount()
        for broker_id in sorted(self.set.brokers):
            self.set.start_broker(broker_id, same_address=True)

    def settle(self) -> None:
        self.set.wait_slaves_connected(timeout=EVENT_WAIT_S)

    def promise_for(self, sends: list[Send], started: float) -> Promise:
        return self.promise

    def figures(self) -> dict[str, object]:
        return {"power_cuts": len(self.cuts),
                "dropped_bytes": sum(int(str(c.get("dropped_bytes", 0))) for c in self.cuts)}

    def servers(self) -> dict[str, ServerProcess]:
        return {f"broker {i}": p for i, p in self.set.brokers.items()}

    def _close_fs(self) -> None:
        for fs in self.fs.values():
            with contextlib.suppress(Exception):
                fs.clear()
            fs.close()

    def close(self) -> None:
        self.resume_all()
        for fs in self.fs.values():
            with contextlib.suppress(Exception):
                fs.clear()
        try:
            self.set.close()
        finally:
            self._close_fs()


POWER_KINDS = ("power", "power-async", "power-all")  # of clusters.CLUSTER_KINDS


def make_power_cluster(kind: str, root: Path) -> ChaosCluster:
    """Start the power-loss cluster ``kind`` (one of POWER_KINDS) with its stores under ``root``.

    Raises:
        ClusterUnavailable: this machine cannot mount the layer (the reason says why).
    """
    root.mkdir(parents=True, exist_ok=True)
    if kind == "power":
        return PowerStandaloneCluster(root)
    if kind == "power-async":
        return PowerStandaloneCluster(root, flush="ASYNC_FLUSH")
    if kind == "power-all":
        return PowerSetCluster(root)
    raise ValueError(f"not a power-loss cluster: {kind!r}")
