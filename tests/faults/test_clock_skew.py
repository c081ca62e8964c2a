"""Clock skew of one process (testing/clock.py, libfaketime): a child process reads both of its
clocks while the test steps them forward and back and makes them drift; and an OrbitMQ server
started under a skewed clock stamps what it stores with that clock.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from orbitmq import Message, Producer, PullConsumer, PullStatus, SendStatus
from orbitmq.testing.chaos.workload import create_topic
from orbitmq.testing.clock import CACHE_S, SkewedClock, clock_problem
from orbitmq.testing.failover_set import wait_for
from orbitmq.testing.process import standalone_process
from orbitmq.testing.waits import READY_WAIT_S

pytestmark = pytest.mark.skipif(clock_problem() is not None, reason=str(clock_problem()))

SEEN_WAIT_S = 3 * CACHE_S + 4.0  # libfaketime re-reads the offset once a CACHE_S
STAMP_TOLERANCE_S = 2.0  # a send and a pull on a loaded machine
TOLERANCE_S = 0.3  # between the child's read and the test's: a pipe round trip

# Answers each line on stdin with its two clocks; the test compares them with its own.
PROBE = """
import sys, time
for _ in sys.stdin:
    print(time.time(), time.monotonic(), flush=True)
"""


class Probe:
    def __init__(self, clock: SkewedClock) -> None:
        self.proc = subprocess.Popen([*clock.prefix(), sys.executable, "-c", PROBE],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.base: tuple[float, float] | None = None

    def skew(self) -> tuple[float, float]:
        """(its wall clock minus ours, how far its monotonic clock moved minus ours since the
        first read)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        ours_wall, ours_mono = time.time(), time.monotonic()
        wall, mono = map(float, self.proc.stdout.readline().split())
        if self.base is None:
            self.base = (mono, ours_mono)
        return wall - ours_wall, (mono - self.base[0]) - (ours_mono - self.base[1])

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def near(value: float, target: float) -> bool:
    return abs(value - target) <= TOLERANCE_S


def test_a_process_sees_its_clock_stepped_forward_and_back_and_drifting(tmp_path: Path) -> None:
    clock = SkewedClock(tmp_path / "probe.rc")
    probe = Probe(clock)
    try:
        wall, mono = probe.skew()
        assert near(wall, 0.0) and near(mono, 0.0)
        clock.jump(30.0)
        wait_for(lambda: near(probe.skew()[0], 30.0), "the wall clock 30 s ahead", SEEN_WAIT_S)
        assert near(probe.skew()[1], 30.0)  # the monotonic clock stepped with it
        clock.jump(-50.0)
        wait_for(lambda: near(probe.skew()[0], -20.0), "the wall clock 20 s behind",
                 SEEN_WAIT_S)
        assert near(probe.skew()[1], -20.0)  # a monotonic clock gone back: the fault itself
        clock.reset()
        wait_for(lambda: near(probe.skew()[0], 0.0), "true time again", SEEN_WAIT_S)
        # A drift of +0.5 s/s: after about 3 s the clock is 1.5 s ahead, give or take a step.
        clock.drift(0.5)
        began = time.monotonic()
        wait_for(lambda: time.monotonic() - began >= 3.0 + CACHE_S or None, "3 s of drift",
                 10.0)
        ahead = probe.skew()[0]
        assert 1.0 <= ahead <= 0.5 * (time.monotonic() - began) + TOLERANCE_S, ahead
        clock.drift(-0.5)  # now it loses what it gained
        wait_for(lambda: probe.skew()[0] < ahead - 0.5, "the clock losing time", SEEN_WAIT_S)
        clock.reset()
        wait_for(lambda: near(probe.skew()[0], 0.0), "true time after the drift", SEEN_WAIT_S)
    finally:
        probe.close()
        clock.close()


def test_a_server_stamps_what_it_stores_with_its_skewed_clock(tmp_path: Path) -> None:
    clock = SkewedClock(tmp_path / "server.rc")
    server = standalone_process(str(tmp_path / "store"), env=clock.env())
    try:
        namesrv = server.wait_ready("namesrv", "broker", timeout=READY_WAIT_S)["namesrv"]
        create_topic(namesrv, "Skewed")
        with Producer("skew-p", namesrv=namesrv) as producer, \
                PullConsumer("skew-c", namesrv=namesrv) as consumer:
            sent_count = iter(range(10**6))

            def stamp_skew() -> float:
                """One message sent and read back: its store timestamp minus our clock."""
                body = b"m%d" % next(sent_count)
                sent = time.time()
                result = producer.send(Message("Skewed", body))
                assert result.status is SendStatus.OK
                for mq in consumer.fetch_queues("Skewed"):
                    offset = 0
                    while (pulled := consumer.pull(mq, offset, 32)).status is PullStatus.FOUND:
                        for m in pulled.messages:
                            if bytes(m.body) == body:
                                return m.store_timestamp / 1000 - sent
                        offset = pulled.next_begin_offset
                raise AssertionError(f"{body!r} not found")

            assert abs(stamp_skew()) < STAMP_TOLERANCE_S
            clock.jump(3600.0)
            wait_for(lambda: abs(stamp_skew() - 3600.0) < STAMP_TOLERANCE_S,
                     "messages stamped an hour ahead", SEEN_WAIT_S)
            clock.jump(-7200.0)
            wait_for(lambda: abs(stamp_skew() + 3600.0) < STAMP_TOLERANCE_S,
                     "messages stamped an hour behind", SEEN_WAIT_S)
    finally:
        server.kill()
        clock.close()
