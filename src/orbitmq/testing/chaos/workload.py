"""The clients of a chaos run and the history they record (docs/chaos.md).

Writers send unique values (``writer-counter``, :func:`~.checker.value_of`) one at a time through
the SDK, with no retry inside the SDK: a retry would store one value twice with no way to tell
it from a broker's duplicate, so a writer that fails goes on with its next counter instead. One
writer sends by key (``select_by_hash``) so that per-key order can be checked. A live push
consumer group consumes throughout; at the end a pull group drains every queue from offset 0.

Every outcome goes into a :class:`History`, the checker's input.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from orbitmq import (
    Admin,
    ConsumeFrom,
    ConsumeResult,
    Message,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendResult,
    SendStatus,
    select_by_hash,
)
from orbitmq.errors import BrokerError, ClientError, OrbitMQError, TopicNotFoundError
from orbitmq.testing.chaos.checker import Outcome, Read, Send, value_of
from orbitmq.testing.failover_set import wait_for
from orbitmq.testing.waits import EVENT_WAIT_S

__all__ = ["History", "Writer", "ClientWriter", "client_python", "LiveGroup", "create_topic", "drain", "classify", "describe",
           "SENDS_PER_WRITER_MAX", "DRAIN_PULLS_MAX", "QUEUES", "ORDER_KEYS"]

QUEUES = 4  # the topic's read and write queues
ORDER_KEYS = 8  # keys the ordered writer cycles through
SENDS_PER_WRITER_MAX = 200_000  # a writer stops here whatever the run's length says
SEND_PAUSE_S = 0.005  # between two sends of a writer: bounds the history's size
FAILED_PAUSE_S = 0.1  # after a failed send (a broker gone): do not spin on a dead route
SEND_TIMEOUT_S = 2.0
DRAIN_PULLS_MAX = 100_000  # pulls of one drain, all queues together
DRAIN_BATCH = 32

# Refusals that say the message was not stored: the broker answered before appending it.
NOT_STORED_CODES = frozenset({2, 14, 16, 17})  # SYSTEM_BUSY, SERVICE_NOT_AVAILABLE, NO_PERMISSION,
#                                                TOPIC_NOT_EXIST


def queue_name(broker_name: str, queue_id: int) -> str:
    return f"{broker_name}:{queue_id}"


class History:
    """Every send and every read of a run, with when (seconds since ``started``). Thread-safe:
    writers and the live group append from their threads."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.sends: list[Send] = []
        self.reads: list[Read] = []

    def now_s(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def add_send(self, send: Send) -> None:
        with self.lock:
            self.sends.append(send)

    def add_reads(self, reads: list[Read]) -> None:
        with self.lock:
            self.reads.extend(reads)

    def acked_count(self) -> int:
        with self.lock:
            return sum(1 for s in self.sends if s.outcome is Outcome.ACKED)

    def acked_after(self, at_s: float) -> int:
        with self.lock:
            return sum(1 for s in self.sends if s.outcome is Outcome.ACKED and s.at_s >= at_s)

    def read_values(self, group: str) -> set[str]:
        with self.lock:
            return {r.value for r in self.reads if r.group == group}

    def acked_by_writer(self) -> dict[str, int]:
        """SEND_OKs per writer: each client kind took its share of the load."""
        with self.lock:
            out: dict[str, int] = {}
            for s in self.sends:
                out[s.writer] = out.get(s.writer, 0) + (s.outcome is Outcome.ACKED)
            return dict(sorted(out.items()))

    def longest_write_gap_s(self) -> float:
        """The longest time without a SEND_OK between the first and the last one."""
        with self.lock:
            times = sorted(s.at_s for s in self.sends if s.outcome is Outcome.ACKED)
        return round(max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0), 2)


def classify(result: SendResult | None, error: BaseException | None) -> Outcome:
    """A send's outcome as the checker counts it: SEND_OK is acknowledged; a refusal before
    storing (a client-side error, or a code in NOT_STORED_CODES) failed; everything else
    (a timeout, a closed connection, stored but not flushed or replicated) is unknown."""
    if result is not None:
        return Outcome.ACKED if result.status is SendStatus.OK else Outcome.UNKNOWN
    if isinstance(error, ClientError):
        return Outcome.FAILED
    if isinstance(error, BrokerError) and error.code in NOT_STORED_CODES:
        return Outcome.FAILED
    return Outcome.UNKNOWN


def describe(result: SendResult | None, error: BaseException | None) -> str:
    """A send's answer in a few words: the status, or the error's class, code and remark."""
    if result is not None:
        return result.status.name
    if isinstance(error, BrokerError):
        return f"{type(error).__name__}({error.code}: {error.remark[:80]})"
    return f"{type(error).__name__}" if error is not None else ""


