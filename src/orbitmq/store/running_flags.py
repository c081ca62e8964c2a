"""Why the store refuses puts right now: RocketMQ's RunningFlags, each with the reason and a remark.

A put is refused (SERVICE_NOT_AVAILABLE with the remark of the first reason) while any condition
holds: the disk is above ``disk_space_warning_level_ratio`` (the clean service measures it), a new
commit log segment found no space, consume queue or index writes are waiting for space (dispatch
is stalled), or the last sync of the commit log failed. Each condition is lifted by whoever raised
it once the cause is gone, so the store takes puts again without a restart.

Conditions are logged at ERROR when they appear, then at most once every ``LOG_INTERVAL_S`` while
they persist (with how often they recurred), and at WARNING when they end: loud, not spamming.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable

from orbitmq.store.file_ops import SPACE_ERRNOS, StoreSpaceError

__all__ = ["Condition", "RunningFlags", "RetryGate", "PutGuard", "stall_remark",
           "segment_failed_remark", "LOG_INTERVAL_S", "RETRY_INTERVAL_S"]

log = logging.getLogger(__name__)

LOG_INTERVAL_S = 30.0  # the most often a persisting condition is logged again
RETRY_INTERVAL_S = 1.0  # between two tries of an operation that failed for want of space


class Condition(enum.Enum):
    """A reason to refuse puts (RocketMQ's DISK_FULL and WRITE_*_ERROR bits)."""

    DISK_RATIO = "disk_ratio"  # used space above disk_space_warning_level_ratio
    COMMIT_LOG_SPACE = "commit_log_space"  # a new commit log segment could not be allocated
    DISPATCH_STALLED = "dispatch_stalled"  # consume queue / index writes wait for space
    FLUSH_FAILED = "flush_failed"  # the last sync of the commit log failed


class _Active:
    __slots__ = ("remark", "since", "logged_at", "repeats")

    def __init__(self, remark: str, now: float) -> None:
        self.remark = remark
        self.since = now
        self.logged_at = now
        self.repeats = 0


class RunningFlags:
    """The conditions holding now. ``remark`` is read on every put: None while writable.

    Args:
        monotonic: the clock of log intervals and retry times (a fake in tests).
    """

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._active: dict[Condition, _Active] = {}
        self.remark: str | None = None  # of the first active condition (in Condition order)

    def raise_(self, condition: Condition, remark: str) -> None:
        """Hold ``condition`` (again); ``remark`` tells a refused client why."""
        now = self.monotonic()
        with self._lock:
            found = self._active.get(condition)
            if found is None:
                self._active[condition] = _Active(remark, now)
                log.error("store refuses puts condition=%s reason=%s", condition.value, remark)
            else:
                found.remark = remark
                found.repeats += 1
                if now - found.logged_at >= LOG_INTERVAL_S:
                    log.error("store still refuses puts condition=%s for=%.0fs recurred=%d reason=%s",
                              condition.value, now - found.since, found.repeats, remark)
                    found.logged_at, found.repeats = now, 0
            self._update()

    def clear(self, condition: Condition) -> None:
        """``condition`` no longer holds (cheap when it did not)."""
        if condition not in self._active:
            return
        with self._lock:
            found = self._active.pop(condition, None)
            if found is not None:
                log.warning("store condition ended condition=%s after=%.1fs",
                            condition.value, self.monotonic() - found.since)
            self._update()

    def holds(self, condition: Condition) -> bool:
        return condition in self._active

    def active(self) -> set[Condition]:
        """A snapshot of the conditions holding now."""
        with self._lock:
            return set(self._active)

    def _update(self) -> None:
        first = next((c for c in Condition if c in self._active), None)
        self.remark = None if first is None else self._active[first].remark


class RetryGate:
    """Spaces out the tries of an operation that failed for want of space, and holds its
    condition in the flags meanwhile: after ``failed`` the gate opens again only once
    ``retry_interval_s`` has passed (one caller gets through per interval: ``claim``), and
    ``passed`` lifts the condition.
    """

    def __init__(self, flags: RunningFlags, condition: Condition,
                 retry_interval_s: float = RETRY_INTERVAL_S) -> None:
        self.flags = flags
        self.condition = condition
        self.retry_interval_s = retry_interval_s
        self.failing = False
        self._retry_at = 0.0

    def is_open(self) -> bool:
        """True unless failing and the retry is not due yet."""
        return not self.failing or self.flags.monotonic() >= self._retry_at

    def claim(self) -> bool:
        """``is_open``, and if so the next caller waits a whole interval (the caller tries)."""
        if not self.failing:
            return True
        now = self.flags.monotonic()
        if now < self._retry_at:
            return False
        self._retry_at = now + self.retry_interval_s
        return True

    def failed(self, remark: str) -> None:
        """The operation failed again: hold the condition, retry in an interval."""
        self.failing = True
        self._retry_at = self.flags.monotonic() + self.retry_interval_s
        self.flags.raise_(self.condition, remark)

    def passed(self) -> None:
        """The operation succeeded: lift the condition (cheap when it was not failing)."""
        if self.failing:
            self.failing = False
            self.flags.clear(self.condition)


class PutGuard:
    """What a put asks while the flags hold a condition; owns the retries of a commit log segment
    that found no space (the put path is where the segment is created)."""

    def __init__(self, flags: RunningFlags) -> None:
        self.flags = flags
        self.segment_gate = RetryGate(flags, Condition.COMMIT_LOG_SPACE)

    def refusal(self) -> str | None:
        """The remark to refuse a put with, or None to let it go on: when the only condition is a
        segment that found no space, one put an interval goes on to create it again."""
        if self.flags.active() == {Condition.COMMIT_LOG_SPACE} and self.segment_gate.claim():
            return None
        return self.flags.remark  # None when lifted meanwhile

    def segment_failed(self, error: OSError | None, size: int, where: str) -> str:
        """A new segment could not be created: hold COMMIT_LOG_SPACE; returns its remark."""
        reason = segment_failed_remark(error, size, where)
        self.segment_gate.failed(reason)
        return reason


def stall_remark(error: StoreSpaceError) -> str:
    """The remark of a put refused because dispatch waits (DISPATCH_STALLED)."""
    if error.no_space:
        return (f"disk full: consume queue and index writes wait for space ({error}); "
                "sends are refused until space is freed")
    return (f"disk error: consume queue or index writes fail ({error}); "
            "sends are refused until they succeed again")


def segment_failed_remark(error: OSError | None, size: int, where: str) -> str:
    """The remark of a put refused because no commit log segment could be created."""
    if error is not None and error.errno in SPACE_ERRNOS:
        return (f"disk full: no space for a new commit log segment of {size} bytes in {where} "
                f"({error.strerror}); sends are refused until space is freed")
    return (f"disk error: cannot create a commit log segment in {where} ({error}); sends are "
            "refused until one can be")
