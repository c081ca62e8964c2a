"""Queue allocation strategies: which queues of a topic one member of a consumer group consumes.

Every member computes its own share from the same inputs (all queues of the topic and all client
ids of the group, both sorted by the caller), so the shares are disjoint and together cover every
queue without any coordination, as long as the members agree on the inputs and the strategy.
Pure functions of their inputs: unit-tested without servers.

==========================  =============================================================  =====
strategy                    share                                                         Java
==========================  =============================================================  =====
AllocateAveragely           contiguous blocks, the first ``len(mqs) % len(cids)`` clients  AVG
                            one queue more (the default)
AllocateAveragelyByCircle   every ``len(cids)``-th queue, starting at the client's index  AVG_BY_CIRCLE
AllocateByConfig            a fixed list of queues given to this client                   CONFIG
AllocateByMachineRoom       queues of brokers in this client's machine rooms              MACHINE_ROOM
                            (broker named ``room@name``), spread averagely
AllocateConsistentHash      each queue to the client owning the next point on a hash      CONSISTENT_HASH
                            ring of virtual nodes: few queues move when a client joins
==========================  =============================================================  =====
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from orbitmq.errors import ClientError
from orbitmq.protocol.bodies import MessageQueue

__all__ = [
    "AllocateStrategy",
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateByConfig",
    "AllocateByMachineRoom",
    "AllocateConsistentHash",
    "md5_hash",
    "machine_room_of",
]

log = logging.getLogger(__name__)


class AllocateStrategy(Protocol):
    """Chooses a client's share of a topic's queues."""

    name: str

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        """This client's queues; ``mq_all`` and ``cid_all`` sorted, ``current_cid`` in
        ``cid_all`` (else nothing is allocated)."""
        ...


def _index_of(group: str, current_cid: str, cid_all: Sequence[str]) -> int | None:
    try:
        return list(cid_all).index(current_cid)
    except ValueError:
        # The broker has not seen our heartbeat yet: consume nothing rather than overlap.
        log.info("group=%s client=%s not among the group's clients %s", group, current_cid, cid_all)
        return None


def _average_block(count: int, clients: int, index: int) -> range:
    """Positions of client ``index``'s contiguous block when ``count`` items are shared by
    ``clients``: the first ``count % clients`` clients take one item more."""
    base, extra = divmod(count, clients)
    size = base + (1 if index < extra else 0)
    start = index * base + min(index, extra)
    return range(start, start + size)


class AllocateAveragely:
    """Contiguous blocks of queues, as even as possible (RocketMQ's default, AVG)."""

    name = "AVG"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        index = _index_of(group, current_cid, cid_all)
        if index is None or not mq_all:
            return []
        return [mq_all[i] for i in _average_block(len(mq_all), len(cid_all), index)]


class AllocateAveragelyByCircle:
    """Queues dealt round robin: client ``i`` gets queues ``i, i + n, i + 2n, ...``."""

    name = "AVG_BY_CIRCLE"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        index = _index_of(group, current_cid, cid_all)
        if index is None:
            return []
        return list(mq_all[index::len(cid_all)])


class AllocateByConfig:
    """A fixed set of queues, whatever the group looks like (the operator keeps the clients'
    lists disjoint). Queues the topic does not have are left out."""

    name = "CONFIG"

    def __init__(self, queues: Iterable[MessageQueue]) -> None:
        self.queues = list(queues)

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        present = set(mq_all)
        return [mq for mq in self.queues if mq in present]


def machine_room_of(broker_name: str) -> str:
    """The machine room of a broker named ``room@name`` (a name without ``@`` is its own room)."""
    room, sep, _ = broker_name.partition("@")
    return room if sep else broker_name


class AllocateByMachineRoom:
    """Only queues of brokers in this client's machine rooms, spread averagely over the clients
    (every client of the group must be configured with the same rooms).

    Args:
        rooms: the rooms this client consumes; a broker's room is the part of its name before
            ``@`` (``hz@broker-a`` is in ``hz``), or its whole name when it has no ``@``.
    """

    name = "MACHINE_ROOM"

    def __init__(self, rooms: Iterable[str]) -> None:
        self.rooms = frozenset(rooms)
        if not self.rooms:
            raise ClientError("AllocateByMachineRoom needs at least one machine room")

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        index = _index_of(group, current_cid, cid_all)
        if index is None:
            return []
        mine = [mq for mq in mq_all if machine_room_of(mq.broker_name) in self.rooms]
        return [mine[i] for i in _average_block(len(mine), len(cid_all), index)]


def md5_hash(key: str) -> int:
    """The first four bytes of the key's MD5 as an unsigned number (RocketMQ's MD5Hash), so
    that Java and Python members of one group agree on the ring."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def _java_queue_key(mq: MessageQueue) -> str:
    """Java's MessageQueue.toString(), the key RocketMQ hashes a queue by."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


class AllocateConsistentHash:
    """Each queue goes to the client owning the first virtual node at or after the queue's hash
    on a ring (wrapping around). When a client joins or leaves, only the queues next to its
    nodes move.

    Args:
        virtual_nodes: points per client on the ring (RocketMQ: 10).
        hash_fn: string -> non-negative int (default :func:`md5_hash`, Java-compatible).
    """

    name = "CONSISTENT_HASH"

    def __init__(self, virtual_nodes: int = 10, hash_fn: Callable[[str], int] = md5_hash) -> None:
        if virtual_nodes < 1:
            raise ClientError(f"virtual_nodes must be >= 1, got {virtual_nodes}")
        self.virtual_nodes = virtual_nodes
        self.hash_fn = hash_fn

    def _ring(self, cid_all: Sequence[str]) -> tuple[list[int], list[str]]:
        points = sorted(
            (self.hash_fn(f"{cid}-{i}"), cid) for cid in cid_all for i in range(self.virtual_nodes)
        )
        return [p for p, _ in points], [c for _, c in points]

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if _index_of(group, current_cid, cid_all) is None or not mq_all:
            return []
        hashes, owners = self._ring(cid_all)
        mine = []
        for mq in mq_all:
            at = bisect.bisect_left(hashes, self.hash_fn(_java_queue_key(mq)))
            if owners[at % len(owners)] == current_cid:
                mine.append(mq)
        return mine