class Writer(threading.Thread):
    """One producer sending its values until told to stop (or SENDS_PER_WRITER_MAX)."""

    def __init__(self, name: str, namesrv: str, topic: str, history: History,
                 stop: threading.Event, *, ordered: bool = False) -> None:
        super().__init__(name=f"chaos-{name}", daemon=True)
        self.writer, self.namesrv, self.topic = name, namesrv, topic
        self.history, self.stop, self.ordered = history, stop, ordered
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # shown by the harness: a writer must not die silently
            self.error = e

    def _run(self) -> None:
        with Producer(f"chaos-{self.writer}", namesrv=self.namesrv, send_timeout=SEND_TIMEOUT_S,
                      retry_times_when_send_failed=0, poll_name_server_interval=1.0,
                      unreachable_broker_backoff=1.0) as producer:
            for counter in range(SENDS_PER_WRITER_MAX):
                if self.stop.is_set():
                    return
                value = value_of(self.writer, counter)
                key = f"{self.writer}-k{counter % ORDER_KEYS}" if self.ordered else None
                message = Message(self.topic, value.encode(), keys=[value])
                result: SendResult | None = None
                error: BaseException | None = None
                try:
                    if key is not None:
                        result = producer.send(message, select_by_hash, key)
                    else:
                        result = producer.send(message)
                except OrbitMQError as e:
                    error = e
                outcome = classify(result, error)
                queue = offset = None
                if result is not None:
                    queue = queue_name(result.queue.broker_name, result.queue.queue_id)
                    offset = result.queue_offset
                self.history.add_send(Send(self.writer, counter, outcome, queue=queue,
                                           offset=offset, key=key, at_s=self.history.now_s(),
                                           detail=describe(result, error)))
                time.sleep(SEND_PAUSE_S if outcome is Outcome.ACKED else FAILED_PAUSE_S)


def client_python(venv: Path, probe: str) -> tuple[Path | None, str]:
    """The Python of ``venv`` when ``probe`` (an import of the client) runs in it, else None
    and why not (the run prints it and goes on without that client's writer)."""
    python = venv / "bin" / "python"
    if not python.exists():
        return None, f"{python} is missing (make install makes it)"
    ran = subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                         timeout=EVENT_WAIT_S)
    if ran.returncode != 0:
        return None, f"{probe!r} fails in {venv}: {ran.stderr.strip()[-200:]}"
    return python, ""


