"""The clusters a chaos run breaks, as real processes, and the faults each offers (docs/chaos.md).

- ``standalone``: one ``orbitmq standalone`` (name server and broker), SYNC_FLUSH; killed -9 and
  started again on its store and ports, or paused.
- ``master-slave``: a name server, a SYNC_MASTER and its SLAVE (testing/broker_set.py); either
  broker killed -9 and started again on its old address (the master's gRPC port included), or
  paused; the slave's newest segment damaged (a bit flipped, or cut mid-message while it is
  down) and checked repaired.
- ``controller``: three etcd members, a name server and three SYNC_MASTER members in controller
  mode (testing/failover_set.py): the master or a slave killed -9, the etcd leader killed, the
  master and the etcd leader killed together (apache/rocketmq#7689), the master or the etcd
  leader paused past the lease; where this machine can make network namespaces (root, iproute2;
  testing/netns.py), the master cut from its peers and etcd while clients still reach it, or
  from etcd alone, the etcd leader or a follower cut from the other etcd members (minority and
  majority), one-way cuts and bridges; and where libfaketime is installed
  (testing/clock.py), a broker's clock stepped forward or back or drifting fast or slow; a
  slave's segment damaged as in master-slave.

Each cluster builds on the testing helpers the fault tests use; it adds only what to do for
each fault and how to tell it settled after a heal. Every wait is bounded.
"""

from __future__ import annotations

import abc
import contextlib
import os
import random
import re
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from orbitmq.testing.broker_set import BrokerSetProcesses
from orbitmq.testing.chaos.checker import SYNC_FLUSH, SYNC_MASTER, Promise, Send
from orbitmq.testing.chaos.corruption import STOPPED, check_repair, damage_slave
from orbitmq.testing.chaos.schedule import Fault, FaultKind, FaultMenu
from orbitmq.testing.clock import SkewedClock, clock_problem
from orbitmq.testing.corrupt import Damage
from orbitmq.testing.etcd import EtcdCluster, EtcdNode, etcd_binary, free_port
from orbitmq.testing.failover_set import FailoverSet, wait_for
from orbitmq.testing.netns import NetLab, netns_problem
from orbitmq.testing.process import ServerProcess, standalone_process
from orbitmq.testing.waits import EVENT_WAIT_S, READY_WAIT_S

__all__ = ["ChaosCluster", "ClusterUnavailable", "make_cluster", "CLUSTER_KINDS", "LEASE_TTL_S"]

SEGMENT_SIZE = 16 * 1024 * 1024  # commit log segments: small, the stores are throwaway
LEASE_TTL_S = 2  # controller mode's lease (as the failover tests): a pause of 3 s outlives it
CLUSTER_KINDS = ("standalone", "master-slave", "controller",
                 # on the power-loss layer (testing/chaos/power.py; skipped without FUSE)
                 "power", "power-async", "power-all")
# The server log lines a report shows when a cluster failed: errors, and the failover's own
# account of elections, fences and cuts.
DIAGNOSTIC = re.compile(r"ERROR|Error:|elected master|steps down|fenced|log cut|in-sync set of")
DIAGNOSTIC_LINES_MAX = 30  # per server, the last ones
# The corruption faults a replicated cluster offers (testing/chaos/corruption.py).
CORRUPTION_TARGETS = {FaultKind.BITFLIP: ("slave", "slave" + STOPPED),
                      FaultKind.TRUNCATE: ("slave" + STOPPED,)}
# What a slave's log says of a damaged segment (the corruption faults' report quotes it).
SLAVE_SAID = re.compile(r"corrupt message in the commit log .*? problem=[^=]*? found_by=\w+|"
                        r"commit log truncated offset=\d+ reason=[^=]*? discarded|"
                        r"incomplete last segment removed")
CORRUPTION_HOLDS_S = {FaultKind.BITFLIP: (0.5, 2.0), FaultKind.TRUNCATE: (0.5, 2.0)}
# Controller mode's one-way cuts (``a->b``: a's packets to b dropped, b's to a delivered), by
# role: the master's to its peers or theirs to it, the master's renewals to etcd or etcd's
# answers to it, the clients' requests or the master's answers, the etcd leader's messages to
# its followers or theirs to it.
ONE_WAY_TARGETS = ("master->peers", "peers->master", "master->etcd", "etcd->master",
                   "clients->master", "master->clients", "etcd-leader->etcd-followers",
                   "etcd-followers->etcd-leader")
