"""A blocking, durable put on a bare MessageStore, for tests and tools (the broker saves through
its durable-save seam instead, without blocking its loop).

It is the store's one put and its one durability wait, composed as the store's docstring shows:
append, ask for "durable up to the end of it", run the round in this thread (``wake``), wait.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence

from orbitmq.protocol.stored import EncodedBatch
from orbitmq.store import MessageInner, MessageStore, PutMessageResult, PutMessageStatus

__all__ = ["put_durably"]


def put_durably(store: MessageStore, batch: Sequence[MessageInner] | EncodedBatch,
                timeout_s: float | None = None) -> PutMessageResult:
    """``store.put(batch)``, returned once the bytes are synced: PUT_OK, or FLUSH_DISK_TIMEOUT
    when the sync failed or did not come within ``timeout_s`` (default: the store's
    ``sync_flush_timeout_ms``); a refused put is returned as the store refused it."""
    result = store.put(batch)
    if result.append is None or result.status is not PutMessageStatus.PUT_OK:
        return result
    synced = store.durable_up_to(result.append.end_offset)
    store.wake()
    wait_s = store.config.sync_flush_timeout_ms / 1000 if timeout_s is None else timeout_s
    try:
        durable = synced.result(wait_s)
    except concurrent.futures.TimeoutError:
        durable = False
    if not durable:
        result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
    return result
