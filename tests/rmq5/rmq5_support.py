"""Helpers of the RocketMQ 5 client tests (the fixtures are in conftest.py).

Rmq5Driver runs tests/rmq5/rmq5_driver.py under .venv-rmq5's Python (the official client) and
sends it one command at a time; Cluster is an ``orbitmq standalone`` child process with its
gRPC endpoint, restartable on the same ports and store.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orbitmq
from orbitmq.testing import ServerProcess

REPO = Path(__file__).resolve().parents[2]
RMQ5_VENV = Path(os.environ.get("RMQ5_VENV") or REPO / ".venv-rmq5")
RMQ5_PYTHON = RMQ5_VENV / "bin" / "python"
DRIVER = Path(__file__).resolve().parent / "rmq5_driver.py"
CLIENT_VERSION = "5.1.2"
ANSWER_WAIT_S = 60.0
READY_WAIT_S = 60.0


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def rmq5_venv_problem() -> str | None:
    """Why the official client cannot run here, or None."""
    fix = "run `bash scripts/rmq5-venv.sh` (`make install` does it)"
    if not RMQ5_PYTHON.exists():
        return f"{RMQ5_PYTHON} is missing: {fix}"
    probe = "from importlib.metadata import version; import rocketmq; print(version('rocketmq-python-client'))"
    try:
        proc = subprocess.run([str(RMQ5_PYTHON), "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{RMQ5_PYTHON} does not run: {e}; {fix}"
    if proc.returncode != 0 or proc.stdout.strip() != CLIENT_VERSION:
        return f".venv-rmq5 lacks rocketmq-python-client {CLIENT_VERSION}: {proc.stderr[-300:]}; {fix}"
    return None


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DriverFailed(AssertionError):
    """The driver answered an error (or died); the message carries what it said."""

    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__(f"{answer.get('error')}: {answer.get('message')}\n{answer.get('trace', '')}")
        self.answer = answer


class Rmq5Driver:
    """One driver process: the official client's objects live in it between commands."""

    def __init__(self, home: Path, env: dict[str, str] | None = None) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([str(RMQ5_PYTHON), str(DRIVER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "HOME": str(home), **(env or {})})
        self.stderr: list[str] = []
        self._err = threading.Thread(target=self._pump_err, daemon=True)
        self._err.start()
        self._lock = threading.Lock()

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        with self.proc.stderr:
            for line in self.proc.stderr:
                self.stderr.append(line)

    def call(self, op: str, timeout: float = ANSWER_WAIT_S, **spec: Any) -> dict[str, Any]:
        """Send one command and wait for its answer; DriverFailed when it failed."""
        answer = self.try_call(op, timeout, **spec)
        if not answer.get("ok"):
            raise DriverFailed(answer)
        return answer

    def try_call(self, op: str, timeout: float = ANSWER_WAIT_S, **spec: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self._lock:
            self.proc.stdin.write(json.dumps({"op": op, **spec}) + "\n")
            self.proc.stdin.flush()
            line: list[str] = []
            reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()),  # type: ignore[union-attr]
                                      daemon=True)
            reader.start()
            reader.join(timeout)
            if not line or not line[0]:
                self.kill()
                raise AssertionError(f"driver gave no answer to {op} within {timeout} s; stderr:\n"
                                     + "".join(self.stderr[-40:]))
            return dict(json.loads(line[0]))

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write('{"op": "quit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self._close_pipes()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                try:
                    pipe.close()
                except OSError:
                    pass
        self._err.join(5)


class Cluster:
    """``orbitmq standalone`` with fixed free ports (a restart keeps them: clients reconnect)."""

    def __init__(self, store: Path, *extra: str) -> None:
        self.store = store
        self.ports = {"namesrv": free_port(), "broker": free_port(), "grpc": free_port()}
        self.extra = extra
        self.proc: ServerProcess | None = None
        self.start()

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ports['namesrv']}"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.ports['grpc']}"

    def start(self) -> None:
        self.proc = ServerProcess([
            "standalone", "--namesrv-port", str(self.ports["namesrv"]),
            "--broker-port", str(self.ports["broker"]), "--grpc-port", str(self.ports["grpc"]),
            # The HA port: a free one of its own, not the default broker port + 1, which nothing
            # reserved (another socket held it once in a CI run and the restart failed).
            "--ha-listen-port", "0", "--console-port", "0", "--store", str(self.store), *self.extra])
        addrs = self.proc.wait_ready("namesrv", "broker", "grpc", timeout=READY_WAIT_S)
        assert addrs["grpc"].endswith(f":{self.ports['grpc']}"), addrs

    def stop(self, *, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            self.proc.stop()
        self.proc = None

    def output(self) -> str:
        return self.proc.output() if self.proc is not None else ""

    def topic(self, name: str, message_type: str | None = None, queues: int = 4) -> str:
        attributes = f"+message.type={message_type}" if message_type else None
        with orbitmq.Admin(namesrv=self.namesrv) as admin:
            admin.create_topic(name, read_queue_nums=queues, write_queue_nums=queues,
                               attributes=attributes)
        return name

    def group(self, name: str, **settings: Any) -> str:
        with orbitmq.Admin(namesrv=self.namesrv) as admin:
            admin.update_group(name, **settings)
        return name


def wait_until(what: str, check: Any, timeout: float = 30.0, every: float = 0.2) -> Any:
    """Poll ``check()`` until it returns something truthy (bounded); that value."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(every)
