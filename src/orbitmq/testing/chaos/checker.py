"""Jepsen's total-queue checker for a whole chaos history (docs/chaos.md).

A history is every send attempt, each with a value unique in the run (``writer-counter``) and
its outcome as the writer saw it, and every read, each with the consumer group, the queue, the
offset and the value. The checker knows nothing of brokers or sockets: the harness records, this
module judges, and its unit tests judge histories made by hand to fail.

What it counts, as Jepsen's ``total-queue`` (and its NATS and Kafka tests) do:

- **lost**: acknowledged, read by no group. Split per (writer, queue), in send order, into
  lost-prefix (before the first value of that writer read from that queue), lost-postfix (after
  the last) and lost-middle (between two values that were read: a slow reader cannot explain it).
- **missed**: acknowledged and read by some group, but not by a group the harness drained to
  its end: that group skipped it (an offset committed past a message never delivered).
- **unexpected**: read, never sent by anyone.
- **duplicated**: read more than once in one group: *redelivered* (the same queue and offset
  again, RocketMQ's at-least-once) or *stored twice* (one value at two positions of the logs).
- **recovered**: a send not acknowledged (failed, or no answer) that was read.
- **divergent**: two values read at one (queue, offset), by any groups at any time: a reader saw a
  log that was later rewritten.
- **out of order**: for an orderly topic, two acknowledged sends of one key whose positions in the
  log are not in send order (or not in one queue).

The verdict names the promise it checked (:class:`Promise`): SYNC_FLUSH and SYNC_MASTER lose no
acknowledged message; an ASYNC mode loses at most what its settings allow, a bound the harness
computes from them and passes in.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter, defaultdict
from collections.abc import Iterable

__all__ = ["Outcome", "Send", "Read", "Promise", "Verdict", "check", "value_of", "parse_value",
           "SYNC_FLUSH", "SYNC_MASTER", "EXAMPLES_MAX"]

# Values listed per anomaly in a verdict's text: the counts are always whole, the lists cut here
# so that a run that lost 40,000 messages still prints a readable report.
EXAMPLES_MAX = 20


class Outcome(enum.Enum):
    """What a writer learnt of one send."""

    ACKED = "acknowledged"  # SEND_OK: the promise covers it
    FAILED = "failed"  # a refusal that says nothing was stored
    UNKNOWN = "unknown"  # a timeout, a lost connection, a stored-but-not-replicated status


def value_of(writer: str, counter: int) -> str:
    """The unique value of a writer's ``counter``-th send (its body and key)."""
    return f"{writer}-{counter}"


def parse_value(value: str) -> tuple[str, int] | None:
    """(writer, counter) of a value made by :func:`value_of`, or None for anything else."""
    writer, sep, counter = value.rpartition("-")
    if not sep or not writer or not counter.isdigit():
        return None
    return writer, int(counter)


@dataclasses.dataclass(frozen=True)
class Send:
    """One send attempt. ``queue`` and ``offset`` are known for an acknowledged send (the answer
    names them); ``key`` is the ordering key on an orderly topic; ``at_s`` when the answer (or the
    failure) came, in seconds since the run began; ``detail`` what the answer or error said."""

    writer: str
    counter: int
    outcome: Outcome
    queue: str | None = None
    offset: int | None = None
    key: str | None = None
    at_s: float = 0.0
    detail: str = ""  # the status or error the writer got, for the report

    @property
    def value(self) -> str:
        return value_of(self.writer, self.counter)


@dataclasses.dataclass(frozen=True)
class Read:
    """One message delivered to a consumer group (``queue`` as ``broker:queueId``)."""

    group: str
    queue: str
    offset: int
    value: str


@dataclasses.dataclass(frozen=True)
class Promise:
    """What a mode promises, as the checker holds it to.

    Attributes:
        name: the mode, e.g. ``SYNC_MASTER``, printed in the verdict.
        lost_acknowledged_max: acknowledged messages the mode may lose (0: none).
        orderly: whether per-key send order must be the log's order.
        duplicates_allowed: at-least-once delivery (RocketMQ's): duplicates are counted, not
            violations.
        log_tail_loss: an ASYNC_FLUSH store under power cuts: a cut takes the log's unflushed
            tail, messages consumers had already read included, and the offsets are then
            written again. Held to ``lost_acknowledged_max`` is then ``log_lost`` (acknowledged,
            absent from the log the first drained group read to its end); an offset with two
            values of which one is gone from that log, and a read-then-gone message missed by
            the drain, are counted, not violations.
    """

    name: str
    lost_acknowledged_max: int = 0
    orderly: bool = False
    duplicates_allowed: bool = True
    log_tail_loss: bool = False


