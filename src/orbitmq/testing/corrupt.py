"""Damaging a store's commit log on disk, for the tests and the chaos run (docs/replication.md,
"Corruption"): a bit flipped in a message's body or header, or a segment truncated in the middle
of a message. Writes go through the file (``pwrite``, ``truncate``), so a broker that has the
segment mapped sees the flipped byte through the page cache, as it would a bad disk's.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from orbitmq.protocol import stored
from orbitmq.protocol.stored import BLANK_ENTRY_SIZE

__all__ = ["Damage", "damage_segment", "segment_messages", "last_segment"]


@dataclasses.dataclass(frozen=True)
class Damage:
    """What was damaged: the segment file, the message's commit log offset, where it stands in
    its queue, and how (``body``, ``header`` or ``truncate``)."""

    path: str
    offset: int
    topic: str
    queue_id: int
    queue_offset: int
    kind: str

    def text(self) -> str:
        return (f"{self.kind} of the message at {self.offset} ({self.topic}:{self.queue_id} "
                f"queue offset {self.queue_offset}) in {os.path.basename(self.path)}")


def last_segment(store_path: str | Path) -> Path | None:
    """The newest commit log segment of a store, None when it has none."""
    directory = Path(store_path) / "commitlog"
    names = sorted(n for n in os.listdir(directory) if len(n) == 20 and n.isdigit()) \
        if directory.is_dir() else []
    return directory / names[-1] if names else None


def segment_messages(path: str | Path) -> list[tuple[int, stored.StoredPeek]]:
    """(position, peek) of each whole message of a segment file, walked from its start to its
    first zero or blank entry or bytes that are not a message."""
    data = Path(path).read_bytes()
    out: list[tuple[int, stored.StoredPeek]] = []
    pos = 0
    while pos + BLANK_ENTRY_SIZE <= len(data):
        if stored.is_zero_entry(data, pos) or stored.is_blank_entry(data, pos):
            break
        if stored.problem(data, pos) is not None:
            break
        p = stored.peek(data, pos)
        out.append((pos, p))
        pos += p.total_size
    return out


def damage_segment(path: str | Path, kind: str, *, fraction: float = 0.5) -> Damage:
    """Damage the message about ``fraction`` of the way through a segment's messages:
    ``body`` flips one bit of its body, ``header`` one bit of its PHYSICALOFFSET field,
    ``truncate`` cuts the file in the middle of it (every later byte of the segment is gone).

    Raises:
        ValueError: an unknown kind, or a segment without a message with a body.
    """
    if kind not in ("body", "header", "truncate"):
        raise ValueError(f"unknown damage {kind!r}: body, header or truncate")
    messages = [(pos, p) for pos, p in segment_messages(path) if p.body_len > 0]
    if not messages:
        raise ValueError(f"no message with a body in {path}")
    pos, p = messages[min(int(len(messages) * fraction), len(messages) - 1)]
    base = int(os.path.basename(path))
    damage = Damage(str(path), base + pos, p.topic, p.queue_id, p.queue_offset, kind)
    if kind == "truncate":
        os.truncate(path, pos + p.total_size // 2)
        return damage
    # The header's: the low byte of PHYSICALOFFSET, a field every reader's check compares.
    at = p.body_at + p.body_len // 2 if kind == "body" else stored.physical_offset_span(pos)[1] - 1
    fd = os.open(path, os.O_RDWR)
    try:
        byte = os.pread(fd, 1, at)
        os.pwrite(fd, bytes([byte[0] ^ 0x10]), at)
    finally:
        os.close(fd)
    return damage
