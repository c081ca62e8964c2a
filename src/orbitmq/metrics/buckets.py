"""Histograms kept as plain integers: what a hot path can afford to update.

A :class:`Buckets` is a fixed list of upper bounds and one count per bound (plus one for values
above the last), a running sum and a total count. ``observe`` is one ``bisect`` and three
integer additions, with no lock: each histogram is updated from one thread only (the event loop,
or the store's flush thread for the flush histograms), and a scrape that reads it while it moves
sees counts at most one observation apart, which a monitoring system cannot tell from a scrape a
microsecond earlier.

The Prometheus side (cumulative ``le`` buckets) is built from these at scrape time by
:func:`orbitmq.metrics.families.histogram_family`.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence

__all__ = [
    "Buckets",
    "MESSAGE_SIZE_BOUNDS_BYTES",
    "RPC_LATENCY_BOUNDS_MS",
    "FLUSH_LATENCY_BOUNDS_MS",
]

# RocketMQ 5's rocketmq_message_size buckets: 1 KiB, 4 KiB, 512 KiB, 1, 2 and 4 MiB.
MESSAGE_SIZE_BOUNDS_BYTES: tuple[float, ...] = (
    1024.0, 4096.0, 512 * 1024.0, 1024 * 1024.0, 2 * 1024 * 1024.0, 4 * 1024 * 1024.0)
# RocketMQ 5's rocketmq_rpc_latency buckets (1, 3, 5, 7, 10, 100 ms, 1, 2, 3 s), with three
# finer ones in front: a Python broker answers most requests well under a millisecond.
RPC_LATENCY_BOUNDS_MS: tuple[float, ...] = (
    0.1, 0.25, 0.5, 1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)
# One sync of the commit log: from a page-cache-backed tmpfs to a slow disk.
FLUSH_LATENCY_BOUNDS_MS: tuple[float, ...] = (
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0)


class Buckets:
    """Counts of observed values by upper bound; ``counts[-1]`` holds values above the last
    bound. Not cumulative: :meth:`cumulative` gives what Prometheus shows."""

    __slots__ = ("bounds", "counts", "total", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError("bucket bounds must be distinct and ascending")
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float, weight: int = 1) -> None:
        """Count ``value`` ``weight`` times (a batch of messages of one average size, or a
        sampled request standing for ``weight`` requests)."""
        self.counts[bisect_left(self.bounds, value)] += weight
        self.total += weight
        self.sum += value * weight

    def cumulative(self) -> list[tuple[float, int]]:
        """``(le, count of values <= le)`` for every bound, then ``(inf, all counted)``."""
        out: list[tuple[float, int]] = []
        running = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            out.append((float(bound), running))
        out.append((math.inf, running + self.counts[-1]))
        return out
