"""Helpers of the compatibility tests (the fixtures are in conftest.py).

CppClient runs tests/compat/cpp_driver.py scenarios under .venv-compat's Python, one child process per
scenario; RawClient sends plain remoting requests (routes, committed offsets) to see what the C++
client did; OurClient is OrbitMQ's SDK side of the cross-checks; Received is a message as either
client read it, normalised for comparison.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orbitmq
from orbitmq.protocol.bodies import ConsumerListBody, TopicRouteData
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import PullMessageRequestHeader, PullSysFlag
from orbitmq.protocol.message import MessageExt
from orbitmq.protocol.stored import iter_stored_messages
from orbitmq.security import Credentials
from orbitmq.transport import LoopThread, RemotingClient

REPO = Path(__file__).resolve().parents[2]
# scripts/compat-venv.sh honours COMPAT_VENV too.
COMPAT_VENV = Path(os.environ.get("COMPAT_VENV") or REPO / ".venv-compat")
COMPAT_PYTHON = COMPAT_VENV / "bin" / "python"
DRIVER = Path(__file__).resolve().parent / "cpp_driver.py"
WHEEL_VERSION = "0.4.4"
DRIVER_TIMEOUT_S = 60.0  # one scenario; the driver's own watchdog fires a little earlier
LOG_TAIL_LINES = 60
WARMUP_TOPIC = "CompatWarmup"  # producers' first send, before the scenario's own (cpp_driver.warm_up)


# ----------------------------------------------------------------------------- the compat venv
def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def compat_venv_problem() -> str | None:
    """Why the C++ client cannot run here, or None when .venv-compat is usable."""
    fix = "run `bash scripts/compat-venv.sh` (`make install` does it)"
    if not COMPAT_PYTHON.exists():
        return f"{COMPAT_PYTHON} is missing: {fix}"
    probe = (
        "from importlib.metadata import version; import rocketmq.client; print(version('rocketmq'))"
    )
    try:
        proc = subprocess.run([str(COMPAT_PYTHON), "-c", probe], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{COMPAT_PYTHON} does not run: {e}; {fix}"
    if proc.returncode != 0:
        return f"{COMPAT_PYTHON} cannot import rocketmq.client: {proc.stderr.strip()[-500:]}; {fix}"
    if proc.stdout.strip() != WHEEL_VERSION:
        return f".venv-compat has rocketmq {proc.stdout.strip()}, not {WHEEL_VERSION}; {fix}"
    return None


# ----------------------------------------------------------------------------- servers
@dataclasses.dataclass
class Servers:
    namesrv: str
    broker: str
    output: Callable[[], str]


def wait_for_default_route(servers: Servers, timeout_s: float = 30.0,
                           credentials: Credentials | None = None) -> None:
    """The C++ client sends to a new topic over TBW102's route: wait until the name server has it
    (the broker registers it at start)."""
    with RawClient(servers.namesrv, credentials) as raw:
        deadline = time.monotonic() + timeout_s
        while raw.route("TBW102") is None:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the name server at {servers.namesrv} serves no route for TBW102 within "
                    f"{timeout_s} s of the broker's ready line; server output:\n"
                    + tail(servers.output()))
            time.sleep(0.1)


# ----------------------------------------------------------------------------- the C++ client
class DriverError(AssertionError):
    """The driver process failed (crash, hang, no result); the message carries its output."""


class CppClient:
    """Runs cpp_driver.py scenarios against one name server, with $HOME (the client's log dir) under
    the test's temporary directory."""

    def __init__(self, python: Path, namesrv: str, home: Path) -> None:
        self.python = python
        self.namesrv = namesrv
        self.home = home
        self.home.mkdir(parents=True, exist_ok=True)
        self.started: list[RunningDriver] = []

    def _command(self, scenario: str) -> list[str]:
        return [str(self.python), str(DRIVER), scenario]

    def _spec(self, spec: dict[str, Any], timeout: float) -> str:
        full = {"namesrv": self.namesrv, "deadline_s": timeout - 5, **spec}
        return json.dumps(full)

    def _env(self) -> dict[str, str]:
        return {**os.environ, "HOME": str(self.home)}

    def run(self, scenario: str, timeout: float = DRIVER_TIMEOUT_S, **spec: Any) -> dict[str, Any]:
        """One scenario to completion; its result object. Producer scenarios first connect to the
        broker with a send to WARMUP_TOPIC (see warm_up in cpp_driver.py) unless told otherwise."""
        if scenario.startswith("send_"):
            spec.setdefault("warmup_topic", WARMUP_TOPIC)
        try:
            proc = subprocess.run(self._command(scenario), input=self._spec(spec, timeout),
                                  capture_output=True, text=True, timeout=timeout, env=self._env())
        except subprocess.TimeoutExpired as e:
            raise DriverError(self._explain(scenario, f"timed out after {timeout} s",
                                            _text(e.stdout), _text(e.stderr))) from None
        return self._result(scenario, proc.returncode, proc.stdout, proc.stderr)

    def start(self, scenario: str, timeout: float = DRIVER_TIMEOUT_S, **spec: Any) -> RunningDriver:
        """A scenario in the background (the push consumer), to talk to while it runs.

        Each background driver gets a $HOME of its own: the C++ client keeps a broadcasting
        consumer's offsets under $HOME/.rocketmq_offsets/<ip>@<instance name>/<group>, the same
        directory for two consumers of one group started together, and when both create it at
        once the loser crashes (SIGSEGV) while it starts."""
        home = self.home / f"driver-{len(self.started)}"
        home.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(self._command(scenario), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**self._env(), "HOME": str(home)})
        driver = RunningDriver(self, scenario, proc, self._spec(spec, timeout), timeout)
        self.started.append(driver)
        return driver

    def close(self) -> None:
        """Kills background drivers a failed test left running."""
        for driver in self.started:
            driver.kill()

    def _result(self, scenario: str, rc: int, out: str, err: str) -> dict[str, Any]:
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if rc != 0 or not lines:
            raise DriverError(self._explain(scenario, f"exit code {rc}", out, err))
        return json.loads(lines[-1])

    def _explain(self, scenario: str, what: str, out: str, err: str) -> str:
        return (f"C++ driver scenario {scenario!r} failed: {what}\n--- stdout\n{out[-3000:]}\n"
                f"--- stderr\n{err[-6000:]}\n--- client log\n{self.log_tail()}")

    def log_text(self) -> str:
        """Everything the client logged under this runner's $HOME (and its drivers' own)."""
        logs = sorted(self.home.rglob("logs/**/*.log*"))
        return "\n".join(p.read_text(errors="replace") for p in logs)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of the client's own logs ($HOME/logs/rocketmq-cpp), newest file last."""
        logs = sorted(self.home.rglob("logs/**/*.log*"), key=lambda p: p.stat().st_mtime)
        return "\n".join(f"[{p.name}]\n{tail(p.read_text(errors='replace'), lines)}" for p in logs[-2:])


