"""The lease checker of a chaos run: what POP consumers (the 5.x SimpleConsumer) were handed,
for how long, and what their acks answered (docs/chaos.md).

POP consumption is RocketMQ's lease model: a receive hands a message to a group and makes it
invisible to the group for the invisible time asked (the lease); an ack by the receipt handle
ends it for good; a lease that runs out without an ack makes the message visible again, and the
next receive hands it out once more (its delivery attempt counted). That is at-least-once: a
message delivered again after its lease ran out, or whose ack failed, is the model working.

What the history holds, per delivery: the value, the receipt handle, when the receive was sent
and when its answer came, the invisible time asked (the lease ends, at the earliest, that long
after the receive was sent: the broker starts it when it hands the message out, after the
request left), the delivery attempt; per ack: the handle, when it was sent, when it was
answered, and its outcome (OK, REFUSED with the broker's answer, or UNKNOWN: no answer).

What this checker counts, per group and value:

- **acked twice**: two acks answered OK. An ack ends the message for the group, so the second
  handle should have been refused (INVALID_RECEIPT_HANDLE) or never handed out.
- **redelivered after ack**: a delivery whose receive was sent after an ack of the value had
  been answered OK. Deliveries whose receive was sent while the ack was in flight do not count:
  the broker may have handed the message out before the ack reached it.
- **overlapping leases**: a delivery answered while an earlier delivery's lease certainly had
  not run out (before the earliest end of that lease, less ``LEASE_MARGIN_S``) and no ack of
  the earlier one had been sent: two consumers of one group held the message at once.
- **lost**: acknowledged by its writer (SEND_OK), never acked OK by the group once the readers
  ran to the end; split into never delivered and delivered but never acked OK. A value whose
  only acks had no answer is counted apart (``ack_unknown``): the broker may have applied them.
- **unexpected**: delivered, never sent.
- **redelivered** (expected, not an anomaly): deliveries after the first that none of the above
  explains: a lease ran out, an ack failed.

Which of these break the promise. Lost breaks it beyond ``Promise.lost_acknowledged_max``, as in
the total-queue checker; unexpected always. The other three break it unless a disruption that
may make the broker forget that state lies between the two events: the POP state (who holds
which message until when, what was acked) lives on the broker that handed the message out, so
a failover to another broker forgets all of it (RocketMQ's too: at-least-once, the new master
hands out again what the old one had leased or acked), and a power cut forgets what was not
synced. The harness says which faults of its cluster may forget leases and which may forget
acks (:class:`Disruption`): OrbitMQ writes a hand-out to its POP log before the receive is
answered and, under SYNC_FLUSH, syncs an ack before answering it, so a kill -9 or a pause of
the broker forgets neither, and a redelivery after an ack, two OK acks or overlapping leases
across one are violations.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter, defaultdict
from collections.abc import Iterable

from orbitmq.testing.chaos.checker import Outcome, Promise, Send, _examples, _order

__all__ = ["AckOutcome", "Delivery", "AckAttempt", "Disruption", "LeaseVerdict", "check_leases",
           "LEASE_MARGIN_S"]

# The broker keeps its deadlines in milliseconds of its own clock, the harness times in
# milliseconds of its own: a delivery this close to a lease's end is not called an overlap.
LEASE_MARGIN_S = 0.01


class AckOutcome(enum.Enum):
    """What the consumer learnt of one ack."""

    OK = "ok"
    REFUSED = "refused"  # the broker answered no (an invalid handle: the lease ran out)
    UNKNOWN = "unknown"  # no answer (a timeout, a lost connection): it may have been applied


@dataclasses.dataclass(frozen=True)
class Delivery:
    """One message handed to a group by a receive. Times are seconds since the run began.

    Attributes:
        asked_s: when the receive was sent (the broker started the lease after it).
        at_s: when its answer came (the broker started the lease before it).
        invisible_s: the invisible time the receive asked for.
    """

    group: str
    value: str
    handle: str
    asked_s: float
    at_s: float
    invisible_s: float
    attempt: int = 1
    consumer: str = ""
    position: str = ""  # where the message lies (queue.offset), when the handle tells

    @property
    def lease_end_s(self) -> float:
        """The earliest the lease can end: its start is after the receive was sent."""
        return self.asked_s + self.invisible_s


@dataclasses.dataclass(frozen=True)
class AckAttempt:
    """One ack by receipt handle, sent at ``asked_s``, answered (or given up) at ``at_s``."""

    group: str
    value: str
    handle: str
    asked_s: float
    at_s: float
    outcome: AckOutcome
    detail: str = ""
    position: str = ""


@dataclasses.dataclass(frozen=True)
class Disruption:
    """A fault from ``start_s`` to ``end_s`` (its heal and settling included) that may make the
    POP broker forget the leases it handed out (``leases``) or the acks it answered
    (``acks``): a failover to another broker forgets both, a power cut what was not synced."""

    start_s: float
    end_s: float
    what: str
    leases: bool = True
    acks: bool = True

    def between(self, first_s: float, last_s: float) -> bool:
        return self.start_s <= last_s and self.end_s >= first_s


@dataclasses.dataclass
class LeaseVerdict:
    """The lease checker's answer: counts, examples per anomaly, and the violations."""

    promise: Promise
    deliveries: int = 0
    acks_ok: int = 0
    acks_refused: int = 0
    acks_unknown: int = 0
    acked_twice: list[str] = dataclasses.field(default_factory=list)
    redelivered_after_ack: list[str] = dataclasses.field(default_factory=list)
    overlapping_leases: list[str] = dataclasses.field(default_factory=list)
    excused: list[str] = dataclasses.field(default_factory=list)
    lost: list[str] = dataclasses.field(default_factory=list)
    lost_never_delivered: list[str] = dataclasses.field(default_factory=list)
    lost_unacked: list[str] = dataclasses.field(default_factory=list)
    ack_unknown: list[str] = dataclasses.field(default_factory=list)
    unexpected: list[str] = dataclasses.field(default_factory=list)
    redelivered: int = 0
    ack_answers: Counter[str] = dataclasses.field(default_factory=Counter)  # refused / unknown
    violations: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def counts(self) -> dict[str, int]:
        """One number per anomaly (the report's JSON and results table)."""
        return {
            "deliveries": self.deliveries, "acks_ok": self.acks_ok,
            "acks_refused": self.acks_refused, "acks_unknown": self.acks_unknown,
            "redelivered": self.redelivered, "acked_twice": len(self.acked_twice),
            "redelivered_after_ack": len(self.redelivered_after_ack),
            "overlapping_leases": len(self.overlapping_leases), "excused": len(self.excused),
            "lost": len(self.lost), "lost_never_delivered": len(self.lost_never_delivered),
            "lost_unacked": len(self.lost_unacked), "ack_unknown": len(self.ack_unknown),
            "unexpected": len(self.unexpected),
        }

    def text(self) -> str:
        """The verdict as the report prints it, the rule it judged by first."""
        lines = [f"lease promise {self.promise.name} (POP, at-least-once): lost acknowledged <= "
                 f"{self.promise.lost_acknowledged_max}; no OK ack twice, no delivery after an "
                 "OK ack, no two unexpired leases at once, unless a fault that may forget that "
                 "state came between"]
        lines.append("  " + " ".join(f"{k}={v}" for k, v in self.counts().items()))
        for name, values in (("acked twice", self.acked_twice),
                             ("redelivered after ack", self.redelivered_after_ack),
                             ("overlapping leases", self.overlapping_leases),
                             ("excused by a fault", self.excused),
                             ("lost, never delivered", self.lost_never_delivered),
                             ("lost, delivered, never acked", self.lost_unacked),
                             ("acks with no answer only", self.ack_unknown),
                             ("unexpected", self.unexpected)):
            if values:
                lines.append(f"  {name}: {_examples(values)}")
        if self.ack_answers:
            lines.append(f"  acks not OK, by answer: {dict(self.ack_answers.most_common(5))}")
        lines.append("  verdict: " + ("OK" if self.ok else "VIOLATED: " + "; ".join(self.violations)))
        return "\n".join(lines)


