"""One small SQL layer over the databases ``orbitmq.reliable`` runs on: SQLite and PostgreSQL.

Two ways in:

- :func:`adapt` wraps a connection the *application* owns (``sqlite3.Connection``, a psycopg 3
  connection, a SQLAlchemy ``Session`` or ``Connection``, or a :class:`SqlHandle`) so that the
  outbox can write inside the application's own transaction. It never begins nor commits.
- :class:`Database` opens connections of its own from a URL (``sqlite:///path/to.db`` or
  ``postgresql://user@host:port/db``) for the relay, the consume log and the CLI, and runs
  transactions on them: ``BEGIN IMMEDIATE`` on SQLite (take the write lock up front, so two
  writers never deadlock on a lock upgrade), an ordinary transaction on PostgreSQL.

SQL is written once with ``?`` placeholders; :class:`SqlHandle` turns them into ``%s`` for
PostgreSQL drivers. Nothing here imports the client: it is plain database plumbing.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from orbitmq.errors import ClientError

__all__ = ["Dialect", "SqlHandle", "Database", "adapt", "parse_url"]

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 10_000  # a writer waits this long for SQLite's single write lock


class Dialect(enum.Enum):
    """The SQL flavours we write for."""

    SQLITE = "sqlite"
    POSTGRES = "postgresql"


class SqlHandle:
    """A connection in (or about to be in) a transaction, with dialect-neutral ``execute``.

    This is what a handler wrapped by :func:`~orbitmq.reliable.idempotent` receives: run the
    business change with :meth:`execute` (``?`` placeholders on every database), or use
    :attr:`connection` (the driver's own connection) directly. Never commit it yourself: the
    library commits the business change together with the consume-log update.
    """

    def __init__(self, dialect: Dialect, connection: Any, executor: Any = None) -> None:
        self.dialect = dialect
        self.connection = connection
        self._executor = executor  # a SQLAlchemy Connection, when the caller gave one

    def sql(self, text: str) -> str:
        """``text`` with its ``?`` placeholders in the driver's style (psycopg's ``%s``, with a
        literal ``%`` doubled). A ``?`` inside a string literal would be taken as a placeholder
        too: pass such values as parameters."""
        if self.dialect is Dialect.SQLITE:
            return text
        return text.replace("%", "%%").replace("?", "%s")

    def execute(self, text: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement; returns the driver's cursor (fetchone/fetchall/rowcount)."""
        statement = self.sql(text)
        if self._executor is not None:
            return self._executor.exec_driver_sql(statement, tuple(params))
        if self.dialect is Dialect.SQLITE:
            return self.connection.execute(statement, tuple(params))
        cur = self.connection.cursor()
        cur.execute(statement, tuple(params))
        return cur

    def executemany(self, text: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run one statement for each parameter row (pipelined by psycopg); returns the number
        of rows changed in all."""
        if not rows:
            return 0
        statement = self.sql(text)
        params = [tuple(r) for r in rows]
        if self._executor is not None:
            return int(self._executor.exec_driver_sql(statement, params).rowcount)
        if self.dialect is Dialect.SQLITE:
            return int(self.connection.executemany(statement, params).rowcount)
        with self.connection.cursor() as cur:
            cur.executemany(statement, params)
            return int(cur.rowcount)

    def fetchone(self, text: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        row = self.execute(text, params).fetchone()
        return None if row is None else tuple(row)

    def fetchall(self, text: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self.execute(text, params).fetchall()]


def _is_psycopg(conn: Any) -> bool:
    return type(conn).__module__.split(".")[0] == "psycopg"


def adapt(conn: Any) -> SqlHandle:
    """A :class:`SqlHandle` over an application's connection, to write in its transaction.

    Raises:
        ClientError: not a connection we know how to use.
    """
    if isinstance(conn, SqlHandle):
        return conn
    if isinstance(conn, sqlite3.Connection):
        return SqlHandle(Dialect.SQLITE, conn)
    if _is_psycopg(conn):
        return SqlHandle(Dialect.POSTGRES, conn)
    if hasattr(conn, "get_bind") and hasattr(conn, "connection"):  # a SQLAlchemy Session
        conn = conn.connection()
    if hasattr(conn, "exec_driver_sql") and hasattr(conn, "dialect"):  # a SQLAlchemy Connection
        name = conn.dialect.name
        if name == "sqlite":
            return SqlHandle(Dialect.SQLITE, conn.connection.dbapi_connection, conn)
        if name == "postgresql":
            return SqlHandle(Dialect.POSTGRES, conn.connection.dbapi_connection, conn)
        raise ClientError(f"SQLAlchemy dialect {name!r} is not supported (sqlite, postgresql)")
    raise ClientError(
        f"cannot use {type(conn).__name__} as a database connection: give a sqlite3 or psycopg "
        "connection, or a SQLAlchemy Session/Connection")


def parse_url(url: str) -> tuple[Dialect, str]:
    """``(dialect, target)``: a file path for SQLite, a libpq URL for PostgreSQL.

    ``sqlite:///relative.db``, ``sqlite:////absolute.db`` (SQLAlchemy's spelling), a bare path,
    ``postgresql://...`` or ``postgres://...`` (a ``+driver`` suffix is ignored).

    Raises:
        ClientError: another scheme, or SQLite in memory (each connection would see its own).
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return Dialect.SQLITE, url
    scheme = scheme.split("+")[0].lower()
    if scheme == "sqlite":
        path = unquote(rest[1:] if rest.startswith("/") else rest)
        if path in ("", ":memory:"):
            raise ClientError("an in-memory SQLite database cannot be shared; give a file path")
        return Dialect.SQLITE, path
    if scheme in ("postgresql", "postgres"):
        parts = urlsplit(url)
        return Dialect.POSTGRES, parts._replace(scheme="postgresql").geturl()
    raise ClientError(f"unsupported database URL {url!r}: use sqlite:///PATH or postgresql://...")


class Database:
    """Connections of the library's own (relay, consume log, CLI) from a URL.

    Each thread gets its own connection (:meth:`handle`), opened on first use and closed by
    :meth:`close`. Use :meth:`transaction` for every read-modify-write.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.dialect, self._target = parse_url(url)
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()
        if self.dialect is Dialect.POSTGRES:
            self._psycopg = _import_psycopg()

    def connect(self) -> Any:
        """A new driver connection in autocommit mode (transactions are explicit)."""
        if self.dialect is Dialect.SQLITE:
            conn = sqlite3.connect(self._target, isolation_level=None, check_same_thread=False,
                                   timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
            conn.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")  # readers never wait for the writer
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable at checkpoints
            return conn
        return self._psycopg.connect(self._target, autocommit=True)

    def handle(self) -> SqlHandle:
        """This thread's connection (autocommit until :meth:`transaction`)."""
        handle = getattr(self._local, "handle", None)
        if handle is None:
            conn = self.connect()
            with self._lock:
                self._all.append(conn)
            handle = SqlHandle(self.dialect, conn)
            self._local.handle = handle
        return handle

    @contextlib.contextmanager
    def transaction(self) -> Iterator[SqlHandle]:
        """Run the block in one transaction on this thread's connection: commit on success,
        roll back on an exception (re-raised)."""
        handle = self.handle()
        conn = handle.connection
        if self.dialect is Dialect.SQLITE:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield handle
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        else:
            with conn.transaction():
                yield handle

    def discard(self) -> None:
        """Close this thread's connection (after an error that may have broken it)."""
        handle = getattr(self._local, "handle", None)
        self._local.handle = None
        if handle is not None:
            with self._lock:
                if handle.connection in self._all:
                    self._all.remove(handle.connection)
            with contextlib.suppress(Exception):
                handle.connection.close()

    def close(self) -> None:
        """Close every connection this object opened."""
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.close()
        self._local = threading.local()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Database({self.dialect.value})"


def _import_psycopg() -> Any:
    try:
        return importlib.import_module("psycopg")
    except ImportError:
        raise ClientError("PostgreSQL needs psycopg 3: pip install 'orbitmq[postgres]'") from None
