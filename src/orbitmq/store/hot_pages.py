"""Freshly touched memory handed to the page cache just before the commit log's warming needs it.

Under ASYNC_FLUSH the page warming (``orbitmq.store.warm``) faults the next segment pages in, and
the kernel's fault readahead caches them in folios of up to 2 MiB (``read_ahead_kb`` permitting).
Each new folio is zeroed in one stretch inside the fault, with no point at which the scheduler
may run another thread on that CPU (a kernel without preemption). On a virtual machine whose
balloon hands free memory back to the host, a 2 MiB block free for more than a few seconds
costs that zeroing 20-40 ms instead of ~0.2: the host faults it in again 4 KiB at a time. The
event loop, runnable meanwhile, waits for that CPU when the other one is busy, and the delivery
p99 under load went to 15-30 ms.

``HotPages.supply`` has the warming's own thread pay that cost elsewhere first: it maps anonymous
memory of the size the page cache is about to take, asks for transparent huge pages on it,
writes it and unmaps it. The host faults that memory in too, but in pieces the scheduler can
come between: a fault per huge page, 5-10 ms each after an idle while, back in user space after
each. The page allocator hands the blocks just freed out first, so the folios the warming
faults in next are memory the host already holds. Measured from C, a thread sleeping 1 ms on
the same CPU while 512 MiB of a fresh file were faulted in, in 256 KiB steps after 15 s idle:
its longest wait went from 28-36 ms to 4-6 ms; the whole took as long (1.5-1.7 s: the same
host faults, paid once). In the broker, end to end at 50,000 msgs/s, the delivery p99 median
of 6 alternated runs went from 20.5 to 16.6 ms (docs/performance.md). Without a balloon it
costs an extra zeroing of memory already present.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os

from orbitmq.store.file_ops import mapping_address

__all__ = ["HotPages", "HUGE_PAGE"]

log = logging.getLogger(__name__)

HUGE_PAGE = 2 * 1024 * 1024  # the largest page cache folio and an x86-64 huge page
SUPPLY_STEP_MAX = HUGE_PAGE  # touched at once, then the CPU offered to the event loop
_MADV_HUGEPAGE: int | None = getattr(mmap, "MADV_HUGEPAGE", None)
_MAP_PRIVATE: int | None = getattr(mmap, "MAP_PRIVATE", None)


class HotPages:
    """Touches and frees anonymous memory so that the page cache's next folios are hot.

    ``supply`` returns the bytes it touched (whole huge pages), 0 once it turned out not to
    work here (no private anonymous maps); it never raises for lack of memory: the warming
    then faults cold memory in as it did without it.
    """

    def __init__(self) -> None:
        self.enabled = _MAP_PRIVATE is not None

    def supply(self, nbytes: int) -> int:
        """Touch, then free, ``nbytes`` rounded up to whole huge pages, in steps of at most
        ``SUPPLY_STEP_MAX``; the writes run without the GIL (``ctypes.memset``)."""
        if not self.enabled or nbytes <= 0:
            return 0
        total = -(-nbytes // HUGE_PAGE) * HUGE_PAGE
        done = 0
        while done < total:
            step = min(total - done, SUPPLY_STEP_MAX)
            if not self._touch_and_free(step):
                return done
            done += step
            os.sched_yield()
        return done

    def _touch_and_free(self, size: int) -> bool:
        assert size > 0 and size % HUGE_PAGE == 0, size
        assert _MAP_PRIVATE is not None
        try:
            # one huge page more, so that an aligned run of ``size`` fits inside
            mm = mmap.mmap(-1, size + HUGE_PAGE, flags=_MAP_PRIVATE)
        except (OSError, ValueError) as e:
            log.warning("hot pages for the commit log unavailable, err=%s", e)
            self.enabled = False
            return False
        try:
            addr = mapping_address(mm)
            start = -addr % HUGE_PAGE
            if _MADV_HUGEPAGE is not None:
                try:
                    mm.madvise(_MADV_HUGEPAGE, start, size)
                except OSError:  # no transparent huge pages: 4 KiB pages, touched all the same
                    pass
            ctypes.memset(addr + start, 0, size)
        finally:
            mm.close()
        return True
