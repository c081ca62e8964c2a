"""Queue locks of orderly consumption (their requests, LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ
(42): processor/lock_processor.py).

An orderly consumer consumes a queue only while it holds the broker's lock on it, so that two
members of a group never consume one queue at the same time, even while a rebalance moves it.
The table is per consumer group: queue -> (owner client id, last renewal). A lock lives
``rebalance_lock_max_live_time_ms`` (60 s) after its last renewal; its owner renews it by locking
again (clients do every 20 s). A request locks every queue that is free, expired or already its
own, and is answered with ``{"lockOKMQSet": [...]}``: the queues of the request it now holds.
UNLOCK_BATCH_MQ releases the queues the client owns (others' locks are left alone).

When a client leaves a group (UNREGISTER_CLIENT, or its connection closes) and has no other
connection left in it, its locks are released at once instead of after 60 s: a stopped or killed
orderly consumer's queues move on as soon as the rebalance gives them to someone else (the C++
client does not unlock its queues when it shuts down). RocketMQ waits for the expiry. A client
that merely lost its connection stops consuming once it notices; the window where it might finish
a batch it had already started is the same as with an expired lock.

A group whose members consume in BROADCASTING mode (as their heartbeats say) gets every queue it
asks for, without exclusivity: each member reads every queue with offsets of its own, so there is
nothing to exclude, and an orderly broadcasting client (which locks like a clustering one) would
otherwise starve every member but the first. (RocketMQ 4.x has that flaw; later clients stopped
locking in broadcasting mode.)

Locks live in memory only: after a broker restart every queue is free, as in RocketMQ.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from orbitmq.protocol.bodies import MessageModel, MessageQueue
from orbitmq.transport.connection import RemotingConnection

if TYPE_CHECKING:
    from orbitmq.broker.tables.client_manager import ClientManager

__all__ = ["QueueLockManager", "LockEntry", "LOCK_BATCH_QUEUES_MAX"]

log = logging.getLogger(__name__)

LOCK_BATCH_QUEUES_MAX = 4096  # queues per request: a bound on one request's work


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclasses.dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update_ms: int


class QueueLockManager:
    """Group -> queue -> LockEntry; used from the broker's event loop only.

    Args:
        max_live_ms: a lock's life after its last renewal.
        clients: the broker's client tables (a group's message model), if any.
        clock_ms: monotonic milliseconds (injectable for tests).
        check_stall: the broker's RemotingServer.check_stall, asked before a lock request
            judges ages: one read in the iteration right after a stall, before the sweep met
            it, would judge them with the stall in.
    """

    def __init__(self, max_live_ms: int, clients: ClientManager | None = None,
                 clock_ms: Callable[[], int] = _monotonic_ms,
                 check_stall: Callable[[], None] = lambda: None) -> None:
        self.max_live_ms = max_live_ms
        self.clients = clients
        self._clock_ms = clock_ms
        self._check_stall = check_stall
        self.table: dict[str, dict[MessageQueue, LockEntry]] = {}

    # -- the table ------------------------------------------------------------------------------
    def _expired(self, entry: LockEntry, now: int) -> bool:
        return now - entry.last_update_ms > self.max_live_ms

    def discount(self, seconds: float) -> None:
        """Take ``seconds`` out of every lock's age: the broker's loop stood still that long or
        its clock stepped (RemotingServer.discount), and renewals sent meanwhile wait unread.
        Without this a step past ``max_live_ms`` let another client take an orderly consumer's
        queues while it still consumed them."""
        shift = int(seconds * 1000)
        for locks in self.table.values():
            for entry in locks.values():
                entry.last_update_ms += shift

    def try_lock(self, group: str, queues: list[MessageQueue], client_id: str) -> list[MessageQueue]:
        """Lock (or renew) every queue free, expired or owned by ``client_id``; returns those it
        holds now, in request order."""
        self._check_stall()
        now = self._clock_ms()
        locks = self.table.setdefault(group, {})
        held = []
        for mq in queues:
            entry = locks.get(mq)
            if entry is None or entry.client_id == client_id or self._expired(entry, now):
                if entry is not None and entry.client_id != client_id:
                    log.info("queue lock expired, taken over group=%s mq=%s from=%s to=%s",
                             group, mq, entry.client_id, client_id)
                locks[mq] = LockEntry(client_id, now)
                held.append(mq)
        return held

    def unlock(self, group: str, queues: list[MessageQueue], client_id: str) -> int:
        """Release the queues ``client_id`` owns; returns how many were released."""
        locks = self.table.get(group)
        if not locks:
            return 0
        released = 0
        for mq in queues:
            entry = locks.get(mq)
            if entry is not None and entry.client_id == client_id:
                del locks[mq]
                released += 1
        if not locks:
            del self.table[group]
        return released

    def owner(self, group: str, mq: MessageQueue) -> str | None:
        """The client holding a live lock on ``mq``, or None."""
        entry = self.table.get(group, {}).get(mq)
        if entry is None or self._expired(entry, self._clock_ms()):
            return None
        return entry.client_id

    def release_client(self, group: str, client_id: str) -> int:
        """Drop every lock ``client_id`` holds in ``group``; returns how many."""
        locks = self.table.get(group)
        if not locks:
            return 0
        doomed = [mq for mq, entry in locks.items() if entry.client_id == client_id]
        for mq in doomed:
            del locks[mq]
        if not locks:
            del self.table[group]
        return len(doomed)

    # -- departures -----------------------------------------------------------------------------
    @staticmethod
    def members_on(conn: RemotingConnection, clients: ClientManager) -> list[tuple[str, str]]:
        """(group, client id) of every consumer group ``conn`` belongs to: call before the
        client tables forget a closing connection, then pass to :meth:`release_departed`."""
        return [(group, info.channels[conn].client_id)
                for group, info in clients.consumers.items() if conn in info.channels]

    def release_departed(self, members: list[tuple[str, str]], clients: ClientManager) -> None:
        """Release the locks of each (group, client id) no longer in its group."""
        for group, client_id in members:
            if client_id in clients.consumer_ids(group):
                continue  # still there through another connection
            released = self.release_client(group, client_id)
            if released:
                log.info("queue locks released group=%s client=%s count=%d (left the group)",
                         group, client_id, released)

    def broadcasting(self, group: str) -> bool:
        """Whether ``group``'s members consume in BROADCASTING mode (locks are not exclusive)."""
        info = self.clients.consumers.get(group) if self.clients is not None else None
        return info is not None and info.message_model is MessageModel.BROADCASTING

    @staticmethod
    def refusal(group: str, client_id: str, queues: list[MessageQueue]) -> str | None:
        """Why a lock or unlock request cannot be served (None: it can)."""
        if not group or not client_id:
            return "consumerGroup and clientId are required"
        if len(queues) > LOCK_BATCH_QUEUES_MAX:
            return f"{len(queues)} queues in one request, at most {LOCK_BATCH_QUEUES_MAX}"
        return None