class RunningDriver:
    """A driver process started in the background. Threads read its output; the test waits for
    its event lines ({"event": ...}) and at last for its result."""

    def __init__(self, client: CppClient, scenario: str, proc: subprocess.Popen[str], spec: str,
                 timeout: float) -> None:
        self.client, self.scenario, self.proc, self.timeout = client, scenario, proc, timeout
        self.seen: list[str] = []  # stdout lines so far
        self.events: list[str] = []  # the "event" of each event line so far
        self.received: list[tuple[int, bytes]] = []  # (queue id, body) of "received" events
        self.stderr: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        assert proc.stdin is not None
        proc.stdin.write(spec)
        proc.stdin.close()
        self._pumps = [threading.Thread(target=self._pump_out, daemon=True),
                       threading.Thread(target=self._pump_err, daemon=True)]
        for pump in self._pumps:
            pump.start()

    def _pump_out(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:  # closed at EOF: no pipe left for the garbage collector
            for raw_line in self.proc.stdout:
                line = raw_line.rstrip("\n")
                data = json.loads(line) if line.startswith('{"event"') else {}
                with self._cond:
                    self.seen.append(line)
                    if data:
                        self.events.append(data["event"])
                    if data.get("event") == "received":
                        self.received.append((data["queue_id"], base64.b64decode(data["body_b64"])))
                    self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        with self.proc.stderr:
            for line in self.proc.stderr:
                self.stderr.append(line)

    def _join_pumps(self) -> None:
        for pump in self._pumps:
            pump.join(10)

    def received_so_far(self) -> list[tuple[int, bytes]]:
        """(queue id, body) of each message the consumer reported so far."""
        with self._cond:
            return list(self.received)

    def wait_event(self, event: str, timeout: float = 30.0, times: int = 1) -> None:
        """Blocks until the driver has printed {"event": event} ``times`` times."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.events.count(event) < times and not self._eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            if self.events.count(event) >= times:
                return
            ended = self._eof
        if ended:
            self.proc.wait(5)
            raise DriverError(self._explain(f"exited (rc={self.proc.returncode}) before {event!r}"))
        self.kill()
        raise DriverError(self._explain(f"no {event!r} event (x{times}) within {timeout} s"))

    def result(self) -> dict[str, Any]:
        """Waits for the driver to end and returns its result object."""
        try:
            self.proc.wait(self.timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise DriverError(self._explain(f"did not finish within {self.timeout} s")) from None
        self._join_pumps()
        with self._cond:
            out = "\n".join(self.seen)
        return self.client._result(self.scenario, self.proc.returncode, out, "".join(self.stderr))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._join_pumps()

    def _explain(self, what: str) -> str:
        with self._cond:
            out = "\n".join(self.seen)
        return self.client._explain(self.scenario, what, out, "".join(self.stderr))


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


def unique(prefix: str) -> str:
    """A topic or group name of this test alone (RocketMQ's charset, well under 127 characters)."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


# ----------------------------------------------------------------------------- our side of the wire
@dataclasses.dataclass
class Received:
    """A message as one client or the other received it, normalised for comparison."""

    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    tags: str | None
    keys: str | None
    properties: dict[str, str]
    msg_id: str

    @classmethod
    def from_cpp(cls, raw: dict[str, Any]) -> Received:
        props = {k: v for k, v in raw["properties"].items() if v}  # the client answers "" if absent
        return cls(raw["topic"], raw["queue_id"], raw["queue_offset"],
                   base64.b64decode(raw["body_b64"]), raw["tags"] or None, raw["keys"] or None,
                   props, raw["id"])

    @classmethod
    def from_ext(cls, ext: Any) -> Received:
        props = dict(ext.properties)
        return cls(ext.topic, ext.queue_id, ext.queue_offset, bytes(ext.body),
                   props.get("TAGS"), props.get("KEYS"), props, ext.msg_id)


class RawClient:
    """Plain remoting requests through orbitmq.transport: routes, offsets, consumer lists and
    stored bytes, which the tests read to check what the C++ client did."""

    def __init__(self, namesrv: str, credentials: Credentials | None = None) -> None:
        self.namesrv = namesrv
        self._loop = LoopThread("compat-raw")
        self._client = RemotingClient(credentials=credentials)

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._loop.call(self._client.close(), 10)
        self._loop.stop()

    def invoke(self, addr: str, code: int, fields: dict[str, str], body: bytes = b"") -> Any:
        return self._loop.call(
            self._client.invoke(addr, RemotingCommand.request(code, fields, body), 10.0), 15)

    def route(self, topic: str) -> Any:
        """The topic's TopicRouteData, or None when the name server answers TOPIC_NOT_EXIST."""
        resp = self.invoke(self.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        assert resp.code == ResponseCode.SUCCESS, f"route {topic}: {resp.code} {resp.remark}"
        return TopicRouteData.from_json(bytes(resp.body))

    def write_queue_count(self, topic: str) -> int:
        route = self.route(topic)
        assert route is not None, f"no route for {topic}"
        return sum(q.write_queue_nums for q in route.queue_datas)

    def consumer_offset(self, broker: str, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset, or None when the broker has none (QUERY_NOT_FOUND)."""
        resp = self.invoke(broker, RequestCode.QUERY_CONSUMER_OFFSET,
                           {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)})
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        assert resp.code == ResponseCode.SUCCESS, f"query offset: {resp.code} {resp.remark}"
        return int(resp.ext_fields["offset"])

    def max_offsets(self, topic: str) -> list[int]:
        """GET_MAX_OFFSET of each of the topic's queues (one past its last dispatched message)."""
        route = self.route(topic)
        assert route is not None, f"no route for {topic}"
        broker = route.broker_datas[0].broker_addrs[0]
        out = []
        for queue_id in range(route.queue_datas[0].read_queue_nums):
            resp = self.invoke(broker, RequestCode.GET_MAX_OFFSET,
                               {"topic": topic, "queueId": str(queue_id)})
            assert resp.code == ResponseCode.SUCCESS, f"max offset: {resp.code} {resp.remark}"
            out.append(int(resp.ext_fields["offset"]))
        return out

    def consumer_ids(self, broker: str, group: str) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP: the client ids the broker knows in ``group``."""
        resp = self.invoke(broker, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
        if resp.code != ResponseCode.SUCCESS:
            return []
        return sorted(ConsumerListBody.from_json(bytes(resp.body)).consumer_id_list)

    def stored(self, broker: str, topic: str, queue_id: int) -> list[MessageExt]:
        """A queue's messages from offset 0 exactly as stored (bodies not inflated), one pull."""
        header = PullMessageRequestHeader(
            consumer_group="CompatRawReader", topic=topic, queue_id=queue_id, queue_offset=0,
            max_msg_nums=32, sys_flag=PullSysFlag.SUBSCRIPTION, commit_offset=0,
            suspend_timeout_millis=0, subscription="*", sub_version=0)
        resp = self.invoke(broker, RequestCode.PULL_MESSAGE, header.to_ext_fields())
        if resp.code == ResponseCode.PULL_NOT_FOUND:
            return []
        assert resp.code == ResponseCode.SUCCESS, f"raw pull: {resp.code} {resp.remark}"
        return list(iter_stored_messages(bytes(resp.body)))


@dataclasses.dataclass
class Outgoing:
    """A message our Python side sends (to be read back by the C++ client)."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: list[str] = dataclasses.field(default_factory=list)
    properties: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Sent:
    msg_id: str  # UNIQ_KEY
    queue_id: int
    queue_offset: int


class OurClient:
    """OrbitMQ's side of the cross-checks, through its SDK (orbitmq.Producer, orbitmq.PullConsumer)."""

    MAX_PULLS_PER_QUEUE = 100

    def __init__(self, raw: RawClient) -> None:
        self.raw = raw  # for wait-for-route and offset look-ups around the SDK calls

    def send(self, group: str, messages: list[Outgoing]) -> list[Sent]:
        out = []
        with orbitmq.Producer(group, namesrv=self.raw.namesrv) as producer:
            for m in messages:
                r = producer.send(orbitmq.Message(m.topic, m.body, tags=m.tags, keys=list(m.keys),
                                                  properties=dict(m.properties)))
                assert r.status.name == "OK", r
                out.append(Sent(r.msg_id, r.queue.queue_id, r.queue_offset))
        return out

    def pull_all(self, group: str, topic: str, expression: str = "*") -> list[Received]:
        """Every message of every queue from offset 0, queue by queue in offset order."""
        out: list[Received] = []
        with orbitmq.PullConsumer(group, namesrv=self.raw.namesrv) as consumer:
            for mq in sorted(consumer.fetch_queues(topic)):
                offset = 0
                for _ in range(self.MAX_PULLS_PER_QUEUE):
                    res = consumer.pull(mq, offset, max_nums=32, expression=expression)
                    out.extend(Received.from_ext(m) for m in res.messages)
                    if res.status.name == "NO_NEW_MSG" or res.next_begin_offset <= offset:
                        break
                    offset = res.next_begin_offset
                else:
                    raise AssertionError(f"{mq}: still pulling after {self.MAX_PULLS_PER_QUEUE} pulls")
        return out
