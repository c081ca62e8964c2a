"""One chaos run (docs/chaos.md): per cluster, start it, load it, play the seeded schedule of
faults, heal, drain every queue and group, and judge the history with the checker.

What it prints is the record of the run: the seed (``CHAOS_SEED=N`` replays the schedule), each
cluster's schedule as planned and each step as it ran (what its roles resolved to, when it
healed, how long the cluster took to settle), then the verdict with its counts. ``chaos/run.py``
(``make chaos``) is the command; ``tests/chaos/test_chaos.py`` runs a short slice of it.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from orbitmq.testing.chaos.checker import Outcome, Verdict, check
from orbitmq.testing.chaos.clusters import ChaosCluster, ClusterUnavailable, make_cluster
from orbitmq.testing.chaos.lease_checker import Disruption, LeaseVerdict, check_leases
from orbitmq.testing.chaos.pop_reader import PopReader, writer_acked
from orbitmq.testing.chaos.power import POWER_KINDS, make_power_cluster
from orbitmq.testing.chaos.replicas import ReplicaComparison, compare_replicas, read_log
from orbitmq.testing.chaos.schedule import Fault, make_schedule, restrict, sub_seed
from orbitmq.testing.chaos.timeline import FaultSpan, RoleWatcher, Timeline, make_timeline
from orbitmq.testing.chaos.workload import (
    ClientWriter,
    History,
    LiveGroup,
    Writer,
    client_python,
    create_topic,
    drain,
    wait_caught_up,
)
from orbitmq.testing.failover_set import wait_for
from orbitmq.testing.waits import EVENT_WAIT_S

__all__ = ["Clients", "ClusterReport", "run_cluster", "run", "fresh_seed", "find_clients",
           "lease_disruptions", "compare_replicas_of"]

WRITERS = ("w1", "w2")  # plain writers (the SDK picks queues round robin)
ORDERED_WRITERS = ("o1",)  # writers by key (select_by_hash): per-key order is checked
CPP_WRITER = "c1"  # the C++ client's writer, when its venv is there
RMQ5_WRITER = "g1"  # the 5.x gRPC client's, when its venv is there and the cluster keeps an endpoint
FIRST_ACKS = 20  # acknowledged sends before the faults begin (the cluster took load)
AFTER_HEAL_ACKS = 50  # acknowledged sends after the last heal: the writers came back
CATCH_UP_WAIT_S = 2 * EVENT_WAIT_S  # the live group reading what the drain found
POP_CATCH_UP_MAX_S = 10 * CATCH_UP_WAIT_S  # the POP reader, while its acks still come in
DRAIN_GROUP = "chaos-drain"
LIVE_GROUP = "chaos-live"

Out = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Clients:
    """The Pythons of the official clients' venvs (None: that writer is left out)."""

    cpp: Path | None = None  # .venv-compat: the C++ client 0.4.4
    rmq5: Path | None = None  # .venv-rmq5: the 5.x gRPC client


def find_clients(compat_venv: Path, rmq5_venv: Path, out: Out = print) -> Clients:
    """The official clients installed in their venvs (each one missing is said and left out)."""
    # Both packages are named rocketmq: each probe asks for what only its own client has.
    cpp, why_cpp = client_python(compat_venv, "import rocketmq.client")
    rmq5, why_rmq5 = client_python(rmq5_venv, "from rocketmq import ClientConfiguration")
    for name, why in (("C++ client", why_cpp), ("5.x gRPC client", why_rmq5)):
        if why:
            out(f"{name} writer skipped: {why}")
    return Clients(cpp, rmq5)


def fresh_seed() -> int:
    return random.SystemRandom().randrange(1, 10**6)


