"""Warnings a flood could repeat (a limit biting, a refused login): one line per kind and period,
the next one saying how many were left out, so a hostile client cannot fill the disk."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["RateLimitedLog", "LOG_EVERY_S"]

LOG_EVERY_S = 10.0  # one line per kind and this many seconds, with the count of the others


class RateLimitedLog:
    """Warnings of one kind, at most one line per ``every_s`` seconds each, the line after a
    quiet spell saying how many were left out."""

    def __init__(self, logger: logging.Logger, every_s: float = LOG_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._every_s = every_s
        self._clock = clock
        self._next: dict[str, float] = {}
        self._left_out: dict[str, int] = {}

    def warning(self, key: str, msg: str, *args: object) -> None:
        now = self._clock()
        if now < self._next.get(key, 0.0):
            self._left_out[key] = self._left_out.get(key, 0) + 1
            return
        self._next[key] = now + self._every_s
        left_out = self._left_out.pop(key, 0)
        if left_out:
            self._log.warning(msg + " (and %d more like it in the last %.0f s)",
                              *args, left_out, self._every_s)
        else:
            self._log.warning(msg, *args)


