"""SYNC_MASTER's durability condition: "a slave holds the bytes up to offset N".

``durable_up_to(end)`` is asked by the durable-save seam for every save of a SYNC_MASTER, in the
event loop. It answers at once with SLAVE_NOT_AVAILABLE (an :class:`Unmet`) when no slave is
connected, or when the best one is ``ha_max_gap_not_in_sync`` bytes or more behind ``end``
(RocketMQ's haMaxGapNotInSync, 4.x's haSlaveFallbehindMax, 256 MiB). Otherwise the save waits:

- grouped like the group commit: every wait of one loop iteration shares one future (its end
  the highest asked), so one acknowledgement answers every send below it with one hand-off;
- the iteration's group is sealed when the loop next runs the HA server's pump (scheduled at
  once), which streams everything appended so far to every slave;
- a slave's plausible report (progress.py) resolves every group whose end it reaches, oldest
  first; a group not resolved within ``sync_flush_timeout_ms`` is answered False, which the seam
  turns into FLUSH_SLAVE_TIMEOUT (the message is stored on the master, as RocketMQ's).

Loop-owned: created, asked and resolved on the broker's event loop.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

from orbitmq.broker.durable_save import WAIT_GRACE_S, Unmet
from orbitmq.broker.replication.ack_groups import AckGroups
from orbitmq.broker.replication.progress import ReplicaProgress
from orbitmq.store.status import PutMessageStatus

__all__ = ["ReplicaAck"]


class ReplicaAck:
    """The condition (see the module docstring).

    Args:
        progress: the master's table of its slaves (acknowledgements come from there).
        timeout_ms: how long a save waits for a slave (``sync_flush_timeout_ms``).
        gap_max: ``ha_max_gap_not_in_sync``.
        pump: called (soon, on the loop) when a new group needs its bytes streamed.
    """

    def __init__(self, progress: ReplicaProgress, timeout_ms: int, gap_max: int,
                 pump: Callable[[], None]) -> None:
        self.progress = progress
        self.timeout_s = timeout_ms / 1000
        self.wait_max_s = self.timeout_s + WAIT_GRACE_S
        self.gap_max = gap_max
        self._groups = AckGroups(self.timeout_s, pump)
        progress.on_ack(self._acked)

    def failure_status(self) -> PutMessageStatus:
        return PutMessageStatus.FLUSH_SLAVE_TIMEOUT

    def durable_up_to(self, offset: int) -> concurrent.futures.Future[Any]:
        progress = self.progress
        if offset <= progress.best_acked:
            return _done(True)
        unavailable = self._unavailable(offset)
        if unavailable is _NO_SLAVE:
            return _NO_SLAVE_FUTURE  # one done future for all: no timer, no hand-off per save
        if unavailable is not None:
            return _done(unavailable)
        return self._groups.join(offset)

    def _unavailable(self, offset: int) -> Unmet | None:
        progress = self.progress
        if progress.connected == 0:
            return _NO_SLAVE
        best = progress.best_reported() or 0  # a slave that has not reported yet: from 0
        if offset - best >= self.gap_max:
            return Unmet(PutMessageStatus.SLAVE_NOT_AVAILABLE,
                         f"slave not available: the best slave is {offset - best} bytes behind "
                         f"(ha_max_gap_not_in_sync {self.gap_max}); the message is stored on "
                         "the master only")
        return None

    def _acked(self, offset: int) -> None:
        groups = self._groups
        while (group := groups.oldest()) is not None and group.end <= offset:
            groups.answer_oldest(True)

    def stop(self) -> None:
        """Answer every waiting group (the broker stops or stops being a SYNC_MASTER)."""
        self._groups.stop()

    @property
    def waiting(self) -> int:
        return self._groups.waiting


def _done(value: Any) -> concurrent.futures.Future[Any]:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_result(value)
    return future


_NO_SLAVE = Unmet(PutMessageStatus.SLAVE_NOT_AVAILABLE,
                  "slave not available: no slave is connected; the message is stored on the "
                  "master only")
_NO_SLAVE_FUTURE = _done(_NO_SLAVE)
