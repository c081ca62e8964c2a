"""SYNC_MASTER's durability condition in controller mode: "every other member of the in-sync set
holds the bytes up to N, and this master's lease still holds" (rules.may_acknowledge).

It replaces replication's ReplicaAck (one slave suffices there) when controller mode is on, and
works like it: the saves of one loop iteration share one group and one future; the group is
sealed when the HA server's pump runs; every plausible report of any slave (progress.py) checks
the pending groups oldest first. A group is answered

- True once every required member acknowledged its end (while the lease holds);
- an :class:`Unmet` at once when it never can be: no slave is required (SLAVE_NOT_AVAILABLE:
  stored on the master only) or the lease may have lapsed (SERVICE_NOT_AVAILABLE);
- False after ``sync_flush_timeout_ms`` (FLUSH_SLAVE_TIMEOUT).

Which members are required, and until when the lease holds, the failover service says
(:class:`AckAuthority`); it calls :meth:`InSyncAck.recheck` when either changes (a member left
the set: groups that waited only for it may now be answered).

``committed`` is the **confirm offset**: the highest commit log end that every required member
acknowledged while the lease held. It rises when a group is answered True, and also on any
report or recheck that shows every required member past it (so it catches up with what the
slaves hold without waiting for the next send, e.g. after a member rejoined or left the set).
The in-sync rules admit a member only once it holds that much, so every member of the set holds
the bytes below it at any time; a master serves consumers only up to it (docs/failover.md). With
no required member it does not move: sends are then answered SLAVE_NOT_AVAILABLE (stored on the
master only) and a member may later join without those bytes, so they are not served until a
member that joined acknowledges them. ``on_advance`` listeners hear each rise.

Loop-owned.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from orbitmq.broker.durable_save import WAIT_GRACE_S, Unmet
from orbitmq.broker.failover.rules import may_acknowledge
from orbitmq.broker.replication.ack_groups import AckGroups
from orbitmq.broker.replication.progress import ReplicaProgress, SlaveLink
from orbitmq.store.status import PutMessageStatus

__all__ = ["InSyncAck", "AckAuthority"]

log = logging.getLogger(__name__)


class AckAuthority(Protocol):
    def required(self) -> frozenset[int]:
        """Members whose acknowledgement a save needs (the in-sync set without this master,
        plus any member a change in flight adds or removes)."""
        ...

    def deadline(self) -> float:
        """Monotonic time until which this broker may acknowledge (its fence)."""
        ...


class InSyncAck:
    """The condition (see the module docstring)."""

    def __init__(self, progress: ReplicaProgress, timeout_ms: int, pump: Callable[[], None],
                 authority: AckAuthority, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.progress = progress
        self.timeout_s = timeout_ms / 1000
        self.wait_max_s = self.timeout_s + WAIT_GRACE_S
        self.authority = authority
        self._now = monotonic
        self._groups = AckGroups(self.timeout_s, pump)
        self.committed = 0  # the confirm offset (module docstring)
        self._listeners: list[Callable[[int], None]] = []
        progress.on_report(self._reported)

    def on_advance(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(committed)`` on the loop whenever the confirm offset rises."""
        self._listeners.append(listener)

    def _advance(self, end: int) -> None:
        if end <= self.committed:
            return
        self.committed = end
        for listener in self._listeners:
            try:
                listener(end)
            except Exception:
                log.exception("a confirm offset listener failed")

    def _advance_to_acked(self) -> None:
        """Raise the confirm offset to what every required member acknowledged (if the lease
        holds and some member is required)."""
        required = self.authority.required()
        if not required:
            return
        acked = self.progress.acked_by_member()
        end = min(acked.get(m, -1) for m in required)
        if end > self.committed and self._verdict(end) is True:
            self._advance(end)

    def failure_status(self) -> PutMessageStatus:
        return PutMessageStatus.FLUSH_SLAVE_TIMEOUT

    def _verdict(self, end: int) -> bool | Unmet:
        verdict = may_acknowledge(end, self.authority.required(), self.progress.acked_by_member(),
                                  self._now(), self.authority.deadline())
        if isinstance(verdict, str):
            status = (PutMessageStatus.SLAVE_NOT_AVAILABLE if verdict.startswith("no slave")
                      else PutMessageStatus.SERVICE_NOT_AVAILABLE)
            return Unmet(status, verdict)
        return verdict

    def durable_up_to(self, offset: int) -> concurrent.futures.Future[Any]:
        verdict = self._verdict(offset)
        if verdict is not False:
            if verdict is True:
                self._advance(offset)
            return _done(verdict)
        return self._groups.join(offset)

    def _reported(self, link: SlaveLink) -> None:
        self.recheck()

    def recheck(self) -> None:
        """Answer the pending groups that can be answered now, oldest first; then raise the
        confirm offset to what the required members hold."""
        self._answer_pending()
        self._advance_to_acked()

    def _answer_pending(self) -> None:
        groups = self._groups
        while (group := groups.oldest()) is not None:
            verdict = self._verdict(group.end)
            if verdict is False:
                return
            if verdict is True:
                self._advance(group.end)
            groups.answer_oldest(verdict)

    def stop(self) -> None:
        """Answer every waiting group as not acknowledged (the broker stops being master)."""
        self._groups.stop()

    @property
    def waiting(self) -> int:
        return self._groups.waiting

    @property
    def oldest_end(self) -> int | None:
        return self._groups.oldest_end


def _done(value: Any) -> concurrent.futures.Future[Any]:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_result(value)
    return future
