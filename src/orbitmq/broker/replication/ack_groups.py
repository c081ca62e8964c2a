"""Saves waiting for slaves, grouped as the group commit groups fsync waits: one future per loop
iteration (its end the highest asked), answered oldest first, or False once its time is up.

The one home of that bookkeeping for both replica conditions: ReplicaAck (a slave holds the
bytes) and the controller mode's InSyncAck (every in-sync member holds them). They decide
*when* a group is answered; this module keeps the groups. Loop-owned.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
from collections.abc import Callable
from typing import Any

__all__ = ["AckGroups", "PendingGroup"]


class PendingGroup:
    __slots__ = ("end", "future", "timer")

    def __init__(self, end: int, future: concurrent.futures.Future[Any]) -> None:
        self.end = end
        self.future = future
        self.timer: asyncio.TimerHandle | None = None


class AckGroups:
    """Waiting groups, oldest first.

    Args:
        timeout_s: how long a group waits before it is answered False (FLUSH_SLAVE_TIMEOUT).
        seal: called on the loop once the iteration that opened a group is over (the HA pump,
            which streams what the iteration appended).
    """

    def __init__(self, timeout_s: float, seal: Callable[[], None]) -> None:
        self.timeout_s = timeout_s
        self._seal_then = seal
        self._pending: collections.deque[PendingGroup] = collections.deque()
        self._open: PendingGroup | None = None  # this iteration's group, not sealed yet
        self._loop: asyncio.AbstractEventLoop | None = None

    def join(self, offset: int) -> concurrent.futures.Future[Any]:
        """The future of this iteration's group, raised to ``offset`` (a new group if none)."""
        group = self._open
        if group is not None:
            if offset > group.end:
                group.end = offset
            return group.future
        loop = self._loop or asyncio.get_running_loop()
        self._loop = loop
        group = self._open = PendingGroup(offset, concurrent.futures.Future())
        group.timer = loop.call_later(self.timeout_s, self._expired, group)
        self._pending.append(group)
        loop.call_soon(self._seal)
        return group.future

    def _seal(self) -> None:
        self._open = None
        self._seal_then()

    def oldest(self) -> PendingGroup | None:
        return self._pending[0] if self._pending else None

    def answer_oldest(self, verdict: Any) -> None:
        """Answer the oldest group with ``verdict`` (True, or an Unmet)."""
        group = self._pending.popleft()
        if self._open is group:
            self._open = None
        if group.timer is not None:
            group.timer.cancel()
        if not group.future.done():
            group.future.set_result(verdict)

    def _expired(self, group: PendingGroup) -> None:
        try:
            self._pending.remove(group)
        except ValueError:
            return
        if self._open is group:
            self._open = None
        if not group.future.done():
            group.future.set_result(False)

    def stop(self) -> None:
        """Answer every waiting group False (the broker stops, or stops being a master)."""
        while self._pending:
            self.answer_oldest(False)
        self._open = None

    @property
    def waiting(self) -> int:
        return len(self._pending)

    @property
    def oldest_end(self) -> int | None:
        return self._pending[0].end if self._pending else None