SYNC_FLUSH = Promise("SYNC_FLUSH")
SYNC_MASTER = Promise("SYNC_MASTER")


@dataclasses.dataclass
class Verdict:
    """The checker's answer: counts, the values behind each, and the violations of the promise."""

    promise: Promise
    attempted: int = 0
    acknowledged: int = 0
    failed: int = 0
    unknown: int = 0
    reads: int = 0
    lost: list[str] = dataclasses.field(default_factory=list)
    lost_prefix: list[str] = dataclasses.field(default_factory=list)
    lost_middle: list[str] = dataclasses.field(default_factory=list)
    lost_postfix: list[str] = dataclasses.field(default_factory=list)
    missed: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    unexpected: list[str] = dataclasses.field(default_factory=list)
    redelivered: dict[str, int] = dataclasses.field(default_factory=dict)
    stored_twice: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    recovered: list[str] = dataclasses.field(default_factory=list)
    failed_read: list[str] = dataclasses.field(default_factory=list)
    failed_read_details: Counter[str] = dataclasses.field(default_factory=Counter)
    divergent: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    out_of_order: list[str] = dataclasses.field(default_factory=list)
    violations: list[str] = dataclasses.field(default_factory=list)
    # Promise.log_tail_loss: acknowledged and absent from the drained log; the divergent
    # offsets none of whose values is gone from it (those stay violations).
    log_lost: list[str] = dataclasses.field(default_factory=list)
    divergent_in_log: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def duplicated(self) -> int:
        """Extra deliveries over all groups (redelivered plus stored twice)."""
        return sum(self.redelivered.values()) + sum(len(v) - 1 for v in self.stored_twice.values())

    def counts(self) -> dict[str, int]:
        """The figures of a results table, one number per anomaly."""
        return {
            "attempted": self.attempted, "acknowledged": self.acknowledged,
            "failed": self.failed, "unknown": self.unknown, "reads": self.reads,
            "lost": len(self.lost), "lost_prefix": len(self.lost_prefix),
            "lost_middle": len(self.lost_middle), "lost_postfix": len(self.lost_postfix),
            "missed": sum(len(v) for v in self.missed.values()),
            "unexpected": len(self.unexpected), "duplicated": self.duplicated,
            "redelivered": sum(self.redelivered.values()),
            "stored_twice": len(self.stored_twice), "recovered": len(self.recovered),
            "failed_read": len(self.failed_read),
            "divergent": len(self.divergent), "out_of_order": len(self.out_of_order),
        }

    def text(self) -> str:
        """The verdict as a report prints it: the promise, the counts, examples, violations."""
        lines = [f"promise {self.promise.name}: lost acknowledged <= "
                 f"{self.promise.lost_acknowledged_max}"
                 + (", per-key order" if self.promise.orderly else "")]
        lines.append("  " + " ".join(f"{k}={v}" for k, v in self.counts().items()))
        if self.promise.log_tail_loss:
            lines.append(f"  gone from the log (acknowledged, not in the drained log): "
                         f"{len(self.log_lost)} of at most {self.promise.lost_acknowledged_max}; "
                         f"divergent offsets with every value still in it: "
                         f"{len(self.divergent_in_log)}")
        for name, values in (("lost", self.lost), ("lost-middle", self.lost_middle),
                             ("unexpected", self.unexpected), ("out-of-order", self.out_of_order),
                             ("recovered", self.recovered), ("failed-but-read", self.failed_read)):
            if values:
                lines.append(f"  {name}: {_examples(values)}")
        if self.failed_read_details:
            lines.append(f"  failed-but-read answers: {dict(self.failed_read_details)}")
        for group, values in sorted(self.missed.items()):
            lines.append(f"  missed by {group}: {_examples(values)}")
        for where, values in sorted(self.divergent.items())[:EXAMPLES_MAX]:
            lines.append(f"  divergent at {where}: {values}")
        lines.append("  verdict: " + ("OK" if self.ok else "VIOLATED: " + "; ".join(self.violations)))
        return "\n".join(lines)


