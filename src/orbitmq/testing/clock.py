"""Clock skew for one server process (chaos runs, docs/chaos.md): Debian's libfaketime
(``libfaketime`` package, scripts/system-deps.sh) preloaded into the process, its offset read from
a file that the test rewrites while the process runs.

Why libfaketime and not an in-process clock: the broker's lease and fence logic takes an
injectable ``monotonic`` callable (broker/failover/service.py, in_sync_ack.py), but that is a
constructor argument for unit tests, not something a running server process exposes; and a
server process also reads the clock through asyncio's loop, ``time.time()`` for store and born
timestamps, thread waits. libfaketime shifts every one of those reads (``CLOCK_REALTIME`` and
``CLOCK_MONOTONIC`` alike: its default), so the process sees one consistent skewed clock, as a
host whose clock was stepped or runs fast or slow would show it.

What it cannot reach: programs that read the clock without libc. etcd is a Go program: Go's
runtime reads the clocks through the vDSO directly, so an LD_PRELOAD library never sees those
reads; a time namespace offsets only the monotonic and boot clocks and only before the first
process enters it. Skew of an etcd member would need its own kernel (a VM) and is not offered.

The offset file is re-read at most once a second (``FAKETIME_CACHE_DURATION=1``): a jump is seen
within a second, and a drift is a series of steps, one a second, of ``rate`` seconds each.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

__all__ = ["SkewedClock", "libfaketime", "clock_problem", "CACHE_S"]

CACHE_S = 1  # libfaketime re-reads the offset file this often (whole seconds, its unit)
DRIFT_STEP_S = 0.25  # how often a drift rewrites the offset (finer than the cache: no lag)
LIBFAKETIME_PATHS = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


def libfaketime() -> str | None:
    """The libfaketime library to preload, or None (then clock faults are left out, saying so)."""
    override = os.environ.get("ORBITMQ_LIBFAKETIME")
    for path in ((override,) if override else LIBFAKETIME_PATHS):
        if path and os.path.exists(path):
            return path
    return None


def clock_problem() -> str | None:
    """Why clock skew cannot be injected here (None when it can)."""
    if libfaketime() is None:
        return "libfaketime is not installed (Debian: apt-get install libfaketime)"
    return None


class SkewedClock:
    """One process's clock offset, in seconds from true time, kept in ``path``.

    ``prefix()`` is the command prefix that starts a program with it (``env LD_PRELOAD=...``);
    put it after any ``ip netns exec NS`` prefix. The offset starts at 0: a process started this
    way runs on true time until ``jump`` or ``drift`` says otherwise.
    """

    def __init__(self, path: Path) -> None:
        library = libfaketime()
        if library is None:
            raise RuntimeError(str(clock_problem()))
        self.library = library
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._offset = 0.0
        self._lock = threading.Lock()
        self._drift: tuple[threading.Thread, threading.Event] | None = None
        self._write(0.0)

    def env(self) -> dict[str, str]:
        return {"LD_PRELOAD": self.library, "FAKETIME_TIMESTAMP_FILE": str(self.path),
                "FAKETIME_CACHE_DURATION": str(CACHE_S)}

    def prefix(self) -> list[str]:
        return ["env", *(f"{k}={v}" for k, v in self.env().items())]

    @property
    def offset(self) -> float:
        with self._lock:
            return self._offset

    def _write(self, offset: float) -> None:
        with self._lock:
            self._offset = offset
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(f"{offset:+.3f}\n")
            os.replace(tmp, self.path)  # a reader never sees half a line

    def jump(self, seconds: float) -> None:
        """Step the clock by ``seconds`` (forward when positive) from where it is."""
        self.stop_drift()
        self._write(self.offset + seconds)

    def drift(self, rate: float) -> None:
        """From now on the clock gains ``rate`` seconds per second (loses, when negative):
        ``rate`` 0.5 is a clock running at 1.5 times true speed."""
        self.stop_drift()
        stop = threading.Event()
        began, base = time.monotonic(), self.offset

        def step() -> None:
            while not stop.wait(DRIFT_STEP_S):
                self._write(base + rate * (time.monotonic() - began))
        thread = threading.Thread(target=step, name=f"drift {self.path.name}", daemon=True)
        self._drift = (thread, stop)
        thread.start()

    def stop_drift(self) -> None:
        if self._drift is not None:
            thread, stop = self._drift
            stop.set()
            thread.join(5)
            self._drift = None

    def reset(self) -> None:
        """Back to true time (a step, as an operator's clock fix would be)."""
        self.stop_drift()
        self._write(0.0)

    def close(self) -> None:
        self.stop_drift()
        with contextlib.suppress(OSError):
            self.path.unlink()
