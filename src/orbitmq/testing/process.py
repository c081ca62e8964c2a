"""Run OrbitMQ servers as real child processes and wait for their readiness lines.

Used by tests that need a process boundary (kill -9, the C++ client, the CLI) and available to
users' own tests. Every wait is bounded.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO

from orbitmq.testing.waits import READY_WAIT_S

__all__ = ["ServerProcess", "standalone_process", "HOST_DISK_IGNORED", "host_disk_ignored",
           "READY_WAIT_S"]

# A test broker shares its disk with everything else on the host, whose use it cannot foresee: at
# the default ratios it would delete a test's segments (past 0.75 or 0.85 of the disk used) or
# refuse its sends (past 0.90) because other work filled the disk. Tests of those ratios set them.
# Its CPU too: a broker stalled by other work on the host (a JVM starting, a compiler) would
# answer sends read after the stall SYSTEM_BUSY (broker_fast_failure_enable). Tests of that set it.
HOST_DISK_IGNORED = ("--disk-max-used-space-ratio", "1.0", "--disk-space-clean-forcibly-ratio", "1.0",
                     "--disk-space-warning-level-ratio", "1.0",
                     "--broker-fast-failure-enable", "false")

READY = re.compile(r"orbitmq (\w+) ready on (\S+):(\d+)")


class ServerProcess:
    """A child process running ``orbitmq ...``; its stderr is collected and scanned for ready lines.

    Attributes:
        addresses: role -> "host:port" from each ``orbitmq <role> ready on HOST:PORT`` line seen.
    """

    def __init__(self, args: Sequence[str], *, env: dict[str, str] | None = None,
                 prefix: Sequence[str] = ()) -> None:
        # ``prefix``: a command that execs the server, e.g. ``ip netns exec NS`` (testing/netns.py)
        self.args = [*prefix, sys.executable, "-m", "orbitmq.cli.main", *args]
        self.addresses: dict[str, str] = {}
        self.lines: list[str] = []
        self._cond = threading.Condition()
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=full_env,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str] | None) -> None:
        assert stream is not None
        with stream:
            for line in stream:
                with self._cond:
                    self.lines.append(line.rstrip("\n"))
                    m = READY.search(line)
                    if m:
                        self.addresses[m.group(1)] = f"{m.group(2)}:{m.group(3)}"
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_ready(self, *roles: str, timeout: float = READY_WAIT_S) -> dict[str, str]:
        """Wait until every role in ``roles`` logged its ready line; raise with the output if not."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not all(r in self.addresses for r in roles):
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    out = "\n".join(self.lines[-40:])
                    raise RuntimeError(f"{' '.join(self.args)} not ready (rc={self.proc.poll()}):\n{out}")
                self._cond.wait(min(left, 0.2))
            return dict(self.addresses)

    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def stop(self, timeout: float = 15.0) -> int:
        """SIGINT (as Ctrl-C would), then SIGKILL after ``timeout``; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._release()
        return self.proc.returncode

    def kill(self) -> None:
        """kill -9: no chance to clean up, like a crash or a power cut of the process."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._release()

    def _release(self) -> None:
        # The reader closes the pipe at its end of file, which a child of the server that
        # inherited it may hold back: closed here, so that no pipe outlives the server.
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def host_disk_ignored(args: Sequence[str]) -> tuple[str, ...]:
    """HOST_DISK_IGNORED, unless ``args`` set a disk ratio or name a config file (which may)."""
    chosen = any(a.startswith(("--disk-", "--broker-fast-failure")) or a == "--config"
                 for a in args)
    return () if chosen else HOST_DISK_IGNORED


def standalone_process(store: str, *extra: str, env: dict[str, str] | None = None) -> ServerProcess:
    """``orbitmq standalone`` on ephemeral ports of 127.0.0.1 with its store in ``store``, the
    web console and the gRPC endpoint on free ports too (their ports are fixed by default, so
    that tests and benchmarks running side by side would collide on them; pass
    ``--console-port N`` or ``--grpc-port N`` in ``extra`` to choose). The gRPC endpoint's port is
    in ``addresses["grpc"]`` once ready. The host's disk use neither deletes segments nor refuses
    sends unless ``extra`` sets a disk ratio (see HOST_DISK_IGNORED)."""
    console = () if "--console-port" in extra else ("--console-port", "0")
    grpc = () if any(a.startswith("--grpc-") and "port" in a for a in extra) else ("--grpc-port", "0")
    return ServerProcess(
        ["standalone", "--namesrv-port", "0", "--broker-port", "0", *console, *grpc, "--store",
         store, *host_disk_ignored(extra), *extra], env=env
    )
