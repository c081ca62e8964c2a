"""The failover timeline of a chaos run (docs/chaos.md): each fault as it ran (applied, healed,
settled), each change of roles the cluster made (who is master in which epoch, the in-sync set),
and the write gaps (times without a SEND_OK), each gap over ``GAP_REPORTED_S`` with the faults
that were in force during it.

Roles come from a :class:`RoleWatcher` polling what the cluster says of itself (controller mode:
etcd's state and master records, as the failover tests read them) and keeping only the changes;
a set without elections has none to show, and its timeline is the faults and the gaps.

Pure but for the watcher's thread: the report is made from times and strings, and the unit tests
build it from made-up ones.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable

__all__ = ["FaultSpan", "RoleChange", "WriteGap", "Timeline", "RoleWatcher", "write_gaps",
           "make_timeline", "GAP_REPORTED_S", "ROLE_POLL_S"]

GAP_REPORTED_S = 1.0  # write gaps longer than this are listed, with their faults
ROLE_POLL_S = 0.25  # how often the watcher asks the cluster for its roles
ROLE_CHANGES_MAX = 10_000  # a bound on the watcher's record


@dataclasses.dataclass(frozen=True)
class FaultSpan:
    """One step of the schedule as it ran: ``what`` (its kind, target and what they resolved
    to), applied at ``began_s``, healed at ``healed_s``, the cluster settled at ``settled_s``
    (None: it did not)."""

    began_s: float
    healed_s: float
    settled_s: float | None
    what: str

    @property
    def end_s(self) -> float:
        return self.settled_s if self.settled_s is not None else self.healed_s


@dataclasses.dataclass(frozen=True)
class RoleChange:
    """The roles as first seen at ``at_s``: ``epoch``, the master (None: none named), and
    ``detail`` (the in-sync set, or why the roles could not be read)."""

    at_s: float
    epoch: int | None
    master: str | None
    detail: str = ""

    def text(self) -> str:
        if self.epoch is None and self.master is None:
            return f"roles unknown ({self.detail})" if self.detail else "no master"
        return f"epoch {self.epoch}: master {self.master}" + (f" ({self.detail})" if self.detail else "")


@dataclasses.dataclass(frozen=True)
class WriteGap:
    """A time without any SEND_OK, from the last one before it to the first one after it."""

    start_s: float
    end_s: float
    faults: tuple[str, ...] = ()

    @property
    def length_s(self) -> float:
        return round(self.end_s - self.start_s, 3)


def write_gaps(acked_at_s: Iterable[float], spans: Iterable[FaultSpan],
               reported_s: float = GAP_REPORTED_S) -> tuple[WriteGap | None, list[WriteGap]]:
    """(the longest gap between two SEND_OKs, every gap longer than ``reported_s``), each
    with the faults in force during it (applied before it ended and settled after it began)."""
    times = sorted(acked_at_s)
    spans = list(spans)

    def gap(a: float, b: float) -> WriteGap:
        return WriteGap(a, b, tuple(s.what for s in spans if s.began_s <= b and s.end_s >= a))

    longest: WriteGap | None = None
    reported = []
    for a, b in zip(times, times[1:], strict=False):
        if longest is None or b - a > longest.length_s:
            longest = gap(a, b)
        if b - a > reported_s:
            reported.append(gap(a, b))
    return longest, reported


@dataclasses.dataclass
class Timeline:
    """Everything of a run's timeline, in time order when printed."""

    spans: list[FaultSpan] = dataclasses.field(default_factory=list)
    roles: list[RoleChange] = dataclasses.field(default_factory=list)
    longest_gap: WriteGap | None = None
    gaps: list[WriteGap] = dataclasses.field(default_factory=list)

    @property
    def elections(self) -> int:
        """Changes of epoch seen (the first epoch seen is not one)."""
        epochs = [r.epoch for r in self.roles if r.epoch is not None]
        return sum(1 for a, b in zip(epochs, epochs[1:], strict=False) if b != a)

    def events(self) -> list[tuple[float, str]]:
        out: list[tuple[float, str]] = []
        for s in self.spans:
            out.append((s.began_s, f"fault  {s.what}"))
            out.append((s.healed_s, f"healed {s.what}"))
            if s.settled_s is not None:
                out.append((s.settled_s, f"settled after {s.what}"))
        out.extend((r.at_s, f"roles  {r.text()}") for r in self.roles)
        out.extend((g.start_s, f"gap    {g.length_s:.2f} s without SEND_OK until {g.end_s:.2f} s"
                    + (f" (during: {'; '.join(g.faults)})" if g.faults else " (no fault)"))
                   for g in self.gaps)
        return sorted(out, key=lambda e: e[0])

    def text(self) -> str:
        lines = [f"timeline (s since the load began; {self.elections} elections):"]
        lines.extend(f"  {at:8.2f}  {what}" for at, what in self.events())
        if self.longest_gap is not None:
            g = self.longest_gap
            lines.append(f"  longest write gap {g.length_s:.2f} s from {g.start_s:.2f} s"
                         + (f" (during: {'; '.join(g.faults)})" if g.faults else ""))
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        def gap(g: WriteGap) -> dict[str, object]:
            return {"start_s": g.start_s, "end_s": g.end_s, "length_s": g.length_s,
                    "faults": list(g.faults)}
        return {
            "faults": [dataclasses.asdict(s) for s in self.spans],
            "roles": [dataclasses.asdict(r) for r in self.roles],
            "elections": self.elections,
            "longest_write_gap": gap(self.longest_gap) if self.longest_gap else None,
            "write_gaps": [gap(g) for g in self.gaps],
        }


def make_timeline(spans: Iterable[FaultSpan], roles: Iterable[RoleChange],
                  acked_at_s: Iterable[float]) -> Timeline:
    spans = list(spans)
    longest, gaps = write_gaps(acked_at_s, spans)
    return Timeline(spans, list(roles), longest, gaps)


Probe = Callable[[], tuple[int | None, str | None, str]]


class RoleWatcher(threading.Thread):
    """Polls ``probe`` (epoch, master, detail) every ``ROLE_POLL_S`` until :meth:`stop`,
    keeping each change with the time ``now_s()`` saw it first. A probe that raises records
    the roles as unknown (etcd paused or cut: the timeline shows for how long)."""

    def __init__(self, probe: Probe, now_s: Callable[[], float]) -> None:
        super().__init__(name="chaos-roles", daemon=True)
        self.probe, self.now_s = probe, now_s
        self.changes: list[RoleChange] = []
        self._halt = threading.Event()

    def run(self) -> None:
        last: tuple[int | None, str | None, str] | None = None
        while not self._halt.is_set() and len(self.changes) < ROLE_CHANGES_MAX:
            try:
                seen = self.probe()
            except Exception as e:  # noqa: BLE001 - an unreadable state is a state to show
                seen = (None, None, f"{type(e).__name__}")
            if seen != last:
                self.changes.append(RoleChange(self.now_s(), *seen))
                last = seen
            self._halt.wait(ROLE_POLL_S)

    def stop(self) -> list[RoleChange]:
        self._halt.set()
        self.join(ROLE_POLL_S + 15.0)
        return list(self.changes)
