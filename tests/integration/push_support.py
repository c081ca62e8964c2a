"""Shared pieces of the push consumer integration tests, and the child consumer program.

Run as a script, this module is a push consumer in its own process (so that a test can kill it
with SIGKILL, no goodbye): it prints ``ready CLIENT_ID`` once started, ``assigned 0,3,5`` each
time the queue ids it holds of the topic change, and appends one line per consumed message to
``--log``: ``PID QUEUE_ID QUEUE_OFFSET TIME_NS BODY`` (line-buffered, so a kill loses nothing the
listener acknowledged). Imported, it gives tests a handle on such children and small helpers.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve()


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``predicate`` until true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


@dataclasses.dataclass(frozen=True)
class Consumed:
    pid: int
    queue_id: int
    offset: int
    time_ns: int
    body: str


def read_log(path: Path) -> list[Consumed]:
    """The complete lines of a child's consumption log."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split(" ", 4)
        if len(parts) == 5:
            out.append(Consumed(int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]),
                                parts[4]))
    return out


class ChildConsumer:
    """A push consumer in a child process (see the module docstring)."""

    def __init__(self, namesrv: str, group: str, topic: str, log: Path, *extra: str) -> None:
        self.log = log
        args = [sys.executable, str(HERE), "--namesrv", namesrv, "--group", group,
                "--topic", topic, "--log", str(log), *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.client_id: str | None = None
        self.assigned: set[int] = set()
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, ""):
            line = line.rstrip("\n")
            self.lines.append(line)
            if line.startswith("ready "):
                self.client_id = line.split(" ", 1)[1]
            elif line.startswith("assigned"):
                ids = line.split(" ", 1)[1] if " " in line else ""
                self.assigned = {int(i) for i in ids.split(",") if i}

    def wait_ready(self, timeout: float = 30.0) -> None:
        wait_until(lambda: self.client_id is not None or self.proc.poll() is not None, timeout,
                   "child consumer start")
        if self.client_id is None:
            raise AssertionError("child consumer died:\n" + "\n".join(self.lines[-30:]))

    def consumed(self) -> list[Consumed]:
        return read_log(self.log)

    def kill(self) -> None:
        """SIGKILL: no unregister, no last offset commit."""
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after 20 s; then release the pipe."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def assignments_partition(children: list[ChildConsumer], queue_count: int) -> bool:
    """True when the children's queue ids are disjoint and cover ``0..queue_count-1``."""
    seen = [q for c in children for q in c.assigned]
    return len(seen) == len(set(seen)) and set(seen) == set(range(queue_count))


# ---------------------------------------------------------------------------------- the child
def _child_main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--namesrv", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--orderly", action="store_true")
    ap.add_argument("--sleep-ms", type=float, default=0.0)
    ap.add_argument("--option", action="append", default=[], help="name=int|float")
    opts = ap.parse_args()
    from orbitmq import ConsumeResult, PushConsumer  # after argparse: fast --help

    tuning: dict[str, float | int] = {}
    for item in opts.option:
        name, _, value = item.partition("=")
        tuning[name] = float(value) if "." in value else int(value)
    pid = os.getpid()
    log = open(opts.log, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    write_lock = threading.Lock()
    consumer = PushConsumer(opts.group, namesrv=opts.namesrv, orderly=opts.orderly, **tuning)

    @consumer.subscribe(opts.topic, "*")
    def on_messages(messages, context):  # type: ignore[no-untyped-def]
        for msg in messages:
            if opts.sleep_ms:
                time.sleep(opts.sleep_ms / 1000)
            with write_lock:
                log.write(f"{pid} {msg.queue_id} {msg.queue_offset} {time.time_ns()} "
                          f"{msg.body.decode()}\n")
        return ConsumeResult.SUCCESS

    consumer.start()
    print(f"ready {consumer.client_id}", flush=True)
    last: list[int] | None = None
    try:
        while True:
            ids = [mq.queue_id for mq in consumer.assigned_queues(opts.topic)]
            if ids != last:
                print("assigned " + ",".join(map(str, ids)), flush=True)
                last = ids
            time.sleep(0.05)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    _child_main()
