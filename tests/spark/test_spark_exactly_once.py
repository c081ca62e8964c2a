"""Exactly-once end to end: a streaming query copying topic A to topic B runs as a child process
driver, is killed with SIGKILL mid-batch at three different steps of the sink's commit protocol,
then restarted to the end; B must hold every row of A exactly once, checked by an SDK consumer,
and every half message the crashes left behind must be settled by the brokers' checks without
being delivered."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from spark_support import consume_all, new_topic, produce

from orbitmq import Admin
from orbitmq.spark.clients import executor_session
from orbitmq.spark.commit_log import SinkTransactionListener
from orbitmq.spark.options import COMMIT_TOPIC_DEFAULT, PRODUCER_GROUP_DEFAULT
from orbitmq.spark.writer import FAULT_DIR_ENV, FAULT_ENV

DRIVER = Path(__file__).with_name("eo_driver.py")
ROWS = 2000  # 5 micro-batches of 400
# (fault point, first batch it fires in): halves sent but not committed; marker written but no
# half committed; half of the batch's halves committed. Each run first replays the batch the
# previous one died in.
CRASHES = [("halves_sent", 0), ("marker_written", 1), ("half_committed", 2)]


class Driver:
    """One run of eo_driver.py in a process group of its own (the JVM and Python workers too)."""

    def __init__(self, namesrv: str, a: str, b: str, work: Path, fault: str = "") -> None:
        self.log_path = work / f"driver-{fault or 'final'}.log"
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
        env[FAULT_ENV] = fault
        env[FAULT_DIR_ENV] = str(work)
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(DRIVER), namesrv, a, b, str(work / "checkpoint")],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)

    def output(self) -> str:
        return self.log_path.read_text()[-4000:]

    def kill(self) -> None:
        """SIGKILL to the whole group: the driver, its JVM and its Python workers die at once."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self.log.close()

    def wait_for_file(self, work: Path, prefix: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(p.name.startswith(prefix) for p in work.iterdir()):
            assert self.proc.poll() is None, f"driver exited early:\n{self.output()}"
            assert time.monotonic() < deadline, f"fault {prefix} not reached:\n{self.output()}"
            time.sleep(0.2)

    def wait_exit(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout_s)
        finally:
            if self.proc.poll() is None:
                self.kill()
            self.log.close()


def _pending(namesrv: str) -> int:
    with Admin(namesrv) as admin:
        return sum(1 for t in admin.list_transactions().transactions
                   if t.producer_group == PRODUCER_GROUP_DEFAULT)


def test_killed_three_times_then_restarted_b_holds_every_row_of_a_once(namesrv, tmp_path):
    a = new_topic(namesrv, "EoA", queues=4)
    b = new_topic(namesrv, "EoB", queues=2)
    produce(namesrv, a, ROWS, batch=50)
    began = time.monotonic()
    for point, batch in CRASHES:
        driver = Driver(namesrv, a, b, tmp_path, f"{point}@{batch}")
        try:
            driver.wait_for_file(tmp_path, f"{point}-", timeout_s=180)
        finally:
            driver.kill()
        print(f"killed at {point}@{batch} after {time.monotonic() - began:.0f}s")
    delivered_before_final = len(consume_all(namesrv, b))
    assert 0 < delivered_before_final < ROWS  # the crashes did happen mid-stream
    # From now on a live producer of the sink's group answers the brokers' checks of the halves
    # the crashes left pending, from the commit markers (as any executor of the sink would).
    with executor_session(namesrv) as session:
        listener = SinkTransactionListener(session, COMMIT_TOPIC_DEFAULT)
        session.run(session.tx_producer(PRODUCER_GROUP_DEFAULT, listener))
        final = Driver(namesrv, a, b, tmp_path)
        assert final.wait_exit(300) == 0, final.output()
        print(f"final run done after {time.monotonic() - began:.0f}s")
        got = consume_all(namesrv, b, expect=ROWS)
        assert len(got) == ROWS, f"{len(got)} rows in B"
        assert sorted(m.body for m in got) == sorted(f"m-{i}".encode() for i in range(ROWS))
        deadline = time.monotonic() + 180  # immunity (90 s) + a few check intervals
        while _pending(namesrv):
            assert time.monotonic() < deadline, f"{_pending(namesrv)} half messages still pending"
            time.sleep(0.5)
    print(f"pending halves settled after {time.monotonic() - began:.0f}s")
    again = consume_all(namesrv, b)
    assert len(again) == ROWS and len({m.msg_id for m in again}) == ROWS
