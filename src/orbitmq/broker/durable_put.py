"""Puts the broker makes on its own behalf (delayed deliveries, retries, dead letters).

The store appends at once and, under SYNC_FLUSH, hands back a future that completes when the
group commit has made the append durable. Broker services run on the event loop, so they must
never block on that future: they await it here, bounded, and report a flush that did not come in
time as FLUSH_DISK_TIMEOUT (the message is appended all the same, as for a client's send).
"""

from __future__ import annotations

import asyncio

from orbitmq.store.message_inner import MessageInner
from orbitmq.store.message_store import MessageStore
from orbitmq.store.status import PutMessageResult, PutMessageStatus

__all__ = ["put_durably", "wait_flushed", "APPENDED"]

# Statuses after which the message is in the commit log (durable or about to be).
APPENDED = frozenset({PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT})


async def wait_flushed(result: PutMessageResult, timeout_s: float) -> PutMessageResult:
    """``result`` once its flush future (if any) completed; FLUSH_DISK_TIMEOUT when it did not
    within ``timeout_s`` seconds or reported failure."""
    future = result.flush_future
    if future is None:
        return result
    try:
        durable = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
    except TimeoutError:
        durable = False
    if not durable and result.status is PutMessageStatus.PUT_OK:
        result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
    return result


async def put_durably(store: MessageStore, msg: MessageInner, timeout_s: float) -> PutMessageResult:
    """Append one message without blocking the loop; durable under SYNC_FLUSH when it returns
    PUT_OK."""
    return await wait_flushed(store.put_messages([msg], wait_flush=False), timeout_s)
