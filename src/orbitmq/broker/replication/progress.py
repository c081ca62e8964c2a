"""The master's table of its slaves' progress: which HA connections are open and how far each
slave's copy of the commit log provably reaches.

One :class:`SlaveLink` per HA connection, kept by the HA server (master.py), read by the
SYNC_MASTER condition (replica_ack.py), the runtime info, ``orbitmq cluster list`` and the
metrics. A failover design (in-sync sets, epochs) builds on the same table.

What the master believes a slave holds moves only on *plausible* reports (master.py checks
them): ``acked`` is the end of a frame this connection sent that the slave then reported
holding; a slave's first report (where it says its log reaches) counts as ``reported`` for
"is a slave close enough to be worth waiting for" (SLAVE_NOT_AVAILABLE), never as an
acknowledgement: a slave's older bytes are only trusted once it compared them with the
master's (the tail check of slave.py) and reported past them.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable

__all__ = ["SlaveLink", "ReplicaProgress", "AckListener"]

AckListener = Callable[[int], None]


@dataclasses.dataclass(eq=False)
class SlaveLink:
    """One slave's HA connection as the master sees it.

    Attributes:
        link_id: a number of this connection (unique in the process).
        peer: the slave's address on the HA connection (``ip:port``, the slave's own socket).
        connected_ms: wall time the connection opened.
        start: where the master streams from (decided by the first report); None before it.
        reported: the slave's last report (its first report until it reports again).
        acked: the end of the last frame the slave reported holding; None before one.
        sent_end: the offset the stream has reached (what was written to the socket).
        last_report_mono: monotonic time of the last report (housekeeping).
        bytes_sent: frame bytes written since the connection opened.
        buffered: bytes written and not yet taken by the kernel (the transport's buffer).
        member: the slave's member id from its hello (controller mode), else 0.
    """

    link_id: int
    peer: str
    connected_ms: int
    start: int | None = None
    reported: int | None = None
    acked: int | None = None
    sent_end: int = 0
    last_report_mono: float = dataclasses.field(default_factory=time.monotonic)
    bytes_sent: int = 0
    buffered: int = 0
    member: int = 0

    def lag_bytes(self, master_end: int) -> int:
        """Bytes of the master's log the slave is not known to hold."""
        held = self.acked if self.acked is not None else (self.reported or 0)
        return max(0, master_end - held)


class ReplicaProgress:
    """Every open HA connection's link; acknowledgements are told to listeners (loop-owned)."""

    def __init__(self) -> None:
        self._links: dict[int, SlaveLink] = {}
        self._ids = itertools.count(1)
        self._ack_listeners: list[AckListener] = []
        self._report_listeners: list[Callable[[SlaveLink], None]] = []
        self.best_acked = -1  # the highest acknowledgement of an open connection (-1: none)

    def open(self, peer: str) -> SlaveLink:
        link = SlaveLink(next(self._ids), peer, int(time.time() * 1000))
        self._links[link.link_id] = link
        return link

    def close(self, link: SlaveLink) -> None:
        if self._links.pop(link.link_id, None) is not None:
            self._recompute()

    def links(self) -> list[SlaveLink]:
        return list(self._links.values())

    @property
    def connected(self) -> int:
        return len(self._links)

    def on_ack(self, listener: AckListener) -> None:
        """``listener(best_acked)`` whenever the best acknowledgement grows."""
        self._ack_listeners.append(listener)

    def on_report(self, listener: Callable[[SlaveLink], None]) -> None:
        """``listener(link)`` after every acknowledgement of any link (controller mode waits for
        every member of its in-sync set, not for the best one)."""
        self._report_listeners.append(listener)

    def acked_by_member(self) -> dict[int, int]:
        """Member id -> the furthest any of its open links acknowledged (controller mode). An
        empty slave of an empty master holds all there is (nothing is ever sent to confirm it)."""
        out: dict[int, int] = {}
        for link in self._links.values():
            held = link.acked
            if held is None and link.reported == 0 and link.start == 0 and link.sent_end == 0:
                held = 0
            if link.member and held is not None:
                out[link.member] = max(out.get(link.member, -1), held)
        return out

    def acked(self, link: SlaveLink, offset: int) -> None:
        """``link``'s slave provably holds everything below ``offset`` (checked by the caller)."""
        link.acked = offset
        for report_listener in self._report_listeners:
            report_listener(link)
        if offset > self.best_acked:
            self.best_acked = offset
            for listener in self._ack_listeners:
                listener(offset)

    def _recompute(self) -> None:
        self.best_acked = max((lk.acked for lk in self._links.values() if lk.acked is not None),
                              default=-1)

    def best_reported(self) -> int | None:
        """The furthest any open connection's slave says it reaches (None without one)."""
        values = [lk.acked if lk.acked is not None else lk.reported
                  for lk in self._links.values()]
        known = [v for v in values if v is not None]
        return max(known) if known else None

    def in_sync(self, master_end: int, gap_max: int) -> list[SlaveLink]:
        """The open connections whose slave acknowledged within ``gap_max`` bytes of the end."""
        return [lk for lk in self._links.values()
                if lk.acked is not None and master_end - lk.acked < gap_max]
