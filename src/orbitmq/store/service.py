"""Background loops of the store: one thread each, woken early on demand, stopped with a bound.

Every service also works without its thread: tests and the power-loss simulation call
``run_once`` themselves, which makes a run deterministic.
"""

from __future__ import annotations

import _thread
import ctypes
import logging
import sys
import threading

__all__ = ["ServiceThread", "name_os_thread"]

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 10.0
_PR_SET_NAME = 15  # prctl(2)
OS_THREAD_NAME_MAX = 15  # bytes, the kernel's TASK_COMM_LEN less its NUL


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` in the kernel too (Linux; without the ``orbitmq-`` prefix,
    cut to OS_THREAD_NAME_MAX bytes), so that ``top -H``, ``ps -L`` and ``perf`` tell the store's
    threads apart rather than showing each as ``python``. Best effort: nothing when it cannot."""
    if not sys.platform.startswith("linux"):
        return
    try:
        raw = name.removeprefix("orbitmq-").encode()[:OS_THREAD_NAME_MAX]
        ctypes.CDLL(None).prctl(_PR_SET_NAME, ctypes.c_char_p(raw), 0, 0, 0)
    except (OSError, AttributeError):
        pass


class ServiceThread:
    """Calls ``run_once`` every ``interval_s`` seconds, or sooner after ``wakeup``.

    The wakeup is a bare C lock, held while no wakeup is pending: ``wakeup`` releases it and the
    thread's timed ``acquire`` takes it back. A ``threading.Event`` would do the same job through
    a Python-level Condition, whose lock the waking and the woken thread then both take: on the
    event loop's hot path (one wakeup per put) that forced the GIL back and forth mid-request,
    which cost a lone send ~100 us of latency. Releasing a C lock never gives the GIL away; the
    woken thread runs when the loop next blocks (or after the interpreter's switch interval).
    """

    def __init__(self, name: str, interval_s: float) -> None:
        self.name = name
        self.interval_s = interval_s
        self._wake = _thread.allocate_lock()
        self._wake.acquire()  # held: no wakeup pending
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.waiting = False  # parked in its interval wait: only then does a wakeup matter

    def run_once(self) -> None:
        """One round of the service's work."""
        raise NotImplementedError

    def has_work(self) -> bool:
        """Whether a round should run without waiting (services woken by hot paths override it)."""
        return False

    def interval_round_due(self) -> bool:
        """Whether a round that only the interval asks for (no wakeup came) should run. Services
        whose work the event loop does inline between requests override it: while the loop
        keeps up, a round here would only take the GIL from it, in the middle of a request."""
        return True

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        try:
            self._wake.release()
        except RuntimeError:  # released already: a wakeup is pending
            pass

    def wakeup_if_waiting(self) -> None:
        """A cheap wakeup for hot paths: skips the event when the thread is busy anyway (a missed
        race costs at most one interval). The flag is lowered here, before the thread gets to run
        (it needs the GIL first): puts that follow in the meantime skip the event too, so a burst
        of puts costs one Event.set, not one each."""
        if self.waiting:
            self.waiting = False
            self.wakeup()

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._stopped

    def _loop(self) -> None:
        name_os_thread(self.name)
        log.debug("service started name=%s", self.name)
        deferred = False  # the last interval's round was left to the loop: wait whatever is due
        while not self._stopped:
            self.waiting = True
            timed_out = False
            # has_work is checked after raising the flag: no wakeup can slip between.
            if deferred or not self.has_work():
                timed_out = not self._wake.acquire(timeout=self.interval_s)  # else a wakeup
            self.waiting = False
            self._wake.acquire(blocking=False)  # drop a wakeup that came meanwhile
            if self._stopped:
                break
            deferred = timed_out and not self.interval_round_due()
            if deferred:
                continue
            try:
                self.run_once()
            except Exception:  # a service must outlive one bad round; the error is logged
                log.exception("service round failed name=%s", self.name)
        log.debug("service stopped name=%s", self.name)

    def shutdown(self) -> None:
        """Stop the thread (the current round finishes first); callers run a last round if needed."""
        self._stopped = True
        self.wakeup()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_TIMEOUT_S)
            if thread.is_alive():
                log.error("service did not stop in time name=%s", self.name)
