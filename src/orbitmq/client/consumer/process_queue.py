"""ProcessQueue: the messages of one assigned queue between their pull and their acknowledgement.

A push consumer keeps one per queue it holds. It answers the questions that make consumption
safe and bounded:

- *which offset may be committed?* Messages of a queue finish out of order on a thread pool; the
  committed offset must never pass a message still being consumed, so it is the lowest offset
  still cached (or one past the highest ever cached when nothing is left). Messages are cached in
  offset order (pulls of a queue are sequential), kept in an insertion-ordered map: the lowest is
  its first key, found in O(1).
- *may the queue be pulled further?* Not while it caches more than the count or size threshold,
  or (concurrent consumption) while its lowest and highest cached offsets are further apart than
  the span threshold: one stuck message must not let the cache grow without bound.
- orderly consumption takes messages out in order into a "consuming" set, then commits them
  (SUCCESS) or puts them back in front (SUSPEND), so they are consumed again, never skipped.

Used from the event loop only; time values are passed in by the caller (loop seconds).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.message import MessageExt

__all__ = ["ProcessQueue", "FlowControl"]


class FlowControl(enum.Enum):
    """Why a queue's pulling pauses."""

    COUNT = "cached message count"
    SIZE = "cached message size"
    SPAN = "offset span"


@dataclasses.dataclass(eq=False)
class ProcessQueue:
    """One assigned queue's cache of pulled, not yet acknowledged messages (see module doc)."""

    mq: MessageQueue
    dropped: bool = False
    locked: bool = False
    last_lock_time: float = 0.0
    last_pull_time: float = 0.0
    last_consume_time: float = 0.0
    consuming: bool = False  # orderly: a consume task is running for this queue
    try_unlock_times: int = 0
    msg_count: int = 0
    msg_size: int = 0
    queue_offset_max: int = -1
    _cached: OrderedDict[int, MessageExt] = dataclasses.field(default_factory=OrderedDict)
    _taken: OrderedDict[int, MessageExt] = dataclasses.field(default_factory=OrderedDict)
    _consume_lock: asyncio.Lock | None = None

    @property
    def consume_lock(self) -> asyncio.Lock:
        """Held while an orderly listener runs on this queue: dropping the queue waits for it."""
        if self._consume_lock is None:
            self._consume_lock = asyncio.Lock()
        return self._consume_lock

    # -- caching and acknowledging -------------------------------------------------------------
    def put(self, messages: Iterable[MessageExt]) -> list[MessageExt]:
        """Cache pulled messages (in offset order); returns the new ones (a message at or below
        the highest offset ever cached is not new: it was cached before)."""
        added = []
        for msg in messages:
            offset = msg.queue_offset
            if offset <= self.queue_offset_max:  # cached before: pulls only move forward
                continue
            self._cached[offset] = msg
            self.queue_offset_max = offset
            self.msg_size += len(msg.body)
            added.append(msg)
        self.msg_count += len(added)
        return added

    def remove(self, messages: Iterable[MessageExt]) -> int:
        """Forget acknowledged messages; returns the offset that may now be committed: the lowest
        offset still cached, or one past the highest cached when none is left (-1 when nothing
        was cached at all)."""
        if not self._cached:
            return -1
        for msg in messages:
            gone = self._cached.pop(msg.queue_offset, None)
            if gone is not None:
                self.msg_count -= 1
                self.msg_size -= len(gone.body)
        return self.commit_offset()

    def commit_offset(self) -> int:
        """The offset up to which everything pulled has been acknowledged."""
        if self._taken:
            return next(iter(self._taken))
        if self._cached:
            return next(iter(self._cached))
        return self.queue_offset_max + 1 if self.queue_offset_max >= 0 else -1

    def lowest_unfinished(self) -> int | None:
        """The lowest offset cached or being consumed (None when none is)."""
        if self._taken:
            return next(iter(self._taken))
        return next(iter(self._cached)) if self._cached else None

    @property
    def cached_min_offset(self) -> int | None:
        return next(iter(self._cached)) if self._cached else None

    @property
    def cached_max_offset(self) -> int | None:
        return next(reversed(self._cached)) if self._cached else None

    def max_span(self) -> int:
        """Highest minus lowest cached offset (0 with fewer than two messages)."""
        if len(self._cached) < 2:
            return 0
        return next(reversed(self._cached)) - next(iter(self._cached))

    def flow_control(self, count_max: int, size_max: int, span_max: int | None) -> FlowControl | None:
        """Why pulling must pause now, or None. ``span_max`` None: no span check (orderly)."""
        if self.msg_count > count_max:
            return FlowControl.COUNT
        if self.msg_size > size_max:
            return FlowControl.SIZE
        if span_max is not None and self.max_span() > span_max:
            return FlowControl.SPAN
        return None

    def has_cached(self) -> bool:
        return bool(self._cached)

    # -- orderly ---------------------------------------------------------------------------------
    def take(self, count: int) -> list[MessageExt]:
        """Move up to ``count`` lowest cached messages to the consuming set and return them."""
        out: list[MessageExt] = []
        while self._cached and len(out) < count:
            offset, msg = self._cached.popitem(last=False)
            self._taken[offset] = msg
            out.append(msg)
        return out

    def commit(self) -> int:
        """Acknowledge every taken message; returns the offset to commit (one past the highest
        taken), or -1 when nothing was taken."""
        if not self._taken:
            return -1
        offset = next(reversed(self._taken)) + 1
        self.msg_count -= len(self._taken)
        self.msg_size -= sum(len(m.body) for m in self._taken.values())
        self._taken.clear()
        return offset

    def put_back(self) -> list[MessageExt]:
        """Return the taken messages in front of the cache (consumed again next); returns them."""
        back = list(self._taken.values())
        if back:
            rest = self._cached
            self._cached = OrderedDict(self._taken)
            self._cached.update(rest)
            self._taken = OrderedDict()
        return back

    def clear(self) -> None:
        """Forget everything (the queue was dropped)."""
        self._cached.clear()
        self._taken.clear()
        self.msg_count = self.msg_size = 0

    # -- locks and reporting ---------------------------------------------------------------------
    def lock_expired(self, now: float, max_live_time: float) -> bool:
        """Orderly clustering: the broker lock counts as lost this long after its last renewal."""
        return now - self.last_lock_time > max_live_time

    def info(self, committed: int, now: float, wall_offset: float) -> dict[str, Any]:
        """Stats for GET_CONSUMER_RUNNING_INFO (RocketMQ's ProcessQueueInfo names; times in
        epoch ms, ``wall_offset`` converts loop seconds to epoch seconds)."""
        def ms(t: float) -> int:
            return int((t + wall_offset) * 1000) if t else 0

        return {
            "commitOffset": committed,
            "cachedMsgMinOffset": self.cached_min_offset or 0,
            "cachedMsgMaxOffset": self.cached_max_offset or 0,
            "cachedMsgCount": self.msg_count,
            "cachedMsgSizeInMiB": self.msg_size // (1024 * 1024),
            "consumingMsgCount": len(self._taken),
            "locked": self.locked,
            "tryUnlockTimes": self.try_unlock_times,
            "lastLockTimestamp": ms(self.last_lock_time),
            "droped": self.dropped,  # sic: RocketMQ's field name
            "lastPullTimestamp": ms(self.last_pull_time),
            "lastConsumeTimestamp": ms(self.last_consume_time),
        }
