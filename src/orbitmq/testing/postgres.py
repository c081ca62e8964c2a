"""A throwaway PostgreSQL server for tests: initdb into a temporary directory, pg_ctl start on a
free port of 127.0.0.1, databases created on demand, everything removed at stop.

Uses Debian's ``postgresql`` package (``/usr/lib/postgresql/<version>/bin``; ``make install``
installs it). PostgreSQL refuses to run as root, so as root the server runs as the ``postgres``
user (``runuser -u postgres -- ...``) in a directory handed to that user; otherwise as the current
user. Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["PostgresServer", "PostgresUnavailable", "find_pg_bin"]

START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30
RUN_AS = "postgres"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server programs (or no psycopg) on this machine."""


def find_pg_bin() -> Path:
    """The newest ``/usr/lib/postgresql/*/bin`` with initdb and pg_ctl (or from $PG_BIN).

    Raises:
        PostgresUnavailable: none found.
    """
    candidates = [os.environ["PG_BIN"]] if os.environ.get("PG_BIN") else []
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                         key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
                         reverse=True)
    for path in candidates:
        if (Path(path) / "initdb").is_file() and (Path(path) / "pg_ctl").is_file():
            return Path(path)
    raise PostgresUnavailable("PostgreSQL server programs (initdb, pg_ctl) not found under "
                              "/usr/lib/postgresql/*/bin: install Debian's postgresql package "
                              "(make install does, as root)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """A private PostgreSQL cluster. Use as a context manager, or start()/stop().

    Attributes:
        port: the TCP port on 127.0.0.1 (known after start).
        user: the superuser name (``postgres``), trusted without a password on 127.0.0.1.
    """

    def __init__(self) -> None:
        self.bin = find_pg_bin()
        self.root = Path(tempfile.mkdtemp(prefix="orbitmq-pg-"))
        self.data = self.root / "data"
        self.sockets = self.root / "sock"
        self.port = 0
        self.user = "postgres"
        self._as_root = os.geteuid() == 0
        self._databases = 0
        self._started = False

    def _run(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self._as_root:
            cmd = ["runuser", "-u", RUN_AS, "--", *cmd]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.root)
        if out.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}"
                               f"{out.stderr}\n{tail}")
        return out

    def start(self) -> PostgresServer:
        """initdb, then pg_ctl start on a free port (retried on another port if taken)."""
        self.sockets.mkdir()
        if self._as_root:
            shutil.chown(self.root, RUN_AS, RUN_AS)
            shutil.chown(self.sockets, RUN_AS, RUN_AS)
        self._run("initdb", "-D", str(self.data), "-U", self.user, "--auth=trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions", timeout=START_TIMEOUT_S)
        for attempt in range(3):
            self.port = _free_port()
            options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.sockets} "
                       "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                       "-c max_connections=200")
            try:
                self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"),
                          "-o", options, "-w", "-t", str(START_TIMEOUT_S), "start",
                          timeout=START_TIMEOUT_S + 10)
                break
            except RuntimeError:
                if attempt == 2:
                    raise
        self._started = True
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        psycopg = _psycopg()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                psycopg.connect(self.url("postgres"), connect_timeout=5).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def url(self, database: str = "postgres") -> str:
        """A libpq URL for ``database`` on this server."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its URL."""
        self._databases += 1
        name = name or f"test_{self._databases}"
        with _psycopg().connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """pg_ctl stop (fast), then remove the directory."""
        if self._started:
            self._started = False
            with contextlib.suppress(Exception):
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t",
                          str(STOP_TIMEOUT_S), "stop", timeout=STOP_TIMEOUT_S + 10)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise PostgresUnavailable("psycopg is not installed: pip install 'orbitmq[postgres]'") from None
    return psycopg