def _examples(values: list[str]) -> str:
    more = len(values) - EXAMPLES_MAX
    return " ".join(values[:EXAMPLES_MAX]) + (f" (+{more} more)" if more > 0 else "")


def check(sends: Iterable[Send], reads: Iterable[Read], promise: Promise, *,
          drained_groups: Iterable[str] = ()) -> Verdict:
    """Judge a history against ``promise``.

    Args:
        sends: every send attempt (each value once; a value sent twice is a harness bug).
        reads: every delivery, in the order each group saw them.
        promise: what the mode promises.
        drained_groups: the groups the harness read to the end of every queue: a message
            acknowledged and read elsewhere that such a group never read was skipped by it.

    Returns:
        The verdict; ``verdict.ok`` is False when the history breaks the promise.
    """
    sends = list(sends)
    reads = list(reads)
    by_value: dict[str, Send] = {}
    for send in sends:
        assert send.value not in by_value, f"value {send.value} sent twice by the harness"
        by_value[send.value] = send
    verdict = Verdict(promise, attempted=len(sends), reads=len(reads))
    outcomes = Counter(s.outcome for s in sends)
    verdict.acknowledged = outcomes[Outcome.ACKED]
    verdict.failed = outcomes[Outcome.FAILED]
    verdict.unknown = outcomes[Outcome.UNKNOWN]

    read_by_group: dict[str, set[str]] = defaultdict(set)
    positions: dict[str, set[tuple[str, int]]] = defaultdict(set)  # value -> (queue, offset)
    at_position: dict[tuple[str, int], set[str]] = defaultdict(set)
    seen_in_group: Counter[tuple[str, str, str, int]] = Counter()
    for r in reads:
        read_by_group[r.group].add(r.value)
        positions[r.value].add((r.queue, r.offset))
        at_position[(r.queue, r.offset)].add(r.value)
        seen_in_group[(r.group, r.value, r.queue, r.offset)] += 1
    read_any = set(positions)

    verdict.unexpected = sorted(v for v in read_any if v not in by_value)
    acked = [s for s in sends if s.outcome is Outcome.ACKED]
    verdict.lost = sorted((s.value for s in acked if s.value not in read_any), key=_order)
    _split_lost(verdict, sends, reads, by_value)
    for group in drained_groups:
        skipped = [s.value for s in acked if s.value in read_any
                   and s.value not in read_by_group.get(group, set())]
        if skipped:
            verdict.missed[group] = sorted(skipped, key=_order)
    unacked_read = [s for s in sends if s.outcome is not Outcome.ACKED and s.value in read_any]
    verdict.recovered = sorted((s.value for s in unacked_read), key=_order)
    failed_read = [s for s in unacked_read if s.outcome is Outcome.FAILED]
    verdict.failed_read = sorted((s.value for s in failed_read), key=_order)
    verdict.failed_read_details = Counter(s.detail for s in failed_read)
    for (group, _value, queue, offset), n in sorted(seen_in_group.items()):
        if n > 1:
            verdict.redelivered[f"{group}@{queue}:{offset}"] = n - 1
    for value, places in sorted(positions.items()):
        if len(places) > 1:
            verdict.stored_twice[value] = sorted(f"{q}:{o}" for q, o in places)
    for (queue, offset), values in sorted(at_position.items()):
        if len(values) > 1:
            verdict.divergent[f"{queue}:{offset}"] = sorted(values)
    if promise.orderly:
        verdict.out_of_order = _order_violations(acked, positions)
    drained = list(drained_groups)
    if promise.log_tail_loss and drained:
        in_log = read_by_group.get(drained[0], set())
        verdict.log_lost = sorted((s.value for s in acked if s.value not in in_log), key=_order)
        verdict.divergent_in_log = {where: values for where, values in verdict.divergent.items()
                                    if all(v in in_log for v in values)}
    verdict.violations = _violations(verdict)
    return verdict


