"""Canonical source offsets and the arithmetic on them (pure code).

An offset is ``{"topic": {"broker-a:0": 42, ...}, ...}``: per message queue, the queue offset of
the next message to read (Kafka's shape, with ``brokerName:queueId`` for the partition). Spark
writes offsets verbatim into its checkpoint and compares them as JSON text, so every dict made here
has sorted keys, and a range [start, end) of a queue always names the same messages.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping

__all__ = [
    "Offsets",
    "EARLIEST",
    "LATEST",
    "EARLIEST_OFFSET",
    "LATEST_OFFSET",
    "QueueRange",
    "queue_key",
    "parse_queue_key",
    "canonical",
    "to_json",
    "from_json",
    "total_between",
    "rate_limit",
    "split_ranges",
]

Offsets = dict[str, dict[str, int]]
EARLIEST = "earliest"
LATEST = "latest"
EARLIEST_OFFSET = -2  # in JSON offsets given by a user, as Kafka's source
LATEST_OFFSET = -1


def queue_key(broker_name: str, queue_id: int) -> str:
    """``"broker-a:3"``: a queue's name inside a topic's offsets."""
    return f"{broker_name}:{queue_id}"


def parse_queue_key(key: str) -> tuple[str, int]:
    """(broker name, queue id) of ``"broker-a:3"``.

    Raises:
        ValueError: not ``brokerName:queueId`` with a queue id >= 0.
    """
    broker, sep, qid = str(key).rpartition(":")
    if not sep or not broker or not qid.isdigit():
        raise ValueError(f"queue {key!r} is not brokerName:queueId")
    return broker, int(qid)


def canonical(offsets: Mapping[str, Mapping[str, int]]) -> Offsets:
    """A copy with topics and queues in sorted order and plain int offsets."""
    return {topic: {key: int(offsets[topic][key]) for key in sorted(offsets[topic])}
            for topic in sorted(offsets)}


def to_json(offsets: Mapping[str, Mapping[str, int]]) -> str:
    return json.dumps(canonical(offsets), separators=(",", ":"))


def from_json(text: str) -> Offsets:
    return canonical(json.loads(text))


@dataclasses.dataclass(frozen=True, slots=True)
class QueueRange:
    """Offsets [start, end) of one queue: the unit of an input partition."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int

    @property
    def key(self) -> str:
        return queue_key(self.broker_name, self.queue_id)

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)

    @property
    def order(self) -> tuple[str, str, int, int]:
        """The stable order of ranges in a plan: topic, broker, queue id, start."""
        return self.topic, self.broker_name, self.queue_id, self.start

    def describe(self) -> str:
        return f"topic {self.topic!r} queue {self.key} offsets [{self.start}, {self.end})"


def total_between(start: Mapping[str, Mapping[str, int]],
                  end: Mapping[str, Mapping[str, int]]) -> int:
    """Offsets between ``start`` and ``end`` over every queue of ``end`` (a queue missing from
    ``start`` counts from its end: it was only just discovered)."""
    total = 0
    for topic, queues in end.items():
        for key, hi in queues.items():
            lo = start.get(topic, {}).get(key, hi)
            total += max(0, hi - lo)
    return total


def rate_limit(start: Mapping[str, Mapping[str, int]], latest: Mapping[str, Mapping[str, int]],
               max_offsets: int) -> Offsets:
    """An end between ``start`` and ``latest`` covering at most ``max_offsets`` offsets, shared
    among queues in proportion to their backlog (Kafka's rule) and deterministic: the remainder of
    the proportional split goes to the largest fractions, ties by topic and queue name.
    """
    backlog = {(t, k): max(0, hi - start.get(t, {}).get(k, hi))
               for t, queues in latest.items() for k, hi in queues.items()}
    total = sum(backlog.values())
    if total <= max_offsets:
        return canonical(latest)
    share: dict[tuple[str, str], int] = {}
    fractions = []
    for item, lag in backlog.items():
        exact = lag * max_offsets / total
        share[item] = int(exact)
        fractions.append((-(exact - int(exact)), item))
    left = max_offsets - sum(share.values())
    for _frac, item in sorted(fractions):
        if left <= 0:
            break
        if share[item] < backlog[item]:
            share[item] += 1
            left -= 1
    end: Offsets = {}
    for (topic, key), hi in ((i, latest[i[0]][i[1]]) for i in backlog):
        lo = start.get(topic, {}).get(key, hi)
        end.setdefault(topic, {})[key] = lo + share[(topic, key)]
    return canonical(end)


def split_ranges(ranges: Iterable[QueueRange], max_per_range: int) -> list[QueueRange]:
    """``ranges`` cut into pieces of at most ``max_per_range`` offsets, empty ones dropped,
    in a stable order (topic, broker, queue id, start)."""
    assert max_per_range > 0
    out = []
    for r in ranges:
        lo = r.start
        while lo < r.end:
            hi = min(r.end, lo + max_per_range)
            out.append(dataclasses.replace(r, start=lo, end=hi))
            lo = hi
    return sorted(out, key=lambda r: r.order)