@dataclasses.dataclass
class ClusterReport:
    """One cluster's part of a run: what was planned, what ran, and the verdict (None when the
    run did not get that far: ``error`` or ``skipped`` says why)."""

    cluster: str
    seed: int
    schedule: list[Fault]
    steps: list[str] = dataclasses.field(default_factory=list)
    verdict: Verdict | None = None
    figures: dict[str, object] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None
    skipped: str | None = None
    diagnostics: list[str] = dataclasses.field(default_factory=list)
    spans: list[FaultSpan] = dataclasses.field(default_factory=list)  # each step as it ran
    leases: LeaseVerdict | None = None  # the POP reader's verdict (None: no reader)
    replicas: ReplicaComparison | None = None  # the final logs (None: one replica)
    timeline: Timeline | None = None
    history: History | None = dataclasses.field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.skipped is not None or (
            self.error is None and self.verdict is not None and self.verdict.ok
            and (self.leases is None or self.leases.ok)
            and (self.replicas is None or self.replicas.replica_divergent == 0))

    def details(self) -> dict[str, object]:
        """What the results row leaves out, for the report's JSON: the failover timeline, the
        replicas' comparison, the lease checker's counts and violations."""
        out: dict[str, object] = {}
        if self.timeline is not None:
            out["timeline"] = self.timeline.to_json()
        if self.replicas is not None:
            out["replicas"] = self.replicas.to_json()
        if self.leases is not None:
            out["leases"] = {**self.leases.counts(), "violations": self.leases.violations,
                             "examples": {
                                 "acked_twice": self.leases.acked_twice[:10],
                                 "redelivered_after_ack": self.leases.redelivered_after_ack[:10],
                                 "overlapping_leases": self.leases.overlapping_leases[:10],
                                 "excused": self.leases.excused[:10],
                                 "lost": self.leases.lost[:10]}}
        return out

    def summary(self) -> dict[str, object]:
        """One row of the results table (docs/chaos.md)."""
        row: dict[str, object] = {"cluster": self.cluster, "seed": self.seed,
                                  "faults": len(self.schedule)}
        if self.skipped:
            row["skipped"] = self.skipped
        if self.verdict is not None:
            counts = self.verdict.counts()
            row.update(promise=self.verdict.promise.name, **{k: counts[k] for k in (
                "acknowledged", "unknown", "failed", "lost", "lost_middle", "unexpected",
                "duplicated", "recovered", "divergent", "out_of_order", "missed")})
        if self.replicas is not None:
            row.update(self.replicas.counts())
        if self.leases is not None:
            counts = self.leases.counts()
            row.update({f"pop_{k}": counts[k] for k in (
                "deliveries", "acks_ok", "redelivered", "acked_twice", "redelivered_after_ack",
                "overlapping_leases", "excused", "lost")})
        if self.timeline is not None:
            row.update(elections=self.timeline.elections, write_gaps_over_1s=len(self.timeline.gaps))
        row.update(self.figures)
        row["verdict"] = ("skipped" if self.skipped else "error" if self.error
                          else "OK" if self.ok else "VIOLATED")
        return row


def run_cluster(kind: str, root: Path, seed: int, duration_s: float, out: Out = print, *,
                clients: Clients | None = None,
                faults: Sequence[str] | None = None) -> ClusterReport:
    """The whole run of one cluster; never raises for what the cluster does (an error is in
    the report), so that one cluster's failure does not hide the others' verdicts.
    ``clients``: the official clients' Pythons, for their writers beside the SDK's.
    ``faults``: only these fault kinds of the cluster's menu (by value; all when None)."""
    clients = clients or Clients()
    cluster_seed = sub_seed(seed, kind)
    out(f"== {kind}: seed {seed} (cluster seed {cluster_seed}), {duration_s:.0f} s of faults")
    try:
        cluster = (make_power_cluster(kind, root / kind) if kind in POWER_KINDS
                   else make_cluster(kind, root / kind))
    except ClusterUnavailable as e:
        out(f"   skipped: {e}")
        return ClusterReport(kind, seed, [], skipped=str(e))
    menu = cluster.menu if faults is None else restrict(cluster.menu, faults)
    if faults is not None:
        out(f"   faults restricted to {', '.join(faults)}")
    schedule = make_schedule(cluster_seed, duration_s, menu)
    report = ClusterReport(kind, seed, schedule, notes=list(cluster.notes))
    for note in cluster.notes:
        out(f"   note: {note}")
    out(f"   schedule ({len(schedule)} faults, promise {cluster.promise.name}):")
    for fault in schedule:
        out(f"     {fault.text()}")
    stores: dict[str, Path] = {}
    master: str | None = None
    try:
        _load_and_break(cluster, report, seed, duration_s, out, root / kind, clients)
        stores, master = cluster.replica_stores(), cluster.final_master()
    except Exception as e:  # the report says what failed; the run goes on to the next cluster
        report.error = f"{type(e).__name__}: {e}"
        out(traceback.format_exc())
    finally:
        if not report.ok:
            report.diagnostics = cluster.diagnostics()
        cluster.close()
    if report.history is not None and master is not None and len(stores) > 1:
        try:
            report.replicas = compare_replicas_of(stores, master, report.history)
        except (OSError, KeyError) as e:  # a store that cannot be read: said, not hidden
            report.error = report.error or f"replica logs unreadable: {type(e).__name__}: {e}"
    if report.verdict is not None:
        out("   " + report.verdict.text().replace("\n", "\n   "))
    for part in (report.leases, report.replicas, report.timeline):
        if part is not None:
            out("   " + part.text().replace("\n", "\n   "))
    if report.error is not None:
        out(f"   ERROR {report.error}")
    if report.diagnostics:
        out("   server log lines (errors, elections, fences, cuts):")
        for line in report.diagnostics:
            out(f"     {line}")
    out(f"   figures {json.dumps(report.figures)}")
    return report