def _order(value: str) -> tuple[str, int]:
    parsed = parse_value(value)
    return parsed if parsed is not None else (value, -1)


def _split_lost(verdict: Verdict, sends: list[Send], reads: list[Read],
                by_value: dict[str, Send]) -> None:
    """lost-prefix / middle / postfix, per (writer, queue) in send order. The queue of a lost
    message is the one its acknowledgement named; the values read from that queue by the same
    writer (whatever their outcome) are the marks around it."""
    read_counters: dict[tuple[str, str], list[int]] = defaultdict(list)
    for r in reads:
        send = by_value.get(r.value)
        if send is not None:
            read_counters[(send.writer, r.queue)].append(send.counter)
    bounds = {k: (min(v), max(v)) for k, v in read_counters.items()}
    for value in verdict.lost:
        send = by_value[value]
        low_high = bounds.get((send.writer, send.queue or ""))
        if low_high is None or send.counter > low_high[1]:
            verdict.lost_postfix.append(value)  # nothing read after it: maybe an unread tail
        elif send.counter < low_high[0]:
            verdict.lost_prefix.append(value)
        else:
            verdict.lost_middle.append(value)


def _order_violations(acked: list[Send], positions: dict[str, set[tuple[str, int]]]) -> list[str]:
    """Pairs of acknowledged sends of one key (sent one after the other by one writer) whose
    first positions read are not in one queue at rising offsets."""
    by_key: dict[str, list[Send]] = defaultdict(list)
    for s in acked:
        if s.key is not None and s.value in positions:
            by_key[s.key].append(s)
    found = []
    for key, key_sends in sorted(by_key.items()):
        key_sends.sort(key=lambda s: (s.writer, s.counter))
        for a, b in zip(key_sends, key_sends[1:], strict=False):
            pa, pb = min(positions[a.value]), min(positions[b.value])
            if a.writer == b.writer and (pa[0] != pb[0] or pa[1] >= pb[1]):
                found.append(f"{key}: {a.value}@{pa[0]}:{pa[1]} then {b.value}@{pb[0]}:{pb[1]}")
    return found


def _violations(v: Verdict) -> list[str]:
    """What breaks the promise. Duplicates and recovered sends do not (at-least-once delivery;
    an unanswered send may have been stored), unless the promise says so."""
    out = []
    if v.promise.log_tail_loss:
        return _log_tail_violations(v)
    if len(v.lost) > v.promise.lost_acknowledged_max:
        out.append(f"{len(v.lost)} acknowledged lost (at most {v.promise.lost_acknowledged_max}"
                   f" allowed; {len(v.lost_middle)} lost-middle)")
    if v.missed:
        out.append(f"{sum(len(x) for x in v.missed.values())} acknowledged skipped by "
                   f"{', '.join(sorted(v.missed))}")
    if v.unexpected:
        out.append(f"{len(v.unexpected)} unexpected")
    if v.divergent:
        out.append(f"{len(v.divergent)} offsets with two values")
    if v.out_of_order:
        out.append(f"{len(v.out_of_order)} per-key order violations")
    if not v.promise.duplicates_allowed and v.duplicated:
        out.append(f"{v.duplicated} duplicates")
    return out


def _log_tail_violations(v: Verdict) -> list[str]:
    """Promise.log_tail_loss: what the log lost is held to the bound; what follows from a lost
    tail (reads of messages then gone, their offsets written again, a group's offset past the
    shorter log) is counted, not judged."""
    out = []
    if len(v.log_lost) > v.promise.lost_acknowledged_max:
        out.append(f"{len(v.log_lost)} acknowledged gone from the log (at most "
                   f"{v.promise.lost_acknowledged_max} allowed)")
    if v.unexpected:
        out.append(f"{len(v.unexpected)} unexpected")
    if v.divergent_in_log:
        out.append(f"{len(v.divergent_in_log)} offsets with two values still in the log")
    if v.out_of_order:
        out.append(f"{len(v.out_of_order)} per-key order violations")
    if not v.promise.duplicates_allowed and v.duplicated:
        out.append(f"{v.duplicated} duplicates")
    return out
