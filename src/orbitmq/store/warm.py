"""Pre-faulting the commit log ahead of the writer.

A first store into a page of a fresh segment traps into the kernel (page cache allocation, the
file system's page_mkwrite): 5-40 us per 4 KiB page on this machine, paid by the event loop on
every append, about a fifth of a batch send's whole cost. ``PageWarmService`` keeps the next few
MiB of the last segment populated from its own thread, with the GIL released (see
``OsRegion.populate``), so the writer finds its pages mapped. RocketMQ warms a whole segment
when it creates it; warming a window ahead keeps the broker's resident size small.

Under SYNC_FLUSH the window is also made durable as it is warmed (zeros, synced from this
thread), and kept small. A segment is allocated with ``fallocate``, its blocks *unwritten*: the
first sync of data in such a block also has the file system record the block as written, a
second write inside the same ``fdatasync``. A lone producer's send paid it once per 4 KiB page;
with the window synced ahead each send's sync writes its page and nothing else (one SYNC_FLUSH
broker with and one without, 8 alternated rounds of 5,000 sends one at a time after `make
bench`'s other publishing: p50 225.5 -> 184.5 us, p90 374 -> 269, broker CPU a send 168 -> 147
us). Only while the writer is slow, below ``SYNC_AHEAD_RATE_MAX_MB_S``: many producers' sends
share each sync, which then records the blocks once for the whole group, and zeroing ahead of
them too wrote 1.6x the bytes and took a fifth off their throughput.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from orbitmq.store.commit_log import CommitLog
from orbitmq.store.hot_pages import HotPages
from orbitmq.store.mapped_file import MappedFile
from orbitmq.store.service import ServiceThread

__all__ = ["PageWarmService"]

log = logging.getLogger(__name__)

STEP = 256 * 1024  # per populate call: a flush waiting on the segment's lock waits ~50 us at most
AHEAD = 8 * 1024 * 1024  # the window under ASYNC_FLUSH
SYNC_AHEAD = 1024 * 1024  # the window under SYNC_FLUSH: a lone producer's ~0.2 s of sends
SYNC_AHEAD_RATE_MAX_MB_S = 16  # faster appends skip the synced window (module docstring)
# ASYNC_FLUSH: hot memory (HotPages) supplied this far past the window, the fault readahead's
# reach here (read_ahead_kb 8192: a populate allocates folios up to 8 MiB past its range)
HOT_LEAD = 8 * 1024 * 1024


class PageWarmService(ServiceThread):
    """Keeps ``ahead`` bytes after the commit log's wrote position faulted in.

    The appender calls ``wakeup_if_waiting`` once its position passes ``wake_at`` (an int
    comparison per put); the service then warms up to ``ahead`` bytes past the position. It
    stops trying for good when the region cannot populate (not Linux 5.14+, or a simulated disk).

    Under ASYNC_FLUSH each round first has ``HotPages`` supply as much memory as the window
    and the readahead past it (``HOT_LEAD``) will take, and no more than that since the last
    round (see orbitmq.store.hot_pages). SYNC_FLUSH keeps the segment in 4 KiB pages, which
    the allocator takes from smaller free blocks, and does without.

    ``sync_ahead`` (SYNC_FLUSH): the window (``ahead``) is ``SYNC_AHEAD`` unless given, each
    step synced once populated (MappedFile.sync_apart), while the writer appends below
    ``SYNC_AHEAD_RATE_MAX_MB_S``; ``before_warm`` runs first each round (SmallFolios.check:
    the segment's pages advised to stay 4 KiB, so that a send's sync writes only its page, and
    a descriptor held for them).
    """

    def __init__(self, commit_log: CommitLog, ahead: int | None = None, *,
                 sync_ahead: bool = False, before_warm: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__("orbitmq-warm-commitlog", 1.0)
        self.commit_log = commit_log
        self.sync_ahead = sync_ahead
        self.ahead = ahead if ahead is not None else SYNC_AHEAD if sync_ahead else AHEAD
        self._before_warm = before_warm
        self._clock = clock
        self.enabled = True
        self.wake_at = 0  # global commit log offset past which the appender should wake us
        self._mf: MappedFile | None = None
        self._warm_to = 0  # position in _mf populated up to
        self._seen: tuple[float, int] | None = None  # (clock, commit log end) at the last round
        self._hot = None if sync_ahead else HotPages()
        self._hot_to = 0  # position in _mf up to which hot memory was supplied

    def run_once(self) -> None:
        files = self.commit_log.mfq.files
        if not self.enabled or not files:
            return
        if self._before_warm is not None:
            self._before_warm()
        mf = files[-1]
        if mf is not self._mf:
            self._mf, self._warm_to = mf, mf.wrote_position
            self._hot_to = mf.wrote_position
        else:
            self._warm_to = max(self._warm_to, mf.wrote_position)  # none behind the writer
            self._hot_to = max(self._hot_to, mf.wrote_position)
        if self.sync_ahead and self._fast(mf.file_from_offset + mf.wrote_position):
            # look again a few windows on: syncing zeros ahead would cost this writer
            self.wake_at = mf.file_from_offset + min(mf.wrote_position + 8 * self.ahead,
                                                     mf.file_size)
            return
        target = min(mf.wrote_position + self.ahead, mf.file_size)
        if self._hot is not None and self._warm_to < target:
            hot_target = min(target + HOT_LEAD, mf.file_size)
            if self._hot_to < hot_target:
                self._hot_to += self._hot.supply(hot_target - self._hot_to)
        while self._warm_to < target and not self._stopped:
            end = min(self._warm_to + STEP, target)
            if not mf.populate(self._warm_to, end):
                if not mf.destroyed:
                    log.info("commit log pre-faulting unavailable; appends fault pages themselves")
                    self.enabled = False
                return
            if self.sync_ahead and not mf.sync_apart():
                return  # no descriptor held for the writer, or the segment went: next round
            self._warm_to = end
        # wake again when half the window is used, or at once when the segment is done
        self.wake_at = mf.file_from_offset + (
            self._warm_to - self.ahead // 2 if self._warm_to < mf.file_size else mf.file_size
        )

    def _fast(self, end: int) -> bool:
        """Whether the commit log grew faster than SYNC_AHEAD_RATE_MAX_MB_S since the last
        round (not at the first one)."""
        now = self._clock()
        seen, self._seen = self._seen, (now, end)
        if seen is None or now <= seen[0]:
            return False
        return (end - seen[1]) / (now - seen[0]) > SYNC_AHEAD_RATE_MAX_MB_S * 1024 * 1024
