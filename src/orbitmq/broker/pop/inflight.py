"""POP consumption state: who holds which message until when (pure: no I/O, no clock of its own).

For each (group, topic, queue) the state keeps a cursor, ``next_offset`` (the first queue offset
never handed out), and the messages handed out and not yet acked, by queue offset: an
:class:`Inflight` with its invisibility deadline, its delivery attempts, a generation (a receipt
handle names it; a redelivery or a changed invisibility makes a new one, so a stale handle is
refused) and, for a push consumer's receive, until when it is renewed while its client lives.

A message whose deadline passed is visible again: the next receive hands it out with one more
attempt (:meth:`PopState.take_expired`), or, past the group's attempts, hands it to the caller
for the dead-letter queue. A FIFO group takes a queue's messages in order and takes nothing more
from that queue while one of them is invisible.

Every change is reported to ``on_change`` as a :class:`Change`, which the log (pop_log.py) writes;
replaying the changes rebuilds the state (:meth:`PopState.apply`). Memory: one small object per
message in flight (``inflight_max`` bounds them) and one heap item per handing out.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
from collections.abc import Callable, Iterator

__all__ = ["Inflight", "QueueState", "GroupTopic", "PopState", "Change", "Handed"]

Key = tuple[str, str]  # (group, topic)


@dataclasses.dataclass(slots=True)
class Inflight:
    """A message handed out and not yet acked."""

    deadline_ms: int
    attempt: int  # deliveries so far (1: the first)
    gen: int  # the generation its current receipt handle names
    renew_until_ms: int = 0  # auto-renewed until then while ``owner`` lives (0: never)
    owner: str = ""  # the client id of a push consumer's receive


@dataclasses.dataclass(slots=True)
class QueueState:
    next_offset: int
    inflight: dict[int, Inflight] = dataclasses.field(default_factory=dict)

    def committed(self) -> int:
        """Every offset below this is acked (the 4.x consumer offset of the group)."""
        return min(self.inflight, default=self.next_offset)

    def locked(self, now_ms: int) -> bool:
        """A FIFO queue with a message still invisible takes no more."""
        return any(e.deadline_ms > now_ms for e in self.inflight.values())


@dataclasses.dataclass(slots=True)
class GroupTopic:
    queues: dict[int, QueueState] = dataclasses.field(default_factory=dict)
    heap: list[tuple[int, int, int, int]] = dataclasses.field(default_factory=list)  # deadline, qid, offset, gen
    # Messages the reviver found visible again (qid, offset, gen): the next receive takes these
    # first. Items are checked when taken (an ack or a change since makes them stale).
    visible: collections.deque[tuple[int, int, int]] = dataclasses.field(default_factory=collections.deque)
    rotation: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    """One change of the state, as the log writes it: ``kind`` S (entry set), A (entry gone)
    or N (cursor moved)."""

    kind: str
    group: str
    topic: str
    queue_id: int
    offset: int
    entry: Inflight | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Handed:
    """A message a receive hands out (or one due for the dead-letter queue)."""

    queue_id: int
    offset: int
    entry: Inflight


class PopState:
    """Every POP group's state on one broker (module docstring).

    Args:
        on_change: gets every change, in order (the log).
    """

    def __init__(self, on_change: Callable[[Change], None] | None = None) -> None:
        self.groups: dict[Key, GroupTopic] = {}
        self.on_change = on_change or (lambda change: None)
        self.inflight_count = 0
        self.next_gen = 1

    # -- state ----------------------------------------------------------------------------------
    def group_topic(self, group: str, topic: str) -> GroupTopic:
        gt = self.groups.get((group, topic))
        if gt is None:
            gt = self.groups[(group, topic)] = GroupTopic()
        return gt

    def queue(self, group: str, topic: str, queue_id: int, start: Callable[[], int]) -> QueueState:
        """A queue's state; ``start()`` gives the cursor of a queue seen the first time."""
        gt = self.group_topic(group, topic)
        qs = gt.queues.get(queue_id)
        if qs is None:
            qs = gt.queues[queue_id] = QueueState(start())
        return qs

    def get(self, group: str, topic: str, queue_id: int, offset: int) -> Inflight | None:
        gt = self.groups.get((group, topic))
        qs = gt.queues.get(queue_id) if gt is not None else None
        return qs.inflight.get(offset) if qs is not None else None

    def earliest_deadline(self, group: str, topic: str) -> int | None:
        """The soonest a message of (group, topic) may turn visible again (heap top, possibly
        stale: a wake-up too early only means another look)."""
        gt = self.groups.get((group, topic))
        return gt.heap[0][0] if gt is not None and gt.heap else None

    # -- changes --------------------------------------------------------------------------------
    def hand_out(self, group: str, topic: str, qs: QueueState, queue_id: int, offset: int,
                 attempt: int, deadline_ms: int, renew_until_ms: int = 0, owner: str = "") -> Inflight:
        if offset not in qs.inflight:
            self.inflight_count += 1
        entry = Inflight(deadline_ms, attempt, self._gen(), renew_until_ms, owner)
        qs.inflight[offset] = entry
        heapq.heappush(self.group_topic(group, topic).heap, (deadline_ms, queue_id, offset, entry.gen))
        self.on_change(Change("S", group, topic, queue_id, offset, entry))
        return entry

    def move_cursor(self, group: str, topic: str, qs: QueueState, queue_id: int, offset: int) -> None:
        if offset > qs.next_offset:
            qs.next_offset = offset
            self.on_change(Change("N", group, topic, queue_id, offset))

    def remove(self, group: str, topic: str, queue_id: int, offset: int) -> Inflight | None:
        """Ack (or dead-letter) a message: it leaves the state for good."""
        gt = self.groups.get((group, topic))
        qs = gt.queues.get(queue_id) if gt is not None else None
        entry = qs.inflight.pop(offset, None) if qs is not None else None
        if entry is not None:
            self.inflight_count -= 1
            self.on_change(Change("A", group, topic, queue_id, offset))
        return entry

    def reschedule(self, group: str, topic: str, queue_id: int, offset: int, deadline_ms: int,
                   *, new_gen: bool) -> Inflight | None:
        """A new deadline (changed invisibility: a new generation; auto-renewal keeps it)."""
        entry = self.get(group, topic, queue_id, offset)
        if entry is None:
            return None
        entry.deadline_ms = deadline_ms
        if new_gen:
            entry.gen = self._gen()
        heapq.heappush(self.group_topic(group, topic).heap, (deadline_ms, queue_id, offset, entry.gen))
        self.on_change(Change("S", group, topic, queue_id, offset, entry))
        return entry

    def _gen(self) -> int:
        gen = self.next_gen
        self.next_gen += 1
        return gen

    # -- expiry ---------------------------------------------------------------------------------
    def take_expired(self, group: str, topic: str, now_ms: int, limit: int) -> Iterator[Handed]:
        """The messages of (group, topic) visible again, at most ``limit``: those the reviver
        set aside first, then the soonest expired; the caller must re-deliver, renew or
        dead-letter each one it gets (its heap item is consumed)."""
        gt = self.groups.get((group, topic))
        if gt is None:
            return
        taken = 0
        while gt.visible and taken < limit:
            qid, offset, gen = gt.visible.popleft()
            entry = self._valid(gt, qid, offset, gen, None)
            if entry is not None and entry.deadline_ms <= now_ms:
                taken += 1
                yield Handed(qid, offset, entry)
        while gt.heap and gt.heap[0][0] <= now_ms and taken < limit:
            deadline, qid, offset, gen = heapq.heappop(gt.heap)
            entry = self._valid(gt, qid, offset, gen, deadline)
            if entry is not None:
                taken += 1
                yield Handed(qid, offset, entry)

    def set_visible(self, group: str, topic: str, handed: Handed) -> None:
        """Put an expired message where the next receive takes it first (the reviver)."""
        self.group_topic(group, topic).visible.append((handed.queue_id, handed.offset, handed.entry.gen))

    @staticmethod
    def _valid(gt: GroupTopic, qid: int, offset: int, gen: int, deadline: int | None) -> Inflight | None:
        qs = gt.queues.get(qid)
        entry = qs.inflight.get(offset) if qs is not None else None
        if entry is None or entry.gen != gen or (deadline is not None and entry.deadline_ms != deadline):
            return None  # stale (acked, changed or renewed since)
        return entry

    def drop_due_heap_items(self, group: str, topic: str, now_ms: int) -> None:
        """FIFO groups read their queues in order and never the heap: keep it from growing."""
        gt = self.groups.get((group, topic))
        while gt is not None and gt.heap and gt.heap[0][0] <= now_ms:
            heapq.heappop(gt.heap)

    # -- replay ---------------------------------------------------------------------------------
    def apply(self, change: Change) -> None:
        """Replay one logged change (recovery); ``on_change`` is not called."""
        gt = self.group_topic(change.group, change.topic)
        qs = gt.queues.get(change.queue_id)
        if qs is None:
            qs = gt.queues[change.queue_id] = QueueState(0)
        if change.kind == "N":
            qs.next_offset = max(qs.next_offset, change.offset)
        elif change.kind == "S" and change.entry is not None:
            if change.offset not in qs.inflight:
                self.inflight_count += 1
            qs.inflight[change.offset] = change.entry
            qs.next_offset = max(qs.next_offset, change.offset + 1)
            self.next_gen = max(self.next_gen, change.entry.gen + 1)
        elif change.kind == "A":
            if qs.inflight.pop(change.offset, None) is not None:
                self.inflight_count -= 1
            qs.next_offset = max(qs.next_offset, change.offset + 1)

    def rebuild_heaps(self) -> None:
        for gt in self.groups.values():
            gt.heap = [(e.deadline_ms, qid, off, e.gen) for qid, qs in gt.queues.items()
                       for off, e in qs.inflight.items()]
            heapq.heapify(gt.heap)

    def snapshot(self) -> Iterator[Change]:
        """The state as changes (compaction): every cursor, then every entry."""
        for (group, topic), gt in self.groups.items():
            for qid, qs in gt.queues.items():
                yield Change("N", group, topic, qid, qs.next_offset)
                for offset, entry in qs.inflight.items():
                    yield Change("S", group, topic, qid, offset, entry)
