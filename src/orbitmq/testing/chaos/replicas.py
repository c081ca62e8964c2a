"""Per-replica divergence of the final logs of a chaos run (docs/chaos.md): every replica's
commit log read from its store files once the cluster is stopped, and compared with the final
master's.

Replication copies the master's log byte for byte: a replica's message at a physical offset is
the master's message at that offset, and so is the message at each (topic, queue, queue offset).
So, after the heal, the drain and the stop:

- **divergent**: a (topic, queue, offset) present on a replica and on the master whose message
  differs (its id, body, or where it lies), or a message of a replica at a physical offset where
  the master has another one or none (the replica's log is not a prefix of the master's: it
  kept a tail that the master does not have, which a demoted master's cut should have removed).
- **behind**: messages of the master past the end of a replica's log. A replica may be behind
  only by what was never acknowledged; ``behind_acknowledged`` counts those of them whose
  value a writer saw acknowledged (under SYNC_MASTER a member of the in-sync set acknowledged
  each, so the report shows them, with the replica).

The files are read with the store's own stored-message codec (protocol.stored: every check a
recovery makes, body CRC included), no sockets and no broker: a log whose scan stops on a bad
message ends there, and the report says where and why.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol import stored

__all__ = ["LogEntry", "ReplicaLog", "ReplicaComparison", "read_log", "compare_replicas",
           "DIFFERENCES_MAX"]

DIFFERENCES_MAX = 10  # differences listed per replica (the counts are whole)
SEGMENT_NAME_DIGITS = 20


@dataclasses.dataclass(frozen=True)
class LogEntry:
    """What identifies one stored message: where it lies and what it holds."""

    physical_offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    body_crc: int
    body: str  # the body as text (a chaos value), for the report and the acknowledged check

    @property
    def position(self) -> str:
        return f"{self.topic}:{self.queue_id}:{self.queue_offset}"

    def same_message(self, other: LogEntry) -> bool:
        return (self.msg_id, self.body_crc, self.body, self.size) == (
            other.msg_id, other.body_crc, other.body, other.size)


@dataclasses.dataclass
class ReplicaLog:
    """One replica's commit log as read from its files."""

    name: str
    entries: dict[int, LogEntry] = dataclasses.field(default_factory=dict)  # by physical offset
    end_offset: int = 0  # where its valid data ends
    stop_reason: str = "end of data"

    def by_position(self) -> dict[tuple[str, int, int], LogEntry]:
        return {(e.topic, e.queue_id, e.queue_offset): e for e in self.entries.values()}


def read_log(name: str, store: Path) -> ReplicaLog:
    """The commit log under ``store`` (``store/commitlog/<20-digit offset>`` segments), scanned
    from its first segment as recovery scans it; a store without one is an empty log."""
    out = ReplicaLog(name)
    directory = store / "commitlog"
    if not directory.is_dir():
        out.stop_reason = "no commit log"
        return out
    names = sorted(n for n in os.listdir(directory)
                   if len(n) == SEGMENT_NAME_DIGITS and n.isdigit())
    expected: int | None = None
    for segment in names:
        base = int(segment)
        if expected is not None and base != expected:
            out.stop_reason = f"segment {segment} does not follow the one before"
            return out
        data = (directory / segment).read_bytes()
        size = len(data)
        view = memoryview(data)
        pos = 0
        out.end_offset = base
        while True:
            if pos + stored.BLANK_ENTRY_SIZE > size:
                out.stop_reason = "segment ends inside an entry header"
                return out
            if stored.is_blank_entry(view, pos):
                break  # the segment's end marker: the log goes on in the next one
            if stored.is_zero_entry(view, pos):
                out.end_offset = base + pos
                return out  # where written data ends
            problem = stored.verify(view, pos, end=size - stored.BLANK_ENTRY_SIZE,
                                    physical_offset=base + pos)
            if problem is not None:
                out.end_offset = base + pos
                out.stop_reason = f"{problem} at {base + pos}"
                return out
            try:
                p = stored.peek(view, pos)
                body = stored.body_of(view, p, check_crc=False)
            except RemoteProtocolError as e:  # verify passed: only a codec disagreement
                out.stop_reason = f"{e} at {base + pos}"
                return out
            out.entries[base + pos] = LogEntry(
                base + pos, p.total_size, p.topic, p.queue_id, p.queue_offset, p.msg_id,
                p.body_crc, body.decode("utf-8", "replace"))
            pos += p.total_size
            out.end_offset = base + pos
        out.end_offset = base + size
        expected = base + size
    return out


