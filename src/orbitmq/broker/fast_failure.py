"""Broker busy, as RocketMQ says it: SYSTEM_BUSY for sends that waited too long in the broker.

RocketMQ's broker queues sends for a thread pool and its BrokerFastFailure answers SYSTEM_BUSY
to those that waited longer than ``waitTimeMillsInSendQueue`` (200 ms), and to all that wait
while a put has held the commit log's lock past ``osPageCacheBusyTimeOutMills`` (1000 ms), so
that producers back off and retry elsewhere instead of timing out. OrbitMQ's sends wait in
one place before they are handled: behind the event loop, which reads, stores and answers them
(the puts run on it, under the commit log's lock). A tick every TICK_S marks the loop as
running; a send read ``waited`` seconds after the last tick (less one tick) was held that long
by a loop that could not run (a long sync, a page fault on the mapped log, a stall of the
host): past ``wait_time_mills_in_send_queue`` it is answered
``[TIMEOUT_CLEAN_QUEUE]broker busy, ...``, past ``os_page_cache_busy_time_out_mills``
``[PCBUSY_CLEAN_QUEUE]broker busy, ...``, both SYSTEM_BUSY (2), counted in the metrics
(``orbitmq_limit_hits_total{limit="send_queue_wait"|"page_cache_busy"}``) and logged once per
stall (at most one line in 10 s). A send costs one subtraction and one comparison (the read's time is the connection's).
The native fast path declines the sends of such a read, so that this path answers them.
"""

from __future__ import annotations

import asyncio
import logging
import time

from orbitmq.protocol.codes import ResponseCode
from orbitmq.rate_limited_log import RateLimitedLog
from orbitmq.transport.limits import LimitCounters

__all__ = ["BrokerFastFailure", "TICK_S"]

log = logging.getLogger(__name__)

TICK_S = 0.01  # RocketMQ cleans its queues every 10 ms


class BrokerFastFailure:
    """Tells a send read after a stall of the broker's loop, and what to answer it.

    Args:
        wait_ms: ``wait_time_mills_in_send_queue``: the longest a send may have waited.
        page_cache_busy_ms: ``os_page_cache_busy_time_out_mills``: a stall at least this long
            is the page cache's (the puts', which hold the loop) and says so.
        counters: where refusals are counted (the broker server's limit counters).
    """

    def __init__(self, wait_ms: int, page_cache_busy_ms: int, counters: LimitCounters) -> None:
        self.wait_s = wait_ms / 1000
        self.page_cache_busy_s = page_cache_busy_ms / 1000
        # A send read this long after the last tick waited past wait_s (one tick is the
        # loop's ordinary lateness).
        self.threshold_s = self.wait_s + TICK_S
        self.last_tick = time.monotonic()
        self._counters = counters
        self._log = RateLimitedLog(log)
        self._refused_in_stall = 0
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._tick()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop = None

    def _tick(self) -> None:
        self.last_tick = time.monotonic()
        self._refused_in_stall = 0
        if self._loop is not None:
            self._timer = self._loop.call_later(TICK_S, self._tick)

    def busy(self, read_at: float) -> bool:
        """Whether a send read at ``read_at`` (time.monotonic) waited too long."""
        return read_at - self.last_tick > self.threshold_s

    def refusal(self, read_at: float) -> tuple[ResponseCode, str] | None:
        """SYSTEM_BUSY and RocketMQ's remark for a send read at ``read_at`` that waited too
        long, else None."""
        waited = read_at - self.last_tick - TICK_S
        if waited <= self.wait_s:
            return None
        self._refused_in_stall += 1
        page_cache = waited >= self.page_cache_busy_s
        prefix, limit = (("[PCBUSY_CLEAN_QUEUE]", "page_cache_busy") if page_cache
                         else ("[TIMEOUT_CLEAN_QUEUE]", "send_queue_wait"))
        self._counters.hit(limit)
        self._log.warning(limit, "broker busy: a send waited %.0f ms (%s %d ms): answered "
                          "SYSTEM_BUSY %s", waited * 1000,
                          "os_page_cache_busy_time_out_mills" if page_cache
                          else "wait_time_mills_in_send_queue",
                          (self.page_cache_busy_s if page_cache else self.wait_s) * 1000, prefix)
        return ResponseCode.SYSTEM_BUSY, (
            f"{prefix}broker busy, start flow control for a while, period in queue: "
            f"{waited * 1000:.0f}ms, size of queue: {self._refused_in_stall}")