def _load_and_break(cluster: ChaosCluster, report: ClusterReport, seed: int, duration_s: float,
                    out: Out, root: Path, clients: Clients) -> None:
    topic = re.sub(r"[^A-Za-z0-9]", "", f"Chaos{cluster.name.title()}{seed}")
    create_topic(cluster.namesrv, topic)
    history = History()
    report.history = history
    stop = threading.Event()
    writers: list[Writer | ClientWriter] = [Writer(w, cluster.namesrv, topic, history, stop)
                                         for w in WRITERS]
    writers += [Writer(w, cluster.namesrv, topic, history, stop, ordered=True)
                for w in ORDERED_WRITERS]
    if clients.cpp is not None:
        writers.append(ClientWriter(CPP_WRITER, "cpp", clients.cpp, cluster.namesrv, topic,
                                    history, stop, root / "cpp-home"))
    if clients.rmq5 is not None and cluster.grpc_endpoint is not None:
        writers.append(ClientWriter(RMQ5_WRITER, "rmq5", clients.rmq5, cluster.grpc_endpoint,
                                    topic, history, stop, root / "rmq5-home"))
    for w in writers:
        w.start()
    pop: PopReader | None = None
    if clients.rmq5 is not None and cluster.grpc_endpoint is not None:
        pop = PopReader(clients.rmq5, cluster.grpc_endpoint, topic, history, root / "pop-home")
        pop.start()
    probe = cluster.role_probe()
    roles = RoleWatcher(probe, history.now_s) if probe is not None else None
    if roles is not None:
        roles.start()
    live: LiveGroup | None = None
    try:
        wait_for(lambda: history.acked_count() >= FIRST_ACKS, "the first sends acknowledged",
                 EVENT_WAIT_S)
        live = LiveGroup(LIVE_GROUP, cluster.namesrv, topic, history)
        settle_s = _play(cluster, report, history, out)
        remaining = duration_s - (time.monotonic() - history.started)
        if remaining > 0:
            time.sleep(remaining)
        healed_at = history.now_s()
        recovered = True
        try:
            wait_for(lambda: history.acked_after(healed_at) >= AFTER_HEAL_ACKS,
                     "the writers acknowledged again after the last heal", EVENT_WAIT_S)
        except AssertionError:
            recovered = False
    except BaseException:
        if live is not None:
            live.shutdown()
        if pop is not None:
            pop.finish()
        if roles is not None:
            roles.stop()
        raise
    finally:
        stop.set()
        for w in writers:
            w.join(EVENT_WAIT_S)
    errors = [f"{w.writer}: {w.error!r}" for w in writers if w.error is not None]
    pop_drained = False
    try:
        read = drain(cluster.namesrv, topic, DRAIN_GROUP, history)
        caught_up = wait_caught_up(history, LIVE_GROUP, DRAIN_GROUP, CATCH_UP_WAIT_S)
        if pop is not None:
            pop_drained = pop.wait_acked(writer_acked(history) & history.read_values(DRAIN_GROUP),
                                         CATCH_UP_WAIT_S, more_s=EVENT_WAIT_S,
                                         timeout_max_s=POP_CATCH_UP_MAX_S)
    finally:
        live.shutdown()
        if pop is not None:
            pop.finish()
        role_changes = roles.stop() if roles is not None else []
    promise = cluster.promise_for(list(history.sends), history.started)
    report.verdict = check(history.sends, history.reads, promise,
                           drained_groups=[DRAIN_GROUP, LIVE_GROUP])
    if pop is not None:
        report.leases = check_leases(history.sends, pop.deliveries, pop.acks, cluster.promise,
                                     disruptions=lease_disruptions(cluster, report),
                                     groups=[pop.group], in_log=history.read_values(DRAIN_GROUP))
        report.figures.update(pop_caught_up=pop_drained)
        if pop.error is not None and report.error is None:
            report.error = f"pop reader: {pop.error!r}"
    with history.lock:
        acked_at = [s.at_s for s in history.sends if s.outcome is Outcome.ACKED]
    report.timeline = make_timeline(report.spans, role_changes, acked_at)
    report.figures.update(
        load_s=round(time.monotonic() - history.started, 1), drained=read,
        longest_write_gap_s=history.longest_write_gap_s(), acked_by_writer=history.acked_by_writer(),
        settle_max_s=max(settle_s, default=0.0), writers_back_after_heal=recovered,
        live_group_caught_up=caught_up)
    report.figures.update(cluster.figures())
    if promise.log_tail_loss:
        report.figures["log_lost"] = len(report.verdict.log_lost)
    if errors:
        report.error = "writer died: " + "; ".join(errors)
    elif not recovered and report.error is None:
        report.error = f"no {AFTER_HEAL_ACKS} sends acknowledged within {EVENT_WAIT_S} s of the heal"


