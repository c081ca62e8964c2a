"""Cutting a running replica's commit log back to an offset (controller mode: a follower drops
the bytes past where its log agrees with its new master's, docs/failover.md).

The offline tool (truncate.py) needs the broker stopped; a failover cannot wait for an operator.
A replica takes no puts, only its master's frames, so the cut runs with the store's writers held:
under the dispatcher's lock (no dispatch round runs) and the commit log's put lock (no frame is
appended), in that order (the order delete_topics takes them):

1. dispatch everything appended so far, so that queues and index cover the whole log;
2. find the last entry boundary at or below the offset (log_cut.entry_boundary_at_or_below);
3. cut the commit log there (its append mark too: the next frame starts at the cut); every
   consume queue keeps only its entries below the cut; the index forgets entries at or past it;
   the dispatch position and each queue's next offset follow;
4. write the checkpoint, so that a crash right after restarts from the cut state.

Readers holding views of a deleted segment keep them (the mapped file queue unmaps it once they
let go), as with retention.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from orbitmq.store.commit_log import CommitLog
from orbitmq.store.consume_queue import ConsumeQueue
from orbitmq.store.dispatch import DispatchService
from orbitmq.store.log_cut import TruncateReport, entry_boundary_at_or_below
from orbitmq.store.recovery import entry_checker

__all__ = ["truncate_running_replica"]

log = logging.getLogger(__name__)


def truncate_running_replica(
    commit_log: CommitLog,
    dispatcher: DispatchService,
    consume_queue_table: dict[tuple[str, int], ConsumeQueue],
    truncate_index_after: Callable[[int], object] | None,
    checkpoint: Callable[[], object],
    store_path: str,
    offset: int,
) -> TruncateReport:
    """Cut a running replica's log at ``offset`` (see the module docstring): the store's parts
    (``truncate_index_after``: the index's, None without an index; ``checkpoint``: the consume
    queues' flush and checkpoint). The store checks that it is a running replica and that the
    offset is not negative (MessageStore.truncate_replica)."""
    clog = commit_log
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
            clog.appends_cut_at(cut)
            for cq in list(consume_queue_table.values()):
                cq.recover(cut, entry_checker(clog, cq))
            if truncate_index_after is not None:
                truncate_index_after(cut)
            dispatcher.reput_offset = min(dispatcher.reput_offset, cut)
            clog.topic_queue_table = {key: cq.max_offset
                                      for key, cq in consume_queue_table.items()}
    checkpoint()
    log.warning("replica commit log cut path=%s from=%d to=%d messages_dropped=%d",
                store_path, old_end, cut, dropped)
    return TruncateReport(offset, cut, old_end, clog.max_offset, dropped)
