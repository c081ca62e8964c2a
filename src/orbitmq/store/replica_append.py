"""A slave's side of the commit log: storing the master's bytes at the master's offsets.

``MessageStore.append_replicated(offset, data)`` takes one frame of the master's stream (whole
entries, see protocol/ha.py) and, under the commit log's put lock:

1. checks that ``offset`` is where this log ends (an empty log starts at any segment boundary:
   the master's oldest segment, when the slave is new);
2. checks the entries with the stored codec (``stored.check_replica_entries``: every reader's
   checks, PHYSICALOFFSET, body CRC, a blank end entry that closes exactly the segment) and
   that each message takes the next queue offset of its queue;
3. writes them where they go, in the last segment or a new one, and publishes them; the store's
   normal dispatch then builds consume queues and the index.

Nothing is written unless everything holds: a garbled frame, or one that does not continue this
log, is refused whole (``status`` and ``problem`` say why) and the store is unchanged.

``replica_tail`` tells where the slave's log should be compared with the master's before it
takes anything new: the start of its last message and the bytes of the entries from there on.
"""

from __future__ import annotations

from collections.abc import Callable

from orbitmq.protocol import stored
from orbitmq.protocol.stored import BLANK_ENTRY_SIZE, ScanRecord
from orbitmq.store.status import (  # re-exported: the results of a replica's append
    ReplicaAppendResult,
    ReplicaAppendStatus,
    ReplicaTail,
)

__all__ = ["ReplicaAppendStatus", "ReplicaAppendResult", "ReplicaTail", "queue_offset_problem",
           "replica_tail", "frame_extent"]


def frame_extent(view: memoryview, position: int, file_size: int, batch_max: int) -> tuple[int, int]:
    """What a master sends next from ``view`` (its log from ``position`` of a segment to the
    segment's written end): (bytes of the frame, bytes the stream moves on). Whole entries, at
    least one, up to ``batch_max`` bytes; a blank end entry goes as its 8-byte header, last, and
    moves the stream to the segment's end.

    Raises:
        ValueError: the log does not hold an entry where one must be (the master's own log is
            damaged: never sent).
    """
    at = 0
    end = len(view)
    while at < end:
        if end - at < BLANK_ENTRY_SIZE:
            raise ValueError(f"a partial entry header at segment position {position + at}")
        size = stored.total_size(view, at)
        if stored.is_blank_entry(view, at):
            if size != file_size - position - at:
                raise ValueError(f"a blank entry of {size} bytes at segment position "
                                 f"{position + at}")
            return at + BLANK_ENTRY_SIZE, at + size
        if size <= 0 or at + size > end:
            raise ValueError(f"an entry of {size} bytes at segment position {position + at}")
        if at and at + size > batch_max:
            break
        at += size
    return at, at


def queue_offset_problem(records: list[ScanRecord], table: dict[tuple[str, int], int],
                         topic_of: Callable[[bytes], str],
                         unknown: Callable[[tuple[str, int]], int | None] = lambda key: None,
                         ) -> tuple[str | None, dict[tuple[str, int], int]]:
    """Whether each message takes the next queue offset of its queue (a queue this log has not
    seen yet starts anywhere: the master's older segments may be gone); returns the problem, or
    None and the table's new values. ``unknown(key)``: the next offset of a queue the table
    lacks (the store loads it), None when this log has no such queue."""
    updates: dict[tuple[str, int], int] = {}
    for record in records:
        key = (topic_of(record[5]), record[2])
        expected = updates.get(key)
        if expected is None:
            expected = table.get(key)
            if expected is None:
                expected = unknown(key)
        if expected is not None and record[3] != expected:
            return (f"message at {record[0]} has queue offset {record[3]} in {key[0]}:{key[1]}, "
                    f"{expected} expected"), {}
        updates[key] = record[3] + 1
    return None, updates


def replica_tail(read: Callable[[int, int], memoryview | None], start: int,
                 end: int) -> ReplicaTail | None:
    """The last message of the log below ``end`` and the entries after it, walking entries from
    ``start`` (a message boundary: the end of a consume queue entry, or a segment start); None
    when there is no message between them. ``read(offset, size)`` reads the log."""
    last: int | None = None
    at = start
    while at < end:
        head = read(at, BLANK_ENTRY_SIZE)
        if head is None:
            return None
        if stored.is_blank_entry(head):
            at += stored.total_size(head)
            continue
        size = stored.total_size(head)
        if size <= 0:
            return None
        last = at
        at += size
    if last is None:
        return None
    size = stored.total_size(read(last, BLANK_ENTRY_SIZE) or b"\0" * BLANK_ENTRY_SIZE)
    message = read(last, size)
    if message is None:
        return None
    entries = [bytes(message)]
    after = last + size
    if after < end:  # the message closed its segment: a blank entry follows
        blank = read(after, BLANK_ENTRY_SIZE)
        if blank is None or not stored.is_blank_entry(blank):
            return None
        entries.append(bytes(blank))
    return ReplicaTail(last, tuple(entries), end)
