"""Cutting a running replica's commit log back to an offset (controller mode: a follower drops
the bytes past where its log agrees with its new master's, docs/failover.md).

The offline tool (truncate.py) needs the broker stopped; a failover cannot wait for an operator.
A replica takes no puts, only its master's frames, so the cut runs with the store's writers held:
under the dispatcher's lock (no dispatch round runs) and the commit log's put lock (no frame is
appended), in that order (the order delete_topics takes them):

1. dispatch everything appended so far, so that queues and index cover the whole log;
2. find the last entry boundary at or below the offset (truncate.entry_boundary_at_or_below);
3. cut the commit log there; every consume queue keeps only its entries below the cut; the index
   forgets entries at or past it; the dispatch position and each queue's next offset follow;
4. write the checkpoint, so that a crash right after restarts from the cut state.

Readers holding views of a deleted segment keep them (the mapped file queue unmaps it once they
let go), as with retention.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from orbitmq.errors import StoreError
from orbitmq.store.recovery import _entry_checker
from orbitmq.store.truncate import TruncateReport, entry_boundary_at_or_below

if TYPE_CHECKING:
    from orbitmq.store.message_store import MessageStore

__all__ = ["truncate_running_replica"]

log = logging.getLogger(__name__)


def truncate_running_replica(store: MessageStore, offset: int) -> TruncateReport:
    """Cut ``store`` (running, in replica mode) at ``offset`` (see the module docstring).

    Raises:
        StoreError: the store is not a running replica, or the offset is negative.
    """
    if not store.running or not store.replica:
        raise StoreError("only a running replica's log is cut while it runs")
    if offset < 0:
        raise StoreError(f"cannot cut a commit log at {offset}")
    dispatcher, clog = store.dispatcher, store.commit_log
    with dispatcher.lock:
        end = clog.max_offset
        if dispatcher.reput_offset < end:
            reached, _ = dispatcher.dispatch_to(dispatcher.reput_offset, end, None)
            dispatcher.reput_offset = reached
        with clog.put_lock:
            old_end = clog.max_offset
            cut, dropped = entry_boundary_at_or_below(clog.mfq, offset)
            if cut >= old_end:
                return TruncateReport(offset, old_end, old_end, old_end, 0)
            clog.mfq.truncate(cut)
            for cq in list(store.consume_queue_table.values()):
                cq.recover(cut, _entry_checker(clog, cq))
            if store.index is not None:
                store.index.truncate_after(cut)
            dispatcher.reput_offset = min(dispatcher.reput_offset, cut)
            clog.topic_queue_table = {key: cq.max_offset
                                      for key, cq in store.consume_queue_table.items()}
    store.flush_consume_queue.flush_and_checkpoint()
    log.warning("replica commit log cut path=%s from=%d to=%d messages_dropped=%d",
                store.config.store_path, old_end, cut, dropped)
    return TruncateReport(offset, cut, old_end, clog.max_offset, dropped)