class ClientWriter(threading.Thread):
    """A writer through an official client in its own venv, in a child process: ``cpp`` (the
    C++ client 0.4.4, cpp_writer.py, given the name server) or ``rmq5`` (the 5.x gRPC client,
    rmq5_writer.py, given a gRPC endpoint). Their lines become sends of the history. Their
    acknowledged sends carry no queue (neither answer names one the checker can use), so a loss
    of one is split as a tail; every error they report counts as unknown. The C++ client retries
    a failed send twice inside, which may store one value twice (counted as stored twice, not a
    violation)."""

    SEND_TIMEOUT_MS = 3000
    DEADLINE_S = 3600.0  # the child's own watchdog: no hang in C code outlives a run
    SCRIPTS = {"cpp": "cpp_writer.py", "rmq5": "rmq5_writer.py"}

    def __init__(self, name: str, client: str, python: Path, address: str, topic: str,
                 history: History, stop: threading.Event, home: Path) -> None:
        super().__init__(name=f"chaos-{name}", daemon=True)
        assert client in self.SCRIPTS, client
        self.writer, self.client, self.python = name, client, python
        self.address, self.topic = address, topic
        self.history, self.stop, self.home = history, stop, home
        self.error: BaseException | None = None
        self.stop_file = home / f"{name}.stop"

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # shown by the harness: a writer must not die silently
            self.error = e

    def _run(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        spec = {"address": self.address, "topic": self.topic, "writer": self.writer,
                "group": f"chaos-{self.writer}", "sends_max": SENDS_PER_WRITER_MAX,
                "pause_s": SEND_PAUSE_S, "stop_file": str(self.stop_file),
                "send_timeout_ms": self.SEND_TIMEOUT_MS, "deadline_s": self.DEADLINE_S}
        script = Path(__file__).with_name(self.SCRIPTS[self.client])
        # HOME: where the clients write their logs (the run's directory, not the user's).
        proc = subprocess.Popen([str(self.python), str(script)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env={**os.environ, "HOME": str(self.home)})
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(spec))
        proc.stdin.close()
        stopper = threading.Thread(target=self._stop_when_told, args=(proc,), daemon=True)
        stopper.start()
        with proc.stdout:
            for raw in proc.stdout:
                line = json.loads(raw)
                status = line.get("s")
                outcome = Outcome.ACKED if status == "OK" else Outcome.UNKNOWN
                detail = status or f"{line.get('e')}: {line.get('m', '')[:80]}"
                self.history.add_send(Send(self.writer, int(line["c"]), outcome,
                                           at_s=self.history.now_s(), detail=detail))
        stopper.join(EVENT_WAIT_S)
        rc = proc.wait(EVENT_WAIT_S)
        if not self.stop.is_set():
            raise RuntimeError(f"the {self.client} writer ended before the run did (exit {rc})")

    def _stop_when_told(self, proc: subprocess.Popen[str]) -> None:
        while not self.stop.wait(0.5):
            if proc.poll() is not None:
                return  # it ended by itself (its count or its watchdog): _run reports it
        self.stop_file.write_text("stop\n")
        try:
            proc.wait(EVENT_WAIT_S)  # a send in flight takes its timeout at most
        except subprocess.TimeoutExpired:
            proc.kill()


class LiveGroup:
    """A push consumer group that consumes throughout the faults, recording every delivery."""

    def __init__(self, group: str, namesrv: str, topic: str, history: History) -> None:
        self.group = group
        self.history = history

        def on_messages(messages: list, context: object) -> ConsumeResult:
            mq = context.queue  # type: ignore[attr-defined]
            queue = queue_name(mq.broker_name, mq.queue_id)
            history.add_reads([Read(group, queue, m.queue_offset, bytes(m.body).decode(
                "utf-8", "replace")) for m in messages])
            return ConsumeResult.SUCCESS

        self.consumer = PushConsumer(group, namesrv=namesrv, consume_from=ConsumeFrom.FIRST,
                                     poll_name_server_interval=1.0, heartbeat_broker_interval=1.0,
                                     persist_consumer_offset_interval_ms=500,
                                     pull_suspend_time_ms=2000, pull_timeout_ms=10_000,
                                     pull_delay_on_exception_ms=500, consume_thread_nums=2)
        self.consumer.subscribe(topic, "*")(on_messages)
        self.consumer.start()

    def shutdown(self) -> None:
        self.consumer.shutdown()


def create_topic(namesrv: str, topic: str) -> None:
    """The run's topic with QUEUES queues on every master, and its route known (bounded)."""
    with Admin(namesrv, timeout=5.0) as admin:
        wait_for(lambda: admin.cluster_info().broker_addr_table, "a broker registered",
                 EVENT_WAIT_S)
        admin.create_topic(topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES, exist_ok=True)

        def routed() -> bool:
            try:
                return bool(admin.topic_route(topic).queue_datas)
            except TopicNotFoundError:
                return False
        wait_for(routed, f"the route of {topic}", EVENT_WAIT_S)


def drain(namesrv: str, topic: str, group: str, history: History,
          attempts_max: int = 10, pause_s: float = 1.0) -> int:
    """Read every queue of ``topic`` from offset 0 to its end as ``group`` and record it; a pull
    that fails (a broker still settling after the heal) is tried again from the start, up to
    ``attempts_max`` times. Returns how many messages were read."""
    last: BaseException | None = None
    for _ in range(attempts_max):
        try:
            reads = _drain_once(namesrv, topic, group)
        except OrbitMQError as e:
            last = e
            time.sleep(pause_s)
            continue
        history.add_reads(reads)
        return len(reads)
    raise RuntimeError(f"drain of {topic} failed {attempts_max} times: {last!r}")


def _drain_once(namesrv: str, topic: str, group: str) -> list[Read]:
    reads: list[Read] = []
    pulls = 0
    with PullConsumer(group, namesrv=namesrv) as consumer:
        for mq in consumer.fetch_queues(topic):
            offset = 0
            while pulls < DRAIN_PULLS_MAX:
                pulls += 1
                result = consumer.pull(mq, offset, DRAIN_BATCH, timeout=10.0)
                queue = queue_name(mq.broker_name, mq.queue_id)
                reads.extend(Read(group, queue, m.queue_offset, bytes(m.body).decode(
                    "utf-8", "replace")) for m in result.messages)
                if result.status is not PullStatus.FOUND:
                    break
                offset = result.next_begin_offset
    assert pulls < DRAIN_PULLS_MAX, f"drain of {topic} hit {DRAIN_PULLS_MAX} pulls"
    return reads


def wait_caught_up(history: History, group: str, drain_group: str, timeout_s: float,
                   clock: Callable[[], float] = time.monotonic) -> bool:
    """Until ``group`` read every acknowledged value the drain read (False after ``timeout_s``:
    the checker then reports what it missed)."""
    with history.lock:
        acked = {s.value for s in history.sends if s.outcome is Outcome.ACKED}
    wanted = acked & history.read_values(drain_group)
    deadline = clock() + timeout_s
    while clock() < deadline:
        if not wanted - history.read_values(group):
            return True
        time.sleep(0.2)
    return False