@dataclasses.dataclass
class ReplicaComparison:
    """The replicas of one set against its final master."""

    master: str
    replicas: dict[str, int] = dataclasses.field(default_factory=dict)  # name -> messages
    stop_reasons: dict[str, str] = dataclasses.field(default_factory=dict)
    divergent: dict[str, int] = dataclasses.field(default_factory=dict)  # per replica
    behind: dict[str, int] = dataclasses.field(default_factory=dict)
    behind_acknowledged: dict[str, int] = dataclasses.field(default_factory=dict)
    differences: list[str] = dataclasses.field(default_factory=list)  # the first few

    @property
    def replica_divergent(self) -> int:
        return sum(self.divergent.values())

    def counts(self) -> dict[str, int]:
        return {"replica_divergent": self.replica_divergent,
                "replica_behind": sum(self.behind.values()),
                "replica_behind_acknowledged": sum(self.behind_acknowledged.values())}

    def to_json(self) -> dict[str, object]:
        return {"master": self.master, "messages": self.replicas,
                "stop_reasons": self.stop_reasons, "divergent": self.divergent,
                "behind": self.behind, "behind_acknowledged": self.behind_acknowledged,
                "differences": self.differences, **self.counts()}

    def text(self) -> str:
        lines = [f"replicas against master {self.master}: "
                 + " ".join(f"{k}={v}" for k, v in self.counts().items())]
        for name in sorted(self.replicas):
            lines.append(f"  {name}: {self.replicas[name]} messages, ends: "
                         f"{self.stop_reasons.get(name, '')}; divergent "
                         f"{self.divergent.get(name, 0)}, behind {self.behind.get(name, 0)} "
                         f"({self.behind_acknowledged.get(name, 0)} acknowledged)")
        lines.extend(f"  {d}" for d in self.differences)
        return "\n".join(lines)


def compare_replicas(logs: Mapping[str, ReplicaLog], master: str,
                     acknowledged: Iterable[str] = ()) -> ReplicaComparison:
    """Each replica of ``logs`` against ``logs[master]`` (module docstring); ``acknowledged``:
    the values writers saw acknowledged."""
    acked = set(acknowledged)
    ref = logs[master]
    ref_positions = ref.by_position()
    out = ReplicaComparison(master)
    for name, log in sorted(logs.items()):
        out.replicas[name] = len(log.entries)
        out.stop_reasons[name] = log.stop_reason
        if name == master:
            continue
        bad: dict[tuple[str, int, int], str] = {}
        for key, entry in log.by_position().items():
            other = ref_positions.get(key)
            if other is not None and (not other.same_message(entry)
                                      or other.physical_offset != entry.physical_offset):
                bad.setdefault(key, f"{name} has {entry.body!r} ({entry.msg_id}) at "
                                    f"{entry.position} @{entry.physical_offset}, {master} has "
                                    f"{other.body!r} ({other.msg_id}) @{other.physical_offset}")
        for phy, entry in sorted(log.entries.items()):
            other = ref.entries.get(phy)
            key = (entry.topic, entry.queue_id, entry.queue_offset)
            if other is None:
                bad.setdefault(key, f"{name} has {entry.body!r} at {entry.position} "
                                    f"@{phy}, where {master} has no message (not a prefix)")
            elif not other.same_message(entry):
                bad.setdefault(key, f"{name} has {entry.body!r} at @{phy}, {master} has "
                                    f"{other.body!r} there")
        out.divergent[name] = len(bad)
        room = DIFFERENCES_MAX - len(out.differences)
        out.differences.extend(sorted(bad.values())[:max(room, 0)])
        tail = [e for phy, e in ref.entries.items() if phy >= log.end_offset]
        out.behind[name] = len(tail)
        out.behind_acknowledged[name] = sum(1 for e in tail if e.body in acked)
    return out
