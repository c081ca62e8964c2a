"""Checking a run of stored entries a slave receives from its master before it stores them: every
message passes the checks of every reader (``scan``, C or Python), lies where its PHYSICALOFFSET
says and has the body its CRC says, and a segment's blank end entry closes exactly the segment.
Part of the stored codec (see the package docstring).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from orbitmq.protocol.stored._decode import ScanRecord
from orbitmq.protocol.stored._layout import (
    _CRC_MASK,
    _I32,
    _I64,
    BLANK_ENTRY_SIZE,
    BODYCRC_AT,
    PHYSICALOFFSET_AT,
    SCAN_BAD,
    SCAN_BLANK,
    SYSFLAG_AT,
    _header,
    _view,
    problem,
)
from orbitmq.protocol.stored._layout import (
    crc32 as _crc32,
)

__all__ = ["ReplicaRun", "check_replica_run", "BadEntry", "first_bad_entry"]

_NO_LIMIT = 1 << 62
ScanFn = Callable[[Any, int, int, int], tuple[list[ScanRecord], int, int, int]]


@dataclasses.dataclass(slots=True)
class ReplicaRun:
    """What a run of entries holds: the scan records of its messages (those that take a queue
    entry), the TOTALSIZE of the blank entry that ends it (None when it ends with a message),
    and ``problem``: why it must not be stored (None when it may)."""

    records: list[ScanRecord]
    blank_total: int | None = None
    problem: str | None = None


def check_replica_run(buf: Any, first_offset: int, segment_room: int,
                      scan: ScanFn) -> ReplicaRun:
    """Check ``buf`` (bytes of a frame) as entries stored at commit log ``first_offset``, with
    ``segment_room`` bytes from there to the end of its segment in the receiver's layout.

    A frame holds whole messages, optionally ended by a blank entry sent as its 8-byte header
    alone: the blank's TOTALSIZE must then be exactly the rest of the segment. Every message must
    leave room for a blank entry behind it in the segment (as an append does), carry its own
    position as PHYSICALOFFSET, and match its BODYCRC.
    """
    view = _view(buf)
    end = len(view)
    if end == 0:
        return ReplicaRun([], problem="an empty run")
    if end > segment_room:
        return ReplicaRun([], problem=f"{end} bytes do not fit the {segment_room} bytes left in "
                                      "the segment (do the segment sizes differ?)")
    records, reached, _count, stop = scan(view, 0, end, _NO_LIMIT)
    if stop == SCAN_BAD:
        why = problem(view, reached, end) or "not a stored message"
        return ReplicaRun(records, problem=f"entry at {first_offset + reached}: {why}")
    blank_total: int | None = None
    if stop == SCAN_BLANK:
        blank_total = _I32.unpack_from(view, reached)[0]
        if reached + BLANK_ENTRY_SIZE != end:
            return ReplicaRun(records, problem=f"blank entry at {first_offset + reached} is not "
                                               "the last entry of its frame")
        if blank_total != segment_room - reached:
            return ReplicaRun(records, problem=(
                f"blank entry at {first_offset + reached} covers {blank_total} bytes, the "
                f"segment has {segment_room - reached} left (do the segment sizes differ?)"))
    elif reached != end:
        return ReplicaRun(records, problem=f"entries end at {first_offset + reached}, the frame "
                                           f"at {first_offset + end}")
    bad = _positions_and_bodies(view, reached, first_offset, segment_room)
    return ReplicaRun(records, blank_total, bad)


@dataclasses.dataclass(frozen=True, slots=True)
class BadEntry:
    """The first entry of a run that is not a whole, intact message: where it lies in the run
    (``position``), why (``problem``), how many good messages come before it and where the
    last of them starts (-1: none)."""

    position: int
    problem: str
    messages_before: int
    last_before: int


def first_bad_entry(buf: Any, first_offset: int, scan: ScanFn) -> BadEntry | None:
    """Check ``buf`` (a run of stored messages as a reader is about to serve them, stored at
    commit log ``first_offset``) by every reader's checks (``scan``: layout, lengths,
    properties), PHYSICALOFFSET and BODYCRC: the first entry that fails, or None when every
    message holds. A blank entry inside a run fails too: a read serves messages only."""
    view = _view(buf)
    end = len(view)
    _records, reached, _count, stop = scan(view, 0, end, _NO_LIMIT)
    if stop == SCAN_BLANK:
        why: str | None = "a blank entry where a message was read"
    elif stop == SCAN_BAD or reached != end:
        why = problem(view, reached, end) or "not a stored message"
    else:
        why = None
    pos = count = 0
    last = -1
    while pos < reached:
        total = _I32.unpack_from(view, pos)[0]
        bad = _position_and_body(view, pos, first_offset)
        if bad is not None:
            return BadEntry(pos, bad, count, last)
        last = pos
        pos += total
        count += 1
    return None if why is None else BadEntry(reached, why, count, last)


def _position_and_body(view: memoryview, pos: int, first_offset: int) -> str | None:
    """Why the message at ``pos`` (its layout checked) does not lie where it says or has not
    the body its BODYCRC says; None when it is intact."""
    physical = _I64.unpack_from(view, pos + PHYSICALOFFSET_AT)[0]
    if physical != first_offset + pos:
        return f"physical offset field {physical} differs from its position"
    (sys_flag,) = _I32.unpack_from(view, pos + SYSFLAG_AT)
    head = _header(sys_flag).size
    (body_len,) = _I32.unpack_from(view, pos + head - 4)
    at = pos + head
    if _crc32(view[at:at + body_len]) & _CRC_MASK != _I32.unpack_from(view, pos + BODYCRC_AT)[0]:
        return "body CRC mismatch"
    return None


def _positions_and_bodies(view: memoryview, stop_at: int, first_offset: int,
                          segment_room: int) -> str | None:
    """PHYSICALOFFSET, BODYCRC and room for a blank entry of each message below ``stop_at``
    (their layout already passed the scan)."""
    pos = 0
    room_end = segment_room - BLANK_ENTRY_SIZE
    while pos < stop_at:
        total = _I32.unpack_from(view, pos)[0]
        if pos + total > room_end:
            return (f"message at {first_offset + pos} leaves no room for the segment's end "
                    "entry (do the segment sizes differ?)")
        physical = _I64.unpack_from(view, pos + PHYSICALOFFSET_AT)[0]
        if physical != first_offset + pos:
            return f"message at {first_offset + pos} says it lies at {physical}"
        (sys_flag,) = _I32.unpack_from(view, pos + SYSFLAG_AT)
        head = _header(sys_flag).size
        (body_len,) = _I32.unpack_from(view, pos + head - 4)
        at = pos + head
        if _crc32(view[at:at + body_len]) & _CRC_MASK != _I32.unpack_from(view, pos + BODYCRC_AT)[0]:
            return f"message at {first_offset + pos}: body CRC mismatch"
        pos += total
    return None
