"""Cutting a stopped store's commit log back to an offset: the operator's command
(``orbitmq store truncate --store DIR --offset N``) for a slave whose log holds bytes its master
does not have (it was promoted by hand and then demoted), which refuses to replicate until then.

Nothing here runs on its own: a slave never truncates itself (a later failover design does that
with epochs). The steps, under the store's directory lock (the broker must be stopped):

1. find the last entry boundary at or below ``offset`` (walking the entries of its segment from
   the segment's start), so that the log ends between two whole messages;
2. cut the commit log there (the rest of that segment zeroed, later segments deleted);
3. lower the checkpoint to the cut, so that the next start's recovery drops every consume queue
   and index entry at or past it (see recovery.py);
4. start and stop the store once (without its threads): recovery runs now, and the report says
   what the store holds afterwards.
"""

from __future__ import annotations

import logging
import os

from orbitmq.config import StoreConfig
from orbitmq.errors import ClientError
from orbitmq.store.log_cut import TruncateReport, entry_boundary_at_or_below
from orbitmq.store.message_store import MessageStore  # its start runs recovery

__all__ = ["TruncateReport", "truncate_store", "entry_boundary_at_or_below"]

log = logging.getLogger(__name__)


def truncate_store(config: StoreConfig, offset: int) -> TruncateReport:
    """Cut the stopped store at ``config.store_path`` back to ``offset`` (see the module
    docstring).

    Raises:
        StoreLockedError: a broker (or another tool) has the store open.
        StoreError: the store's files are unusable.
        ClientError: a negative offset, or no store at the path.
    """
    if offset < 0:
        raise ClientError(f"offset must not be negative, got {offset}")
    if not os.path.isdir(os.path.join(config.store_path, "commitlog")):
        raise ClientError(f"no commit log under {config.store_path}: not a store directory")
    store = MessageStore(config, run_threads=False)
    store.start()  # locks the directory; recovery: the log ends where its valid data ends
    try:
        clog = store.commit_log
        old_end = clog.max_offset
        cut, dropped = entry_boundary_at_or_below(clog.mfq, offset)
        if cut < old_end:
            clog.mfq.truncate(cut)
            # The checkpoint written at shutdown then says the queues and index are good up
            # to the cut only: the next start's recovery drops their entries past it.
            with store.dispatcher.lock:
                store.dispatcher.reput_offset = cut
            log.warning("commit log truncated by the operator path=%s from=%d to=%d "
                        "messages_dropped=%d", config.store_path, old_end, cut, dropped)
    finally:
        store.shutdown()
    if cut >= old_end:
        return TruncateReport(offset, cut, old_end, old_end, 0)
    reopened = MessageStore(config, run_threads=False)
    reopened.start()  # recovery drops the queue and index entries past the cut
    try:
        new_end = reopened.max_physical_offset()
    finally:
        reopened.shutdown()
    return TruncateReport(offset, cut, old_end, new_end, dropped)
