"""Reading a cluster without changing it: messages by queue offset and by store time, and every
consumer group's committed offsets of a topic.

What a console or a monitoring script needs beside :class:`~orbitmq.client.admin.AsyncAdmin`'s
calls (which this module uses for routes and addresses). Each function takes a started
AsyncAdmin; none commits an offset or stores anything:

- :func:`read_queue`: up to ``limit`` messages of one queue from an offset (pulls under RocketMQ's
  admin group ``TOOLS_CONSUMER``, which commits nothing).
- :func:`search_offset`: SEARCH_OFFSET_BY_TIMESTAMP (29), the first queue offset stored at or after
  a time.
- :func:`messages_between`: the messages of a topic stored within a time range, oldest first.
- :func:`committed_offsets`: GET_ALL_CONSUMER_OFFSET (43) of the topic's brokers, group -> queue ->
  offset (the next message the group will consume), so that one can tell which groups consumed a
  message: those whose committed offset of its queue is past its queue offset.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from orbitmq.client import group_admin
from orbitmq.client.route import subscribe_queues_from_route
from orbitmq.client.validation import check_topic
from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol.bodies import MessageQueue, loads_lenient
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.headers import (
    SearchOffsetByTimestampRequestHeader,
    SearchOffsetByTimestampResponseHeader,
)
from orbitmq.protocol.message import MessageExt

if TYPE_CHECKING:
    from orbitmq.client.admin import AsyncAdmin

__all__ = [
    "read_queue",
    "search_offset",
    "messages_between",
    "committed_offsets",
    "consumed_by",
    "READ_LIMIT_MAX",
]

READ_LIMIT_MAX = 10_000  # messages one read may return: a bound on the memory of one answer


def _limit(limit: int) -> int:
    if not 1 <= limit <= READ_LIMIT_MAX:
        raise ClientError(f"limit must be within 1..{READ_LIMIT_MAX}, got {limit}")
    return limit


async def _master_of(admin: AsyncAdmin, mq: MessageQueue) -> str:
    _route, masters = await admin._route_masters(mq.topic)
    addr = masters.get(mq.broker_name)
    if addr is None:
        raise ClientError(f"topic {mq.topic!r} has no master on broker {mq.broker_name!r}")
    return addr


async def read_queue(admin: AsyncAdmin, mq: MessageQueue, offset: int, limit: int) -> list[MessageExt]:
    """Up to ``limit`` messages of ``mq`` from queue offset ``offset`` on (from its first message
    when ``offset`` is below it), in queue order."""
    if offset < 0:
        raise ClientError(f"a queue offset is not negative, got {offset}")
    addr = await _master_of(admin, mq)
    return await group_admin.read_queue(admin, addr, mq, _limit(limit), start=offset)


async def search_offset(admin: AsyncAdmin, mq: MessageQueue, timestamp_ms: int) -> int:
    """The first queue offset of ``mq`` stored at or after ``timestamp_ms`` (its max offset when
    none is)."""
    addr = await _master_of(admin, mq)
    header = SearchOffsetByTimestampRequestHeader(mq.topic, mq.queue_id, timestamp_ms)
    resp = await admin._broker(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header)
    return SearchOffsetByTimestampResponseHeader.from_ext_fields(resp.ext_fields).offset


async def _queue_between(admin: AsyncAdmin, addr: str, mq: MessageQueue, begin_ms: int,
                         end_ms: int, limit: int) -> list[MessageExt]:
    header = SearchOffsetByTimestampRequestHeader(mq.topic, mq.queue_id, begin_ms)
    resp = await admin._broker(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header)
    offset = SearchOffsetByTimestampResponseHeader.from_ext_fields(resp.ext_fields).offset
    out: list[MessageExt] = []
    while len(out) < limit:
        batch = await group_admin.read_queue(admin, addr, mq, group_admin.PULL_BATCH, start=offset)
        if not batch:
            break
        for msg in batch:
            if msg.store_timestamp > end_ms:
                return out
            if msg.store_timestamp >= begin_ms:
                out.append(msg)
        if batch[-1].queue_offset < offset:  # no progress: the queue moved under us
            break
        offset = batch[-1].queue_offset + 1
    return out[:limit]


async def messages_between(admin: AsyncAdmin, topic: str, begin_ms: int, end_ms: int,
                           limit: int, *, queue_id: int | None = None) -> list[MessageExt]:
    """Messages of ``topic`` (of one queue id when given) stored from ``begin_ms`` to ``end_ms``
    (both included), oldest first; at most ``limit``, the oldest kept when more are found."""
    check_topic(topic)
    if end_ms < begin_ms:
        raise ClientError(f"the range ends ({end_ms}) before it begins ({begin_ms})")
    limit = _limit(limit)
    route, masters = await admin._route_masters(topic)
    queues = [mq for mq in subscribe_queues_from_route(topic, route)
              if mq.broker_name in masters and (queue_id is None or mq.queue_id == queue_id)]
    found = await asyncio.gather(*(
        _queue_between(admin, masters[mq.broker_name], mq, begin_ms, end_ms, limit)
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


async def committed_offsets(admin: AsyncAdmin, topic: str) -> dict[str, dict[MessageQueue, int]]:
    """Group -> queue -> committed offset, for every group that committed one on ``topic``, over
    the masters of the topic's route."""
    check_topic(topic)
    _route, masters = await admin._route_masters(topic)
    names = sorted(masters)
    answers = await asyncio.gather(*(admin._broker(masters[n], RequestCode.GET_ALL_CONSUMER_OFFSET)
                                     for n in names))
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
