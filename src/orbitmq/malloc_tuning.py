"""glibc malloc thresholds for processes that handle buffers of megabytes: the servers, whose
requests carry them, and Spark's Python workers reading pull bodies (spark/ship.py).

A buffer over glibc's mmap threshold (128 KiB at start, moved up at run time to the largest one
freed) gets pages of its own from the kernel and gives them back when freed, and the heap gives
back whatever is free at its top beyond the trim threshold (twice that). A broker holds several
such buffers at once per request (a transaction batch of up to 4 MiB: the frame, its body, the
stored form, the half message), so the pages of each came from the kernel anew, were faulted in
and zeroed, and went back: in ``perf`` of a broker taking transaction batches, 14 % of the
samples were page faults and 3 % zeroing. Taking a batch of 2,048 rows cost the broker 3.1-6.6 us
a row of CPU, 2.8-3.0 with the thresholds below (commits 4.2-4.7 and 3.6-4.2).

Fixed thresholds keep buffers up to ``MMAP_THRESHOLD_BYTES`` (a whole frame, ``max_frame_size``'s
default) in the heap, whose freed memory the next request reuses, and let the heap keep up to
``TRIM_THRESHOLD_BYTES`` free at its top: that much more resident memory at most, for no page
faults in steady state. Settings the operator made (``MALLOC_*_`` variables, glibc tunables) are
left as they are. Set once per process: later calls return the first answer.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "tune_malloc"]

log = logging.getLogger(__name__)

MMAP_THRESHOLD_BYTES = 16 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 32 * 1024 * 1024
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_OPERATOR_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


@functools.cache
def tune_malloc() -> bool:
    """Set the thresholds for this process (a server's, at start); True when glibc took them.
    False, changing nothing, off Linux, without glibc's ``mallopt``, or when the environment
    already says how malloc should behave."""
    if not sys.platform.startswith("linux") or any(os.environ.get(v) for v in _OPERATOR_SETTINGS):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = (mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
            and mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1)
    log.debug("malloc thresholds %s", "set" if done else "not taken by this libc")
    return done
