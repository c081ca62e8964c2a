"""The POP reader of a chaos run: the official 5.x SimpleConsumer in a child process
(rmq5_reader.py, under ``.venv-rmq5``), receiving with a lease and acking by receipt handle
throughout the faults and after them, its lines turned into the lease checker's history
(lease_checker.py): every delivery and every ack with its times and outcome.

OrbitMQ's SDK speaks remoting, whose consumers pull; POP is served on the gRPC endpoint, so the
reader is the 5.x client, on a cluster that keeps one endpoint across its faults
(``ChaosCluster.grpc_endpoint``).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orbitmq.testing.chaos.checker import Outcome
from orbitmq.testing.chaos.lease_checker import AckAttempt, AckOutcome, Delivery
from orbitmq.testing.chaos.workload import History
from orbitmq.testing.waits import EVENT_WAIT_S

__all__ = ["PopReader", "writer_acked", "handle_position", "POP_GROUP", "INVISIBLE_S", "SKIP_EVERY"]

POP_GROUP = "chaos-pop"
INVISIBLE_S = 3  # each receive's lease: short, so that the leases left to run out come back
AWAIT_S = 2  # a receive's long polling
BATCH = 16
SKIP_EVERY = 25  # the first delivery of every 25th value is left unacked (its lease runs out)
ACK_THREADS = 4
REQUEST_TIMEOUT_S = 3
DEADLINE_S = 3600.0  # the child's own watchdog


class PopReader(threading.Thread):
    """Runs the 5.x SimpleConsumer of ``group`` against ``address`` (a gRPC endpoint) until
    :meth:`finish`; ``deliveries`` and ``acks`` are its history, on ``history``'s clock."""

    def __init__(self, python: Path, address: str, topic: str, history: History, home: Path,
                 group: str = POP_GROUP) -> None:
        super().__init__(name=f"chaos-pop-{group}", daemon=True)
        self.python, self.address, self.topic, self.group = python, address, topic, group
        self.history, self.home = history, home
        self.lock = threading.Lock()
        self.deliveries: list[Delivery] = []
        self.acks: list[AckAttempt] = []
        self.receive_errors: dict[str, int] = {}
        self.error: BaseException | None = None
        self.stop_file = home / f"{group}.stop"
        self._proc: subprocess.Popen[str] | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # shown by the harness: a reader must not die silently
            self.error = e

    def _s(self, monotonic: float) -> float:
        return round(monotonic - self.history.started, 3)

    def _run(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        spec = {"address": self.address, "topic": self.topic, "group": self.group,
                "batch": BATCH, "invisible_s": INVISIBLE_S, "await_s": AWAIT_S,
                "request_timeout_s": REQUEST_TIMEOUT_S, "skip_every": SKIP_EVERY,
                "ack_threads": ACK_THREADS, "stop_file": str(self.stop_file),
                "deadline_s": DEADLINE_S}
        script = Path(__file__).with_name("rmq5_reader.py")
        # HOME: where the client writes its logs (the run's directory, not the user's).
        self._proc = proc = subprocess.Popen(
            [str(self.python), str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "HOME": str(self.home)})
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(spec))
        proc.stdin.close()
        with proc.stdout:
            for raw in proc.stdout:
                self._take(json.loads(raw))
        rc = proc.wait(EVENT_WAIT_S)
        if not self.stop_file.exists():
            raise RuntimeError(f"the 5.x reader ended before the run did (exit {rc})")

    def _take(self, line: dict[str, Any]) -> None:
        kind = line.get("k")
        with self.lock:
            if kind == "d":
                self.deliveries.append(Delivery(
                    self.group, str(line["v"]), str(line["h"]), self._s(float(line["t0"])),
                    self._s(float(line["t"])), float(line["inv"]), int(line["a"]),
                    position=handle_position(str(line["h"]))))
            elif kind == "a":
                self.acks.append(AckAttempt(
                    self.group, str(line["v"]), str(line["h"]), self._s(float(line["t0"])),
                    self._s(float(line["t"])), AckOutcome(line["o"]), str(line.get("m", "")),
                    position=handle_position(str(line["h"]))))
            else:
                what = str(line.get("e"))
                self.receive_errors[what] = self.receive_errors.get(what, 0) + 1

    def acked(self) -> set[str]:
        """The values acked OK, or by an ack that got no answer (it may have been applied: such
        a message comes back only if it was not, and is acked again then)."""
        with self.lock:
            return {a.value for a in self.acks if a.outcome is not AckOutcome.REFUSED}

    def wait_acked(self, values: set[str], timeout_s: float,
                   clock: Callable[[], float] = time.monotonic, *, more_s: float = 0.0,
                   timeout_max_s: float | None = None) -> bool:
        """Until every value of ``values`` was acked (:meth:`acked`; False after ``timeout_s``:
        the lease checker then counts what is missing as lost). While acks still come in, the
        wait goes on ``more_s`` past the newest (up to ``timeout_max_s``): a reader on a slow
        store (the power-loss layer syncs every ack) is behind, not losing messages."""
        start = clock()
        deadline = start + timeout_s
        cap = start + max(timeout_s, timeout_max_s or timeout_s)
        missing = len(values - self.acked())
        while clock() < deadline:
            left = len(values - self.acked())
            if not left or not self.is_alive():
                return not left
            if left < missing:
                missing = left
                deadline = min(max(deadline, clock() + more_s), cap)
            time.sleep(0.2)
        return False

    def finish(self) -> None:
        """Stop the child (it ends its receive and its acks in flight) and wait for its lines."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.stop_file.write_text("stop\n")
        self.join(EVENT_WAIT_S)
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            self.join(EVENT_WAIT_S)


def handle_position(handle: str) -> str:
    """``queue.offset`` of an OrbitMQ receipt handle (``queue.offset.generation``), the
    message's place in its topic; "" for a handle of another shape (the checker then tells
    messages apart by value alone)."""
    parts = handle.split(".")
    if len(parts) == 3 and all(p.isdigit() for p in parts):
        return f"{parts[0]}.{parts[1]}"
    return ""


def writer_acked(history: History) -> set[str]:
    """The values the writers saw acknowledged (what the POP group must end up acking)."""
    with history.lock:
        return {s.value for s in history.sends if s.outcome is Outcome.ACKED}