def _play(cluster: ChaosCluster, report: ClusterReport, history: History, out: Out) -> list[float]:
    """Apply each fault at its time (or at once when the last heal ran late), hold, heal, and
    wait for the cluster to settle; returns each settle time."""
    settles = []
    for fault in report.schedule:
        delay = fault.at_s - history.now_s()
        if delay > 0:
            time.sleep(delay)
        began = history.now_s()
        what = cluster.apply(fault)
        time.sleep(fault.hold_s)
        cluster.heal(fault)
        healed = history.now_s()
        settled_s: float | None = None
        try:
            cluster.settle()
            settled_s = history.now_s()
            settled = f"settled in {history.now_s() - healed:.2f} s"
            settles.append(round(history.now_s() - healed, 2))
        except (AssertionError, RuntimeError) as e:
            # Not settling is a finding, not the end of the run: the history so far is still
            # drained and judged, and the report names the step.
            settled = f"DID NOT SETTLE ({e})"
            if report.error is None:
                report.error = f"the cluster did not settle after the step at {began:.2f} s: {e}"
        line = (f"{began:7.2f} s  {fault.kind.value:8} {fault.target:12} -> {what}; healed at "
                f"{healed:.2f} s, {settled}")
        if cluster.step_note:
            line += f"; {cluster.step_note}"
        report.steps.append(line)
        report.spans.append(FaultSpan(began, healed, settled_s,
                                      f"{fault.kind.value} {fault.target} ({what})"))
        out(f"     ran {line}")
    return settles


def lease_disruptions(cluster: ChaosCluster, report: ClusterReport) -> list[Disruption]:
    """The steps that may have made the POP broker forget leases or acks (every one whose kind
    is not in ``cluster.pop_state_kept``), from when each began until the cluster settled."""
    return [Disruption(span.began_s, span.end_s, span.what)
            for fault, span in zip(report.schedule, report.spans, strict=False)
            if fault.kind not in cluster.pop_state_kept]


def compare_replicas_of(stores: dict[str, Path], master: str,
                        history: History) -> ReplicaComparison:
    """Every replica's commit log, read from its stopped store, against the final master's."""
    return compare_replicas({name: read_log(name, path) for name, path in stores.items()},
                            master, writer_acked(history))


def run(kinds: Sequence[str], seed: int, minutes: float, root: Path,
        out: Out = print, *, clients: Clients | None = None,
        faults: Sequence[str] | None = None) -> list[ClusterReport]:
    """Every cluster in ``kinds``, one after the other, sharing ``minutes`` of faults; with
    ``clients`` the official clients write beside the SDK; ``faults``: only these kinds."""
    clients = clients or Clients()
    duration_s = max(minutes * 60.0 / max(len(kinds), 1), 5.0)
    out(f"chaos seed {seed} (CHAOS_SEED={seed} replays the schedule), {minutes:g} min of faults "
        f"over {', '.join(kinds)}; writers: SDK" + (" + C++ client" if clients.cpp else "")
        + (" + 5.x gRPC client (where a cluster keeps its endpoint)" if clients.rmq5 else ""))
    reports = [run_cluster(kind, root, seed, duration_s, out, clients=clients, faults=faults)
               for kind in kinds]
    out("== results")
    for r in reports:
        out("   " + json.dumps(r.summary()))
    bad = [r.cluster for r in reports if not r.ok]
    out(f"== chaos seed {seed}: " + (f"FAILED: {', '.join(bad)}" if bad else "every promise held"))
    return reports