def check_leases(sends: Iterable[Send], deliveries: Iterable[Delivery],
                 acks: Iterable[AckAttempt], promise: Promise, *,
                 disruptions: Iterable[Disruption] = (), drained: bool = True,
                 groups: Iterable[str] = (), in_log: set[str] | None = None) -> LeaseVerdict:
    """Judge a POP history against ``promise`` (module docstring).

    Args:
        sends: every send attempt of the run (the values the groups may get).
        deliveries: every message a receive handed out, any order.
        acks: every ack sent, any order.
        promise: what the mode promises (its ``lost_acknowledged_max``).
        disruptions: the faults that may make the broker forget leases or acks.
        drained: whether the readers ran until they had everything (else lost is not judged).
        groups: the groups that read, each held to ack every acknowledged value (default: the
            groups of the history; a group that got nothing at all must be named here).
        in_log: the values a drain found in the final log, when known: only those can be
            lost to a POP group (one gone from the log, as a power cut under ASYNC_FLUSH takes
            the tail, is the total-queue checker's to judge against its promise).
    """
    sends = list(sends)
    deliveries = sorted(deliveries, key=lambda d: (d.at_s, d.asked_s))
    acks = sorted(acks, key=lambda a: (a.at_s, a.asked_s))
    disruptions = list(disruptions)
    verdict = LeaseVerdict(promise, deliveries=len(deliveries))
    verdict.acks_ok = sum(a.outcome is AckOutcome.OK for a in acks)
    verdict.acks_refused = sum(a.outcome is AckOutcome.REFUSED for a in acks)
    verdict.acks_unknown = sum(a.outcome is AckOutcome.UNKNOWN for a in acks)
    verdict.ack_answers = Counter(f"{a.outcome.value}: {a.detail[:80]}" for a in acks
                                  if a.outcome is not AckOutcome.OK)
    sent = {s.value for s in sends}
    verdict.unexpected = sorted({d.value for d in deliveries if d.value not in sent}, key=_order)

    # One message is a value at one position: a value stored twice (a client's retry) is two
    # messages, each leased and acked on its own.
    by_value: dict[tuple[str, str, str], list[Delivery]] = defaultdict(list)
    for d in deliveries:
        by_value[(d.group, d.value, d.position)].append(d)
    acks_of: dict[tuple[str, str, str], list[AckAttempt]] = defaultdict(list)
    for a in acks:
        acks_of[(a.group, a.value, a.position)].append(a)

    def excused(first_s: float, last_s: float, *, leases: bool, acks_: bool) -> str | None:
        for d in disruptions:
            if d.between(first_s, last_s) and ((leases and d.leases) or (acks_ and d.acks)):
                return d.what
        return None

    explained: set[Delivery] = set()
    for (group, value, position), its_acks in sorted(acks_of.items()):
        name = f"{group}/{value}" + (f"@{position}" if position else "")
        oks = [a for a in its_acks if a.outcome is AckOutcome.OK]
        for first, second in zip(oks, oks[1:], strict=False):
            where = f"{name} acked at {first.at_s:.3f} s and {second.at_s:.3f} s"
            why = excused(first.asked_s, second.at_s, leases=True, acks_=True)
            (verdict.excused if why else verdict.acked_twice).append(
                where + (f" ({why})" if why else ""))
        if oks:
            first = oks[0]
            for d in by_value.get((group, value, position), []):
                if d.asked_s > first.at_s:
                    explained.add(d)
                    where = (f"{name} acked at {first.at_s:.3f} s, delivered again at "
                             f"{d.at_s:.3f} s (attempt {d.attempt})")
                    why = excused(first.asked_s, d.at_s, leases=False, acks_=True)
                    (verdict.excused if why else verdict.redelivered_after_ack).append(
                        where + (f" ({why})" if why else ""))

    for (group, value, position), its in sorted(by_value.items()):
        name = f"{group}/{value}" + (f"@{position}" if position else "")
        # When each handle's lease was ended by the consumer: its first ack that was not refused.
        ended: dict[str, float] = {}
        for a in acks_of.get((group, value, position), []):
            if a.outcome is not AckOutcome.REFUSED:
                ended[a.handle] = min(ended.get(a.handle, a.asked_s), a.asked_s)
        for i, later in enumerate(its):
            if later in explained:
                continue
            for earlier in its[:i]:
                held = later.at_s < earlier.lease_end_s - LEASE_MARGIN_S
                if not held or ended.get(earlier.handle, later.at_s + 1.0) <= later.at_s:
                    continue
                explained.add(later)
                where = (f"{name} leased at {earlier.asked_s:.3f} s until "
                         f"{earlier.lease_end_s:.3f} s, delivered again at {later.at_s:.3f} s")
                why = excused(earlier.asked_s, later.at_s, leases=True, acks_=False)
                (verdict.excused if why else verdict.overlapping_leases).append(
                    where + (f" ({why})" if why else ""))
                break
    verdict.redelivered = sum(len(its) - 1 for its in by_value.values()) - len(
        [d for d in explained if by_value[(d.group, d.value, d.position)][0] is not d])

    if drained:
        outcomes: dict[tuple[str, str], set[AckOutcome]] = defaultdict(set)
        for a in acks:
            outcomes[(a.group, a.value)].add(a.outcome)
        delivered = {(d.group, d.value) for d in deliveries}
        readers = set(groups) or {d.group for d in deliveries} | {a.group for a in acks}
        for group in sorted(readers):
            for s in sends:
                if s.outcome is not Outcome.ACKED or (in_log is not None and
                                                       s.value not in in_log):
                    continue
                seen = outcomes.get((group, s.value), set())
                label = f"{group}/{s.value}"
                if AckOutcome.OK in seen:
                    continue
                if AckOutcome.UNKNOWN in seen:
                    verdict.ack_unknown.append(label)
                    continue
                verdict.lost.append(label)
                (verdict.lost_unacked if (group, s.value) in delivered
                 else verdict.lost_never_delivered).append(label)
    verdict.violations = _violations(verdict)
    return verdict


def _violations(v: LeaseVerdict) -> list[str]:
    out = []
    if len(v.lost) > v.promise.lost_acknowledged_max:
        out.append(f"{len(v.lost)} acknowledged never acked by the POP group (at most "
                   f"{v.promise.lost_acknowledged_max} allowed)")
    if v.acked_twice:
        out.append(f"{len(v.acked_twice)} acked twice")
    if v.redelivered_after_ack:
        out.append(f"{len(v.redelivered_after_ack)} delivered again after an OK ack")
    if v.overlapping_leases:
        out.append(f"{len(v.overlapping_leases)} delivered under another unexpired lease")
    if v.unexpected:
        out.append(f"{len(v.unexpected)} unexpected")
    return out

