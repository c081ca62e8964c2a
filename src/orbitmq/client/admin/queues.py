"""Raw queue reads of the admin client: messages of one queue from an offset, and the offset of
a store time, read as RocketMQ's tools read (group ``TOOLS_CONSUMER``), never committing an
offset. Browsing, dead letters and the operations calls build on them."""

from __future__ import annotations

from orbitmq.client.admin.core import AdminCore
from orbitmq.client.consumer.pull_codec import build_pull_request, parse_pull_response
from orbitmq.client.results import PullStatus
from orbitmq.errors import ClientError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.headers import (
    SearchOffsetByTimestampRequestHeader,
    SearchOffsetByTimestampResponseHeader,
)
from orbitmq.protocol.message import MessageExt
from orbitmq.protocol.topics import TOOLS_CONSUMER_GROUP  # admin reads commit no offsets

__all__ = ["TOOLS_CONSUMER_GROUP", "PULL_BATCH", "PULLS_PER_QUEUE_MAX", "QUEUE_READ_MAX",
           "read_queue", "queue_messages", "queue_offset_at"]

PULL_BATCH = 32
PULLS_PER_QUEUE_MAX = 10_000  # a bound on one queue's read: 320,000 dead letters
QUEUE_READ_MAX = 10_000  # messages one queue_messages call returns at most


async def read_queue(core: AdminCore, addr: str, mq: MessageQueue, limit: int, *,
                     start: int = 0) -> list[MessageExt]:
    """Up to ``limit`` messages of one queue from offset ``start`` (its first when 0), without
    committing any offset."""
    offset = start
    out: list[MessageExt] = []
    for _ in range(PULLS_PER_QUEUE_MAX):
        cmd = build_pull_request(TOOLS_CONSUMER_GROUP, mq, offset, PULL_BATCH, "*", None)
        result = parse_pull_response(await core.invoke(addr, cmd), None)
        out.extend(result.messages)
        nxt = result.next_begin_offset
        if result.status is PullStatus.NO_NEW_MSG or nxt <= offset or len(out) >= limit:
            break
        offset = nxt
    return out[:limit]


async def queue_messages(core: AdminCore, mq: MessageQueue, start: int = 0,
                         limit: int = 32) -> list[MessageExt]:
    """Up to ``limit`` (at most QUEUE_READ_MAX) messages of one queue from offset ``start``,
    read without committing any offset."""
    if not 1 <= limit <= QUEUE_READ_MAX:
        raise ClientError(f"limit must be within 1..{QUEUE_READ_MAX}")
    addr = await core.broker_address(mq.broker_name)
    return [m for m in await read_queue(core, addr, mq, limit, start=start)
            if m.queue_offset >= start]


async def queue_offset_at(core: AdminCore, mq: MessageQueue, timestamp_ms: int) -> int:
    """SEARCH_OFFSET_BY_TIMESTAMP: the first offset of one queue stored at or after
    ``timestamp_ms`` (its max offset when none is)."""
    addr = await core.broker_address(mq.broker_name)
    header = SearchOffsetByTimestampRequestHeader(mq.topic, mq.queue_id, timestamp_ms)
    resp = await core.broker_call(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header)
    return SearchOffsetByTimestampResponseHeader.from_ext_fields(resp.ext_fields).offset