# Clock skew of one broker: a step forward or back, or a drift fast or slow, for the hold.
SKEW_TARGETS = ("master+jump", "master-jump", "master+drift", "master-drift", "slave+jump",
                "slave-jump")
SKEW_JUMP_S = (1.0, 5.0 * LEASE_TTL_S)  # how far a step goes: up to past several leases
SKEW_DRIFT_RATE = (0.2, 0.8)  # seconds gained (lost) per second: far past any NTP's bound


class ClusterUnavailable(Exception):
    """This machine cannot run the cluster (no etcd binary...): the run says so and goes on."""


class ChaosCluster(abc.ABC):
    """Servers of one cluster, the faults they offer and the promise their mode makes."""

    name: str
    promise: Promise
    menu: FaultMenu
    namesrv: str
    notes: list[str]
    # A gRPC endpoint that stays where it is across the faults (the 5.x client's one access
    # point), or None when the cluster has none it can keep.
    grpc_endpoint: str | None = None
    # The faults after which the broker serving POP still knows every lease it handed out and
    # every ack it answered (lease_checker.py): any other fault may make it forget them.
    pop_state_kept: frozenset[FaultKind] = frozenset()

    def __init__(self) -> None:
        self._paused: set[int] = set()
        self.notes = []
        self.step_note = ""  # what the last step's settle found besides (the report's line)
        # A damaged slave's repair to check at the next settle: the damage, the master's and
        # the slave's stores, the slave's address (once it runs again).
        self._damaged: tuple[Damage, Path, Path, Callable[[], ServerProcess]] | None = None

    def damage(self, fault: Fault, master_store: Path, slave_store: Path,
               slave: Callable[[], ServerProcess], kill: Callable[[], None]) -> str:
        """A corruption fault on a slave (killed first for a ``-stopped`` target; the heal
        starts it again): what the report says of it."""
        stopped = fault.target.endswith(STOPPED)
        if stopped:
            kill()
        damage = damage_slave(slave_store, fault.kind is FaultKind.BITFLIP)
        self._damaged = (damage, master_store, slave_store, slave)
        return ("while down: " if stopped else "live: ") + damage.text()

    def check_damage_repaired(self, slave_addr: Callable[[], str]) -> None:
        """After a corruption fault's heal: the slave served nothing corrupt and is repaired
        (AssertionError otherwise, which the run reports as a step that did not settle); the
        note quotes what the slave's log said of it."""
        damaged, self._damaged = self._damaged, None
        self.step_note = ""
        if damaged is None:
            return
        damage, master_store, slave_store, slave = damaged
        self.step_note = check_repair(master_store, slave_store, slave_addr(), damage)
        said = [m.group(0) for m in map(SLAVE_SAID.search, slave().output().splitlines())
                if m is not None and (f"={damage.offset} " in m.group(0)
                                      or "incomplete last segment" in m.group(0))]
        self.step_note += (f"; the slave said: {said[-1]}" if said
                           else "; the slave's log says nothing of it")

    @abc.abstractmethod
    def apply(self, fault: Fault) -> str:
        """Break what ``fault`` says; returns what its roles resolved to (for the report)."""

    @abc.abstractmethod
    def heal(self, fault: Fault) -> None:
        """Undo ``fault``: start again what was killed, resume what was paused, heal links."""

    @abc.abstractmethod
    def settle(self) -> None:
        """Until the cluster serves again after a heal (bounded; raises when it does not)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop every process of the cluster."""

    @abc.abstractmethod
    def servers(self) -> dict[str, ServerProcess]:
        """The cluster's OrbitMQ processes now, by name (for the diagnostics)."""

    def replica_stores(self) -> dict[str, Path]:
        """The store directory of each replica of the broker set, by name (none: one replica,
        nothing to compare)."""
        return {}

    def final_master(self) -> str | None:
        """The name (as in :meth:`replica_stores`) of the master now; asked before the close."""
        return None

    def role_probe(self) -> Callable[[], tuple[int | None, str | None, str]] | None:
        """A function telling the roles now (epoch, master, detail) for the failover timeline,
        or None for a cluster without elections."""
        return None

    def promise_for(self, sends: list[Send], started: float) -> Promise:
        """The promise the history is checked against, once the run ended: ``promise``, or
        for an ASYNC mode its bound computed from what happened (``started``: the history's
        start on ``time.monotonic``, the clock of the sends' ``at_s``)."""
        return self.promise

    def figures(self) -> dict[str, object]:
        """The cluster's own figures for the report (what its faults did)."""
        return {}

    def diagnostics(self) -> list[str]:
        """The last DIAGNOSTIC lines of each server: what a report shows when the cluster did
        not settle, a writer did not come back or a promise was broken."""
        out = []
        for name, proc in sorted(self.servers().items()):
            lines = [line for line in proc.output().splitlines() if DIAGNOSTIC.search(line)]
            out.append(f"{name}: {len(lines)} lines")
            out.extend(f"  {line}" for line in lines[-DIAGNOSTIC_LINES_MAX:])
        return out

    def pause(self, pid: int) -> None:
        os.kill(pid, signal.SIGSTOP)
        self._paused.add(pid)

    def resume(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        self._paused.discard(pid)

    def resume_all(self) -> None:
        """SIGCONT to whatever is still paused (before a close: a stopped process cannot exit
        on SIGINT)."""
        for pid in list(self._paused):
            self.resume(pid)


def start_standalone(store: str, namesrv_port: int, broker_port: int, grpc_port: int,
                     *args: str) -> ServerProcess:
    """``orbitmq standalone`` on ``store`` and these fixed ports (a restart keeps them) with
    small segments and ``args``, once ready."""
    proc = standalone_process(store, "--namesrv-port", str(namesrv_port),
                              "--broker-port", str(broker_port), "--ha-listen-port", "0",
                              "--grpc-port", str(grpc_port),
                              "--mapped-file-size-commitlog", str(SEGMENT_SIZE), *args)
    try:
        proc.wait_ready("namesrv", "broker", timeout=READY_WAIT_S)
    except BaseException:
        proc.kill()
        raise
    return proc


class StandaloneCluster(ChaosCluster):
    """One ``orbitmq standalone`` with SYNC_FLUSH on fixed free ports (a restart keeps them)."""

    name = "standalone"
    promise = SYNC_FLUSH
    # SYNC_FLUSH: a hand-out is written to the POP log before the receive is answered (a kill
    # -9 keeps the page cache) and an ack synced before it is answered.
    pop_state_kept = frozenset({FaultKind.KILL, FaultKind.PAUSE})
    menu = FaultMenu(targets={FaultKind.KILL: ("standalone",), FaultKind.PAUSE: ("standalone",)},
                     holds_s={FaultKind.KILL: (0.5, 3.0), FaultKind.PAUSE: (1.0, 4.0)})

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.store = str(root / "standalone")
        self.namesrv_port, self.broker_port = free_port(), free_port()
        self.grpc_port = free_port()
        self.namesrv = f"127.0.0.1:{self.namesrv_port}"
        self.grpc_endpoint = f"127.0.0.1:{self.grpc_port}"
        self.proc = self._start()

    def _start(self) -> ServerProcess:
        return start_standalone(self.store, self.namesrv_port, self.broker_port, self.grpc_port,
                                "--flush-disk-type", "SYNC_FLUSH")

    def apply(self, fault: Fault) -> str:
        if fault.kind is FaultKind.KILL:
            self.proc.kill()
        else:
            self.pause(self.proc.proc.pid)
        return f"pid {self.proc.proc.pid}"

    def heal(self, fault: Fault) -> None:
        if fault.kind is FaultKind.KILL:
            self.proc = self._start()
        else:
            self.resume(self.proc.proc.pid)

    def settle(self) -> None:
        self.proc.wait_ready("namesrv", "broker", timeout=READY_WAIT_S)

    def servers(self) -> dict[str, ServerProcess]:
        return {"standalone": self.proc}

    def close(self) -> None:
        self.resume_all()
        self.proc.stop()


class _KeptGrpcSet(BrokerSetProcesses):
    """The set with its master's gRPC endpoint on a port it keeps across restarts (the 5.x
    clients' one access point: a slave refuses their sends and receives, so it has none)."""

    def __init__(self, root: Path, *, grpc_port: int, **options: Any) -> None:
        self.grpc_port = grpc_port
        super().__init__(root, **options)

    def args(self, broker_id: int, port: str = "0", ha_port: str = "0") -> list[str]:
        out = super().args(broker_id, port, ha_port)
        at = out.index("--grpc-listen-port") + 1
        out[at] = str(self.grpc_port) if broker_id == 0 else "-1"
        return out


class MasterSlaveCluster(ChaosCluster):
    """A name server, a SYNC_MASTER (id 0) and one SLAVE (id 1); a killed broker starts again on
    its store and address (no automatic promotion: clients read from the slave meanwhile). The
    master's gRPC endpoint keeps its port too, for the 5.x clients."""

    name = "master-slave"
    promise = SYNC_MASTER
    # The POP state lives on the master: a restart on its store keeps it (hand-outs and acks
    # are written to its POP log before they are answered), a pause too; the slave has none.
    pop_state_kept = frozenset({FaultKind.KILL, FaultKind.PAUSE})
    menu = FaultMenu(targets={FaultKind.KILL: ("master", "slave"),
                              FaultKind.PAUSE: ("master", "slave"), **CORRUPTION_TARGETS},
                     holds_s={FaultKind.KILL: (0.5, 3.0), FaultKind.PAUSE: (1.0, 4.0),
                              **CORRUPTION_HOLDS_S})

    def __init__(self, root: Path) -> None:
        super().__init__()
        grpc_port = free_port()
        self.set = _KeptGrpcSet(root / "master-slave", grpc_port=grpc_port, role="SYNC_MASTER",
                                slaves=1, segment_size=SEGMENT_SIZE)
        self.grpc_endpoint = f"127.0.0.1:{grpc_port}"
        try:
            self.namesrv = self.set.namesrv
            self.set.wait_slaves_connected(timeout=EVENT_WAIT_S)
        except BaseException:
            self.set.close()
            raise

    @staticmethod
    def _id(fault: Fault) -> int:
        return 0 if fault.target == "master" else 1

    def apply(self, fault: Fault) -> str:
        broker_id = self._id(fault)
        if fault.kind in CORRUPTION_TARGETS:
            root, name = self.set.root, self.set.name
            return self.damage(fault, root / f"{name}-0", root / f"{name}-1",
                               lambda: self.set.brokers[1], lambda: self.set.kill(1))
        if fault.kind is FaultKind.KILL:
            self.set.kill(broker_id)
        else:
            self.pause(self.set.brokers[broker_id].proc.pid)
        return f"broker {broker_id} at {self.set.addresses[broker_id]}"

    def heal(self, fault: Fault) -> None:
        broker_id = self._id(fault)
        if fault.kind is FaultKind.KILL or fault.target.endswith(STOPPED):
            self.set.start_broker(broker_id, same_address=True)
        elif fault.kind is FaultKind.PAUSE:
            self.resume(self.set.brokers[broker_id].proc.pid)

    def settle(self) -> None:
        self.set.wait_slaves_connected(timeout=EVENT_WAIT_S)
        self.check_damage_repaired(lambda: self.set.addresses[1])

    def servers(self) -> dict[str, ServerProcess]:
        return {f"broker {i}": p for i, p in self.set.brokers.items()}

    def replica_stores(self) -> dict[str, Path]:
        return {f"broker {i}": self.set.root / f"{self.set.name}-{i}" for i in self.set.brokers}

    def final_master(self) -> str | None:
        return "broker 0"  # no promotion in this set

    def close(self) -> None:
        self.resume_all()
        self.set.close()


class ControllerCluster(ChaosCluster):
    """etcd (three members), a name server and three members in controller mode (SYNC_MASTER),
    in network namespaces when the machine can make them (then partitions are on the menu too:
    whole, one-way and bridges), each broker under libfaketime when it is installed (then clock
    skew is on the menu: steps forward and back, drift fast and slow)."""

    name = "controller"
    promise = SYNC_MASTER
    MEMBERS = (1, 2, 3)
    ETCD_MEMBERS = 3  # a majority survives one member lost or cut off

    def __init__(self, root: Path) -> None:
        super().__init__()
        if etcd_binary() is None:
            raise ClusterUnavailable("etcd is not installed (Debian: apt-get install etcd-server)")
        problem = netns_problem()
        no_clock = clock_problem()
        if problem is not None:
            self.notes.append(f"partitions skipped: {problem}")
        if no_clock is None:
            self.notes.append("clock skew on the brokers through libfaketime; etcd members' "
                              "clocks are not skewed (Go reads clocks through the vDSO, "
                              "out of an LD_PRELOAD library's reach)")
        else:
            self.notes.append(f"clock skew skipped: {no_clock}")
        self.menu = self.menu_for(partitions=problem is None, clock=no_clock is None)
        self.lab: NetLab | None = None
        self.namesrv_process: ServerProcess | None = None
        self.etcd: EtcdCluster | None = None
        self.brokers: FailoverSet | None = None
        self.clocks: dict[int, SkewedClock] = {}
        self._resolved: dict[Fault, list[int]] = {}
        self._resolved_etcd: dict[Fault, EtcdNode] = {}
        self._leader_known = False
        self._epoch = 0  # the master's epoch when the last step resolved its roles
        try:
            if no_clock is None:
                self.clocks = {m: SkewedClock(root / "clocks" / f"b{m}.rc") for m in self.MEMBERS}
            self._build(root, use_netns=problem is None)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def menu_for(*, partitions: bool, clock: bool) -> FaultMenu:
        """The faults this cluster offers: partitions need network namespaces, clock skew
        libfaketime."""
        targets: dict[FaultKind, tuple[str, ...]] = {
            FaultKind.KILL: ("master", "slave", "etcd", "master+etcd", "all"),
            FaultKind.PAUSE: ("master", "etcd"),
            **CORRUPTION_TARGETS,
        }
        if partitions:
            targets[FaultKind.ISOLATE] = ("master", "namesrv", "etcd-leader", "etcd-follower")
            targets[FaultKind.CUT] = ("master-etcd", "clients-master")
            targets[FaultKind.ONE_WAY] = ONE_WAY_TARGETS
            targets[FaultKind.BRIDGE] = ("etcd", "cluster")
        if clock:
            targets[FaultKind.SKEW] = SKEW_TARGETS
        pause_s = (LEASE_TTL_S + 1.0, LEASE_TTL_S + 4.0)  # past the lease: a new master is elected
        partition_s = (LEASE_TTL_S + 1.0, LEASE_TTL_S + 6.0)
        return FaultMenu(targets=targets, holds_s={
            FaultKind.KILL: (0.5, 4.0), FaultKind.PAUSE: pause_s,
            FaultKind.ISOLATE: partition_s, FaultKind.CUT: partition_s,
            FaultKind.ONE_WAY: partition_s, FaultKind.BRIDGE: partition_s,
            FaultKind.SKEW: partition_s, **CORRUPTION_HOLDS_S}, gap_s=(3.0, 6.0))

    def _build(self, root: Path, *, use_netns: bool) -> None:
        clock_prefix: dict[int, Sequence[str]] = {m: c.prefix() for m, c in self.clocks.items()}
        (root / "etcd").mkdir(parents=True, exist_ok=True)
        if not use_netns:
            self.etcd = EtcdCluster(self.ETCD_MEMBERS, root=root / "etcd")
            self.brokers = FailoverSet(root / "controller", self.etcd.endpoints, ttl_s=LEASE_TTL_S,
                                       prefixes=clock_prefix)
        else:
            etcd_ns = [f"e{i}" for i in range(1, self.ETCD_MEMBERS + 1)]
            self.lab = NetLab([*etcd_ns, "ns", *(f"b{m}" for m in self.MEMBERS)])
            lab = self.lab
            self.etcd = EtcdCluster(self.ETCD_MEMBERS, hosts=[lab.addr[e] for e in etcd_ns],
                                    prefixes=[lab.prefix[e] for e in etcd_ns], root=root / "etcd")
            self.namesrv_process = ServerProcess(
                ["namesrv", "--listen-host", lab.addr["ns"], "--port", "9876",
                 "--allow-anonymous", "true"], prefix=lab.prefix["ns"])
            self.namesrv_process.wait_ready("namesrv", timeout=READY_WAIT_S)
            self.brokers = FailoverSet(
                root / "controller", self.etcd.endpoints, ttl_s=LEASE_TTL_S,
                hosts={m: lab.addr[f"b{m}"] for m in self.MEMBERS},
                prefixes={m: [*lab.prefix[f"b{m}"], *clock_prefix.get(m, [])]
                          for m in self.MEMBERS},
                namesrv=f"{lab.addr['ns']}:9876")
        self.namesrv = self.brokers.namesrv
        self.brokers.wait_master(in_sync=len(self.MEMBERS), timeout=READY_WAIT_S)

    def _master(self) -> int:
        """The member etcd names master now (member 1 while none)."""
        assert self.brokers is not None
        try:
            _, master = self.brokers.read()
        except OSError:
            master = None
        self._epoch = master.epoch if master is not None else 0
        return master.member if master is not None else 1

    def _etcd_leader(self) -> int:
        """The index of the etcd member the majority names leader now (the first running one
        while none is known: ``_leader_known`` says which it was)."""
        assert self.etcd is not None
        leader = self.etcd.leader()
        self._leader_known = leader is not None
        if leader is None:
            leader = next((n for n in self.etcd.nodes if n.running()), self.etcd.nodes[0])
        return self.etcd.nodes.index(leader)

    def apply(self, fault: Fault) -> str:
        assert self.brokers is not None and self.etcd is not None
        master = self._master()
        slave = next(m for m in self.MEMBERS if m != master)
        if fault.kind in (FaultKind.ONE_WAY, FaultKind.BRIDGE):
            return self._partition(fault, master) + f", epoch {self._epoch}"
        if fault.kind is FaultKind.SKEW:
            return self._skew(fault, master, slave) + f" (member {master} master, epoch " \
                                                      f"{self._epoch})"
        if fault.kind is FaultKind.KILL and fault.target == "all":  # a whole set's power cycle
            self._resolved[fault] = list(self.MEMBERS)
            for each in self.MEMBERS:
                self.brokers.kill(each)
            return f"members {', '.join(map(str, self.MEMBERS))} (member {master} master)"
        member = {"master": master, "slave": slave, "master+etcd": master,
                  "slave" + STOPPED: slave}.get(fault.target)
        self._resolved[fault] = [member] if member is not None else []
        if fault.kind in CORRUPTION_TARGETS:
            brokers, name = self.brokers, self.brokers.name
            return f"member {slave} " + self.damage(
                fault, brokers.root / f"{name}-{master}", brokers.root / f"{name}-{slave}",
                lambda: brokers.brokers[slave], lambda: brokers.kill(slave))
        node = None
        if fault.kind in (FaultKind.KILL, FaultKind.PAUSE) and "etcd" in fault.target:
            node = self.etcd.nodes[self._etcd_leader()]
            self._resolved_etcd[fault] = node
        if fault.kind is FaultKind.KILL:
            if member is not None:
                self.brokers.kill(member)
            if node is not None:
                node.kill()
        elif fault.kind is FaultKind.PAUSE:
            if member is not None:
                self.pause(self.brokers.brokers[member].proc.pid)
            elif node is not None and node.proc is not None:
                self.pause(node.proc.pid)
        else:
            assert self.lab is not None
            ns, others = self._links(fault, master)
            for other in others:
                self.lab.cut(ns, other)
            return f"{ns} cut from {', '.join(others)}" + (
                f" (member {master})" if ns == f"b{master}" else "") + (
                " (etcd leader)" if fault.target == "etcd-leader" else "")
        return (f"member {member}" if member is not None else "") + (
            f" etcd {node.name} ({'leader' if self._leader_known else 'no leader known'})"
            if node is not None else "")

    def _etcd_ns(self) -> list[str]:
        assert self.etcd is not None
        return [f"e{i}" for i in range(1, len(self.etcd.nodes) + 1)]

    def _links(self, fault: Fault, master: int) -> tuple[str, list[str]]:
        """The namespace a partition cuts and the ones it cuts it from: the master from its
        peers and etcd (clients still reach it: it must fence itself), the name server from
        everyone (clients and brokers keep what they know), the master from etcd alone, the
        clients (the harness's own namespace) from the master, or one etcd member (the leader,
        or a follower) from the other etcd members, the brokers still reaching it (a minority
        of one against a majority of two)."""
        peers = [f"b{m}" for m in self.MEMBERS if m != master]
        etcd = self._etcd_ns()
        if fault.target == "namesrv":
            return "ns", ["root", *etcd, *(f"b{m}" for m in self.MEMBERS)]
        if fault.target == "clients-master":
            return f"b{master}", ["root"]
        if fault.target == "master-etcd":
            return f"b{master}", etcd
        if fault.target.startswith("etcd-"):
            leader = etcd[self._etcd_leader()]
            one = leader if fault.target == "etcd-leader" else next(
                e for e in etcd if e != leader)
            return one, [e for e in etcd if e != one]
        return f"b{master}", [*etcd, *peers]

    def _roles(self, master: int) -> dict[str, list[str]]:
        """Role name -> namespaces, resolved now (one-way and bridge targets name roles)."""
        etcd = self._etcd_ns()
        leader = etcd[self._etcd_leader()]
        return {"master": [f"b{master}"],
                "peers": [f"b{m}" for m in self.MEMBERS if m != master],
                "etcd": etcd, "etcd-leader": [leader],
                "etcd-followers": [e for e in etcd if e != leader], "clients": ["root"],
                "namesrv": ["ns"]}

    def _partition(self, fault: Fault, master: int) -> str:
        """A one-way cut (``a->b``: a's packets to b vanish, b's to a arrive) or a bridge: two
        halves cut from each other, each still reaching the bridge. ``etcd``: the leader and
        one follower apart, the other follower the bridge. ``cluster``: the master with the
        etcd leader apart from one slave with one etcd follower; the other slave and the other
        follower are the bridge (the name server and the clients reach everyone)."""
        assert self.lab is not None
        roles = self._roles(master)
        if fault.kind is FaultKind.ONE_WAY:
            src_role, dst_role = fault.target.split("->")
            src = roles[src_role]
            dst = [d for d in roles[dst_role] if d not in src]
            for a in src:
                for b in dst:
                    self.lab.cut_one_way(a, b)
            return f"{', '.join(src)} -> {', '.join(dst)} dropped (member {master} master, " \
                   f"etcd leader {roles['etcd-leader'][0]})"
        leader, followers = roles["etcd-leader"], roles["etcd-followers"]
        if fault.target == "etcd":
            left, right, bridge = leader, followers[1:], followers[:1]
        else:
            peers = roles["peers"]
            left, right = [f"b{master}", *leader], [peers[1], followers[1]]
            bridge = [peers[0], followers[0]]
        self.lab.cut_between(left, right)
        return f"{', '.join(left)} | {', '.join(right)} apart, bridge {', '.join(bridge)} " \
               f"(member {master} master)"

    def _skew(self, fault: Fault, master: int, slave: int) -> str:
        """Step or drift one broker's clock; how far is drawn from the fault itself, so that
        the seed replays it too."""
        match = re.fullmatch(r"(master|slave)([+-])(jump|drift)", fault.target)
        if match is None:
            raise ValueError(f"unknown clock skew target {fault.target!r}")
        role, direction, how = match.groups()
        sign = 1.0 if direction == "+" else -1.0
        member = master if role == "master" else slave
        self._resolved[fault] = [member]
        clock = self.clocks[member]
        rng = random.Random(f"{fault.at_s}:{fault.target}")
        if how == "jump":
            seconds = round(sign * rng.uniform(*SKEW_JUMP_S), 2)
            clock.jump(seconds)
            return f"member {member} clock stepped {seconds:+.2f} s"
        rate = round(sign * rng.uniform(*SKEW_DRIFT_RATE), 2)
        clock.drift(rate)
        return f"member {member} clock drifting {rate:+.2f} s/s"

    def heal(self, fault: Fault) -> None:
        assert self.brokers is not None and self.etcd is not None
        members = self._resolved.pop(fault, [])
        node = self._resolved_etcd.pop(fault, None)
        if fault.kind in CORRUPTION_TARGETS:
            if fault.target.endswith(STOPPED):
                for member in members:
                    self.brokers.start_member(member)
        elif fault.kind is FaultKind.SKEW:
            for member in members:
                self.clocks[member].reset()
        elif fault.kind is FaultKind.KILL:
            if node is not None:
                self.etcd.restart(node)
            for member in members:
                self.brokers.start_member(member)
        elif fault.kind is FaultKind.PAUSE:
            for member in members:
                self.resume(self.brokers.brokers[member].proc.pid)
            if not members and node is not None and node.proc is not None:
                self.resume(node.proc.pid)
        else:
            assert self.lab is not None
            self.lab.heal()

    def settle(self) -> None:
        """Until every etcd member knows a leader, and etcd names a master with the whole set
        in sync again, and that master is the running process: etcd started again keeps the
        records of before it died, whose master may be the member killed with it (a new one
        has another address)."""
        brokers, etcd = self.brokers, self.etcd
        assert brokers is not None and etcd is not None
        etcd.wait_healthy(timeout=READY_WAIT_S)

        def current() -> bool:
            try:
                state, master = brokers.read()
            except OSError:
                return False
            return (state is not None and master is not None
                    and len(state.in_sync) == len(self.MEMBERS)
                    and brokers.addresses.get(master.member) == master.addr)
        wait_for(current, "a running master with the whole set in sync", READY_WAIT_S)
        damaged = self._damaged
        if damaged is not None:
            member = int(damaged[2].name.rpartition("-")[2])
            self.check_damage_repaired(lambda: brokers.addresses[member])

    def servers(self) -> dict[str, ServerProcess]:
        if self.brokers is None:
            return {}
        return {f"member {m}": p for m, p in self.brokers.brokers.items()}

    def replica_stores(self) -> dict[str, Path]:
        if self.brokers is None:
            return {}
        return {f"member {m}": self.brokers.root / f"{self.brokers.name}-{m}"
                for m in self.brokers.brokers}

    def final_master(self) -> str | None:
        return f"member {self._master()}"

    def role_probe(self) -> Callable[[], tuple[int | None, str | None, str]] | None:
        brokers = self.brokers
        if brokers is None:
            return None

        def probe() -> tuple[int | None, str | None, str]:
            state, master = brokers.read()
            in_sync = f"in-sync {sorted(state.in_sync)}" if state is not None else "no state"
            if master is None:
                return (state.epoch if state is not None else None), None, in_sync
            return master.epoch, f"member {master.member}", in_sync
        return probe

    def close(self) -> None:
        self.resume_all()
        if self.lab is not None:
            self.lab.heal()
        for clock in self.clocks.values():
            clock.close()
        # Each part alone: one that fails to stop must not leave the others running.
        if self.brokers is not None:
            with contextlib.suppress(Exception):
                self.brokers.close()
        if self.namesrv_process is not None:
            with contextlib.suppress(Exception):
                self.namesrv_process.stop()
        if self.etcd is not None:
            with contextlib.suppress(Exception):
                self.etcd.close()
        if self.lab is not None:
            self.lab.close()


def make_cluster(kind: str, root: Path) -> ChaosCluster:
    """Start the cluster ``kind`` (one of CLUSTER_KINDS but the power ones, which
    testing/chaos/power.py builds on this module's) with its stores under ``root``.

    Raises:
        ClusterUnavailable: this machine cannot run it (the reason says why).
    """
    root.mkdir(parents=True, exist_ok=True)
    if kind == "standalone":
        return StandaloneCluster(root)
    if kind == "master-slave":
        return MasterSlaveCluster(root)
    if kind == "controller":
        return ControllerCluster(root)
    raise ValueError(f"unknown cluster {kind!r} (one of {', '.join(CLUSTER_KINDS)})")
