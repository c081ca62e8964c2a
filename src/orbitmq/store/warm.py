"""Pre-faulting the commit log ahead of the writer.

A first store into a page of a fresh segment traps into the kernel (page cache allocation, the
file system's page_mkwrite): 5-40 us per 4 KiB page on this machine, paid by the event loop on
every append, about a fifth of a batch send's whole cost. ``PageWarmService`` keeps the next few
MiB of the last segment populated from its own thread, with the GIL released (see
``OsRegion.populate``), so the writer finds its pages mapped. RocketMQ warms a whole segment
when it creates it; warming a window ahead keeps the broker's resident size small.
"""

from __future__ import annotations

import logging

from orbitmq.store.commit_log import CommitLog
from orbitmq.store.mapped_file import MappedFile
from orbitmq.store.service import ServiceThread

__all__ = ["PageWarmService"]

log = logging.getLogger(__name__)

STEP = 256 * 1024  # per populate call: a flush waiting on the segment's lock waits ~50 us at most


class PageWarmService(ServiceThread):
    """Keeps ``ahead`` bytes after the commit log's wrote position faulted in.

    The appender calls ``wakeup_if_waiting`` once its position passes ``wake_at`` (an int
    comparison per put); the service then warms up to ``ahead`` bytes past the position. It
    stops trying for good when the region cannot populate (not Linux 5.14+, or a simulated disk).
    """

    def __init__(self, commit_log: CommitLog, ahead: int = 8 * 1024 * 1024) -> None:
        super().__init__("orbitmq-warm-commitlog", 1.0)
        self.commit_log = commit_log
        self.ahead = ahead
        self.enabled = True
        self.wake_at = 0  # global commit log offset past which the appender should wake us
        self._mf: MappedFile | None = None
        self._warm_to = 0  # position in _mf populated up to

    def run_once(self) -> None:
        files = self.commit_log.mfq.files
        if not self.enabled or not files:
            return
        mf = files[-1]
        if mf is not self._mf:
            self._mf, self._warm_to = mf, mf.wrote_position
        target = min(mf.wrote_position + self.ahead, mf.file_size)
        while self._warm_to < target and not self._stopped:
            end = min(self._warm_to + STEP, target)
            if not mf.populate(self._warm_to, end):
                if not mf.destroyed:
                    log.info("commit log pre-faulting unavailable; appends fault pages themselves")
                    self.enabled = False
                return
            self._warm_to = end
        # wake again when half the window is used, or at once when the segment is done
        self.wake_at = mf.file_from_offset + (
            self._warm_to - self.ahead // 2 if self._warm_to < mf.file_size else mf.file_size
        )
