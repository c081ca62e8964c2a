"""The admin client's topic creation and update, by cluster or by broker address.

:meth:`AsyncAdmin.create_topic <orbitmq.client.AsyncAdmin.create_topic>` creates a topic
on every master of a cluster; RocketMQ's tools can also target chosen brokers (``mqadmin
updateTopic -b``), which ``orbitmq topic create --broker-addr`` offers through
:meth:`AsyncAdmin.create_topic_on_brokers`. Both check the settings here, once, and send the same
UPDATE_AND_CREATE_TOPIC to each broker concurrently.

On the wire that request creates or overwrites; so creation first asks each target whether it has
the topic and refuses (:class:`~orbitmq.errors.TopicExistsError`) when one does: a second
``create`` with other queue counts used to shrink a topic silently. :func:`update_topic` changes
an existing topic, keeping what is not given, and refuses to lower the read queue count below
queues that still hold unconsumed messages (:class:`~orbitmq.errors.QueuesNotDrainedError`): a
consumer only reads queues below the read count, so those messages would be hidden.

"Unconsumed" is measured against the slowest consumer group: a queue about to be hidden counts the
messages after the lowest offset any group committed on it (a group with offsets on the topic but
none on that queue, or no group at all, counts from the queue's first stored message). Groups
that keep offsets on the client (broadcasting) are not seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from orbitmq.client.admin import browse
from orbitmq.client.admin.core import AdminCore
from orbitmq.client.admin.models import TopicQueueStatus, parse_topic_stats
from orbitmq.client.validation import check_topic
from orbitmq.errors import (
    AccessDeniedError,
    ClientError,
    QueuesNotDrainedError,
    TopicExistsError,
    TopicNotFoundError,
)
from orbitmq.protocol.bodies import MessageQueue, Perm, QueueData
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.headers import (
    CreateTopicRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    GetTopicStatsInfoRequestHeader,
)

__all__ = ["QUEUE_NUMS_MAX", "topic_settings", "create_on", "create_new",
           "create_topic_on_brokers", "update_topic", "hidden_messages", "topic_status"]

QUEUE_NUMS_MAX = 1024  # RocketMQ's tools refuse more queues per broker


def topic_settings(topic: str, *, read_queue_nums: int, write_queue_nums: int, perm: int,
                   order: bool, attributes: str | None = None) -> CreateTopicRequestHeader:
    """The UPDATE_AND_CREATE_TOPIC header of these settings, checked.

    Raises:
        ClientError: a bad topic name or queue counts outside 1..1024.
    """
    check_topic(topic)
    if not (1 <= read_queue_nums <= QUEUE_NUMS_MAX and 1 <= write_queue_nums <= QUEUE_NUMS_MAX):
        raise ClientError(f"queue counts must be within 1..{QUEUE_NUMS_MAX}")
    return CreateTopicRequestHeader(topic, read_queue_nums=read_queue_nums,
                                    write_queue_nums=write_queue_nums, perm=perm, order=order,
                                    attributes=attributes or None)


async def create_on(core: AdminCore, addrs: Sequence[str],
                    header: CreateTopicRequestHeader) -> None:
    """Send UPDATE_AND_CREATE_TOPIC to every broker of ``addrs`` concurrently.

    Raises:
        BrokerError: a broker refused (the others may have the topic already: run again).
    """
    await asyncio.gather(*(core.broker_call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
                           for addr in addrs))


async def existing_on(core: AdminCore, topic: str, targets: Mapping[str, str]) -> list[str]:
    """The keys of ``targets`` (label -> broker address) whose broker has ``topic``, sorted.

    Each broker is asked (GET_TOPIC_STATS_INFO: the name servers learn of a topic only after
    the broker answered its creation). A user allowed to create a topic but not to read it is
    refused that question; the topic's route (any user may read it) answers for that broker.
    """
    header = GetTopicStatsInfoRequestHeader(topic)

    async def has(addr: str) -> bool | None:
        try:
            resp = await core.broker_call(addr, RequestCode.GET_TOPIC_STATS_INFO, header,
                                          ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST))
        except AccessDeniedError:
            return None
        return resp.code == ResponseCode.SUCCESS

    labels = list(targets)
    answers = await asyncio.gather(*(has(targets[k]) for k in labels))
    routed: set[str] = set()
    if None in answers:
        try:
            route = await core.topic_route(topic)
        except TopicNotFoundError:
            route = None
        if route is not None:
            names = {q.broker_name for q in route.queue_datas}
            routed = {a for bd in route.broker_datas if bd.broker_name in names
                      for a in bd.broker_addrs.values()}
    return sorted(k for k, found in zip(labels, answers, strict=True)
                  if found or (found is None and targets[k] in routed))


async def create_new(core: AdminCore, targets: Mapping[str, str],
                     header: CreateTopicRequestHeader, *, exist_ok: bool) -> None:
    """Create the topic of ``header`` on every broker of ``targets`` (label -> address).

    Raises:
        TopicExistsError: a target has the topic already and ``exist_ok`` is false (nothing was
            sent then). Another admin may still create it between the check and the creation.
        BrokerError: a broker refused.
    """
    if not exist_ok:
        found = await existing_on(core, header.topic, targets)
        if found:
            raise TopicExistsError(header.topic, found)
    await create_on(core, list(targets.values()), header)


def _checked_addrs(broker_addrs: Sequence[str]) -> list[str]:
    if isinstance(broker_addrs, str):
        broker_addrs = [broker_addrs]
    addrs = sorted({a.strip() for a in broker_addrs if a.strip()})
    if not addrs:
        raise ClientError("no broker address to act on")
    for addr in addrs:
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ClientError(f"broker address {addr!r} is not host:port")
    return addrs


async def create_topic_on_brokers(
    core: AdminCore,
    broker_addrs: Sequence[str],
    topic: str,
    *,
    read_queue_nums: int = 8,
    write_queue_nums: int = 8,
    perm: int = 6,
    order: bool = False,
    attributes: str | None = None,
    exist_ok: bool = False,
) -> list[str]:
    """Create ``topic`` on the brokers at ``broker_addrs`` (host:port each), whatever cluster
    they belong to; the addresses, sorted. ``attributes``: RocketMQ 5's modification text, e.g.
    ``+message.type=FIFO``. ``exist_ok``: overwrite the settings of a broker that has the topic
    already (the old create-or-update) instead of refusing.

    Raises:
        ClientError: no address, an address that is not host:port, or bad settings.
        TopicExistsError: a broker has the topic already (and not ``exist_ok``).
        BrokerError: a broker refused.
        ConnectionClosedError, TimeoutError: a broker could not be reached or did not answer.
    """
    addrs = _checked_addrs(broker_addrs)
    header = topic_settings(topic, read_queue_nums=read_queue_nums,
                            write_queue_nums=write_queue_nums, perm=perm, order=order,
                            attributes=attributes)
    await create_new(core, {a: a for a in addrs}, header, exist_ok=exist_ok)
    return addrs


async def _targets(core: AdminCore, cluster: str | None, broker_addrs: Sequence[str] | None,
                   route_masters: Mapping[str, str], names_of: Mapping[str, str]
                   ) -> list[tuple[str, str, str | None]]:
    """(label, address, broker name when known) of the brokers an update acts on."""
    if cluster is not None and broker_addrs:
        raise ClientError("give a cluster or broker addresses, not both")
    if broker_addrs:
        return [(a, a, names_of.get(a)) for a in _checked_addrs(broker_addrs)]
    masters = await core.masters(cluster) if cluster is not None else route_masters
    if not masters:
        raise ClientError("no master broker to update the topic on")
    return [(name, masters[name], name) for name in sorted(masters)]


async def _queue_offsets(core: AdminCore, addr: str, mq: MessageQueue) -> tuple[int, int]:
    """(min, max) offsets of one queue, asked of the broker at ``addr`` whatever the topic's
    current write queue count (GET_TOPIC_STATS_INFO lists only the writable queues)."""
    lo, hi = await asyncio.gather(
        core.broker_call(addr, RequestCode.GET_MIN_OFFSET,
                         GetMinOffsetRequestHeader(mq.topic, mq.queue_id)),
        core.broker_call(addr, RequestCode.GET_MAX_OFFSET,
                         GetMaxOffsetRequestHeader(mq.topic, mq.queue_id)))
    return (GetMinOffsetResponseHeader.from_ext_fields(lo.ext_fields).offset,
            GetMaxOffsetResponseHeader.from_ext_fields(hi.ext_fields).offset)


async def hidden_messages(core: AdminCore, topic: str,
                          shrinks: Sequence[tuple[str, str, int, int]]
                          ) -> list[tuple[str, int, int]]:
    """(broker name, queue id, unconsumed messages) of each queue that lowering the read queue
    count would hide and that still holds messages the slowest group has not consumed.
    ``shrinks``: (broker name, address, new read count, current read count)."""
    queues = [(MessageQueue(topic, name, qid), addr)
              for name, addr, new, cur in shrinks for qid in range(new, cur)]
    if not queues:
        return []
    offsets, ends = await asyncio.gather(
        browse.committed_offsets(core, topic),
        asyncio.gather(*(_queue_offsets(core, addr, mq) for mq, addr in queues)))
    out = []
    for (mq, _addr), (lo, hi) in zip(queues, ends, strict=True):
        slowest = min((g.get(mq, lo) for g in offsets.values()), default=lo)
        unread = hi - max(lo, slowest)
        if unread > 0:
            out.append((mq.broker_name, mq.queue_id, unread))
    return out


async def update_topic(
    core: AdminCore,
    topic: str,
    *,
    cluster: str | None = None,
    broker_addrs: Sequence[str] | None = None,
    read_queue_nums: int | None = None,
    write_queue_nums: int | None = None,
    perm: int | None = None,
    order: bool | None = None,
    attributes: str | None = None,
    force: bool = False,
) -> list[str]:
    """Change settings of the existing ``topic``; what is None keeps each broker's current value.
    Acts on the masters that have the topic, or on those of ``cluster``, or on ``broker_addrs``.
    Returns the broker names (addresses for ``broker_addrs``), sorted.

    Lowering the read queue count is refused (unless ``force``) while a queue it would hide holds
    messages the slowest group has not consumed, or when the read count would fall below the
    write count (producers would fill queues nobody reads): see the module docstring.

    Raises:
        TopicNotFoundError: no route for the topic (create it first).
        QueuesNotDrainedError: the shrink above; nothing was changed.
        ClientError: bad settings or targets. BrokerError: a broker refused.
    """
    route = await core.topic_route(topic)
    current = {q.broker_name: q for q in route.queue_datas}
    if not current:
        raise ClientError(f"topic {topic} has no queues on any broker")
    fallback = current[min(current)]
    names_of = {a: bd.broker_name for bd in route.broker_datas for a in bd.broker_addrs.values()}
    route_masters = {bd.broker_name: bd.broker_addrs[0] for bd in route.broker_datas
                     if 0 in bd.broker_addrs and bd.broker_name in current}
    targets = await _targets(core, cluster, broker_addrs, route_masters, names_of)
    ordered = bool(route.order_topic_conf) if order is None else order
    plans: list[tuple[str, str, QueueData | None, CreateTopicRequestHeader]] = []
    for label, addr, name in targets:
        cur = current.get(name) if name is not None else None
        base = cur or fallback
        plans.append((label, addr, cur, topic_settings(
            topic,
            read_queue_nums=base.read_queue_nums if read_queue_nums is None else read_queue_nums,
            write_queue_nums=(base.write_queue_nums if write_queue_nums is None
                              else write_queue_nums),
            perm=base.perm & int(Perm.READ | Perm.WRITE) if perm is None else perm,
            order=ordered, attributes=attributes)))
    if not force:
        await _check_shrink(core, topic, plans)
    await asyncio.gather(*(core.broker_call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
                           for _label, addr, _cur, header in plans))
    return sorted(label for label, *_rest in plans)


async def _check_shrink(core: AdminCore, topic: str,
                        plans: Sequence[tuple[str, str, QueueData | None,
                                              CreateTopicRequestHeader]]) -> None:
    shrinks = [(cur.broker_name, addr, h.read_queue_nums, cur.read_queue_nums)
               for _label, addr, cur, h in plans
               if cur is not None and h.read_queue_nums < cur.read_queue_nums]
    if not shrinks:
        return
    for _label, _addr, cur, h in plans:
        if cur is not None and h.read_queue_nums < min(h.write_queue_nums, cur.read_queue_nums):
            raise QueuesNotDrainedError(topic, [], (
                f"{h.read_queue_nums} read queues would be fewer than the {h.write_queue_nums} "
                f"write queues of {topic} on {cur.broker_name}: producers would send to queues "
                f"{h.read_queue_nums}..{h.write_queue_nums - 1}, which no consumer reads"))
    hidden = await hidden_messages(core, topic, shrinks)
    if hidden:
        listed = ", ".join(f"{b} queue {q}: {n}" for b, q, n in hidden)
        raise QueuesNotDrainedError(topic, hidden, (
            f"lowering the read queues of {topic} would hide "
            f"{sum(n for *_bq, n in hidden)} unconsumed message(s) ({listed})"))


async def topic_status(core: AdminCore, topic: str) -> list[TopicQueueStatus]:
    """Per queue: min and max offsets and the store time of the last message."""
    _route, masters = await core.route_masters(topic)
    answers = await asyncio.gather(*(
        core.broker_call(addr, RequestCode.GET_TOPIC_STATS_INFO,
                         GetTopicStatsInfoRequestHeader(topic))
        for addr in masters.values()))
    out: list[TopicQueueStatus] = []
    for resp in answers:
        out.extend(parse_topic_stats(resp.body))
    return sorted(out, key=lambda s: s.queue)
