"""Reading a cluster without changing it: messages by store time, and every consumer group's
committed offsets of a topic.

What a console or a monitoring script needs beside the other admin calls; :class:`AsyncAdmin
<orbitmq.client.AsyncAdmin>` offers them as ``messages_between`` and ``committed_offsets``. Each
coroutine here takes a started :class:`~orbitmq.client.admin.core.AdminCore`; none commits an
offset or stores anything:

- :func:`messages_between`: the messages of a topic stored within a time range, oldest first.
- :func:`committed_offsets`: GET_ALL_CONSUMER_OFFSET (43) of the topic's brokers, group -> queue ->
  offset (the next message the group will consume), so that one can tell which groups consumed a
  message: those whose committed offset of its queue is past its queue offset.
"""

from __future__ import annotations

import asyncio

from orbitmq.client.admin.core import AdminCore
from orbitmq.client.admin.queues import PULL_BATCH, QUEUE_READ_MAX, queue_messages, queue_offset_at
from orbitmq.client.route import subscribe_queues_from_route
from orbitmq.client.validation import check_topic
from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol.bodies import MessageQueue, loads_lenient
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.message import MessageExt

__all__ = ["messages_between", "committed_offsets", "consumed_by"]

def _limit(limit: int) -> int:
    if not 1 <= limit <= QUEUE_READ_MAX:
        raise ClientError(f"limit must be within 1..{QUEUE_READ_MAX}, got {limit}")
    return limit


async def _queue_between(core: AdminCore, mq: MessageQueue, begin_ms: int, end_ms: int,
                         limit: int) -> list[MessageExt]:
    offset = await queue_offset_at(core, mq, begin_ms)
    out: list[MessageExt] = []
    while len(out) < limit:
        batch = await queue_messages(core, mq, offset, PULL_BATCH)
        if not batch:
            break
        for msg in batch:
            if msg.store_timestamp > end_ms:
                return out
            if msg.store_timestamp >= begin_ms:
                out.append(msg)
        offset = batch[-1].queue_offset + 1
    return out[:limit]


async def messages_between(core: AdminCore, topic: str, begin_ms: int, end_ms: int,
                           limit: int, *, queue_id: int | None = None) -> list[MessageExt]:
    """Messages of ``topic`` (of one queue id when given) stored from ``begin_ms`` to ``end_ms``
    (both included), oldest first; at most ``limit``, the oldest kept when more are found."""
    check_topic(topic)
    if end_ms < begin_ms:
        raise ClientError(f"the range ends ({end_ms}) before it begins ({begin_ms})")
    limit = _limit(limit)
    route, masters = await core.route_masters(topic)
    queues = [mq for mq in subscribe_queues_from_route(topic, route)
              if mq.broker_name in masters and (queue_id is None or mq.queue_id == queue_id)]
    found = await asyncio.gather(*(
        _queue_between(core, mq, begin_ms, end_ms, limit)
        for mq in queues))
    merged = sorted((m for batch in found for m in batch),
                    key=lambda m: (m.store_timestamp, m.commit_log_offset))
    return merged[:limit]


def _parse_offsets(body: bytes, topic: str, broker_name: str) -> dict[str, dict[MessageQueue, int]]:
    """``{"offsetTable": {"topic@group": {"queueId": offset}}}`` -> group -> queue -> offset, for
    ``topic`` only."""
    data = loads_lenient(body or b"{}")
    table = data.get("offsetTable") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise RemoteProtocolError("consumer offsets: expected {\"offsetTable\": {...}}")
    out: dict[str, dict[MessageQueue, int]] = {}
    for key, queues in table.items():
        name, sep, group = str(key).partition("@")
        if not sep or name != topic or not isinstance(queues, dict):
            continue
        try:
            out[group] = {MessageQueue(topic, broker_name, int(qid)): int(offset)
                          for qid, offset in queues.items()}
        except (TypeError, ValueError):
            raise RemoteProtocolError(f"consumer offsets of {key!r} are not numbers") from None
    return out


async def committed_offsets(core: AdminCore, topic: str) -> dict[str, dict[MessageQueue, int]]:
    """Group -> queue -> committed offset, for every group that committed one on ``topic``, over
    the masters of the topic's route."""
    check_topic(topic)
    _route, masters = await core.route_masters(topic)
    names = sorted(masters)
    answers = await asyncio.gather(*(
        core.broker_call(masters[n], RequestCode.GET_ALL_CONSUMER_OFFSET) for n in names))
    merged: dict[str, dict[MessageQueue, int]] = {}
    for name, resp in zip(names, answers, strict=True):
        for group, queues in _parse_offsets(bytes(resp.body or b""), topic, name).items():
            merged.setdefault(group, {}).update(queues)
    return dict(sorted(merged.items()))


def consumed_by(offsets: dict[str, dict[MessageQueue, int]], mq: MessageQueue,
                queue_offset: int) -> dict[str, bool]:
    """For each group of ``offsets`` (see :func:`committed_offsets`) that has an offset on ``mq``:
    whether it consumed the message at ``queue_offset`` (its committed offset is past it)."""
    return {group: queues[mq] > queue_offset
            for group, queues in offsets.items() if mq in queues}
