"""The broker's metadata store: topics, groups, offsets, users and ACLs in SQLite (WAL), one small
write per change.

Until this store, every topic create rewrote ``STORE/config/topics.json`` whole: O(N) per change,
O(N^2) to create N topics (RocketMQ 4 has the same flaw, RocketMQ 5.2 moved its
tables into RocksDB). Here each change is one transaction that upserts or deletes the rows that
changed, whatever the size of the table.

Why SQLite in WAL mode, from the standard library:

- field-proven: the most deployed database engine, with a published test suite of crash and
  power-loss simulations; no new dependency to build, audit or ship (``rocksdict`` and LMDB
  would be wheels of native code we would have to trust and track);
- crash-safe transactions: a change is in the file as a whole or not at all; a torn tail of the
  write-ahead log (the broker killed mid-write) is ignored when the database is next opened;
- WAL appends make each change a small write: the pages a transaction touched (a B-tree leaf
  and its parents: a few KiB) are appended to ``metadata.db-wal``, nothing is rewritten;
- checkpointing is the background compaction: :meth:`MetadataDB.checkpoint` (the broker's
  periodic round, on a worker thread, through a connection of its own, so writers go on) copies
  the log's pages back into the database file, and the next write starts the log over. Should
  the rounds fall behind, SQLite checkpoints by itself once the log holds
  ``WAL_AUTOCHECKPOINT_PAGES`` pages: the log's size stays bounded either way.

Durability: ``synchronous=NORMAL`` (the default here, the store's ASYNC_FLUSH) makes a commit a
write into the log without an fsync: a committed change survives the broker's process dying
(kill -9, a crash), since the bytes are in the kernel's page cache; a power loss or a kernel
crash can take the changes of the last moments (never a torn table: the log's checksums cut
the tail back to the last whole transaction). ``synchronous=FULL`` (SYNC_FLUSH, ``sync_full``)
fsyncs the log at every commit: a committed change survives power loss too, as the commit
log's group commit does.

The store is generic: a *kind* (:data:`KINDS`) is one table of ``(key TEXT, sub INTEGER,
value)`` rows; the broker's managers decide what a key, a sub-key and a value are (a topic's
name and its JSON config; ``topic@group``, a queue id and an offset; a username and its user's
or its ACL's JSON). This module knows their JSON shapes only to :func:`export_tables` them the
way the old JSON files held them.

Secrets: the ``users`` rows hold the users' secret keys (a signature can only be checked with
it). So the database and its ``-wal`` and ``-shm`` are owner-only (0600 in a 0700 directory,
whatever ``store_file_mode`` says: store/file_mode.make_private), and :func:`export_tables`
never exports :data:`SECRET_KINDS` (``orbitmq user list`` shows the users, without secrets).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from orbitmq.errors import StoreError
from orbitmq.store.file_mode import PRIVATE_FILE_MODE, make_private

__all__ = [
    "METADATA_DB_FILE",
    "KINDS",
    "TOPICS",
    "SUBSCRIPTION_GROUPS",
    "CONSUMER_OFFSETS",
    "DELAY_OFFSETS",
    "USERS",
    "ACLS",
    "VERSIONS",
    "SECRET_KINDS",
    "EXPORT_NAMES",
    "Row",
    "MetadataDB",
    "export_tables",
    "WAL_AUTOCHECKPOINT_PAGES",
    "BUSY_TIMEOUT_MS",
]

METADATA_DB_FILE = "metadata.db"  # under STORE/config/, beside the tables it replaces

# The metadata kinds, one SQL table each (the names are SQL identifiers: never from the wire).
TOPICS = "topics"
SUBSCRIPTION_GROUPS = "subscription_groups"
CONSUMER_OFFSETS = "consumer_offsets"
DELAY_OFFSETS = "delay_offsets"
USERS = "users"  # username -> the user's JSON (RocketMQ's UserInfo, its secret key included)
ACLS = "acls"  # username -> the ACL's JSON (RocketMQ's AclInfo)
VERSIONS = "versions"  # a table's data version, written in the same transaction as its rows
KINDS = (TOPICS, SUBSCRIPTION_GROUPS, CONSUMER_OFFSETS, DELAY_OFFSETS, USERS, ACLS, VERSIONS)
SECRET_KINDS = (USERS, ACLS)  # never exported (module docstring, Secrets)

SCHEMA_VERSION = 1
# The log's bound in pages of 4 KiB (~40 MiB) should the periodic checkpoints fall behind: the
# writer that passes it checkpoints (SQLite's own default, 1,000, would do it every ~4 MiB, in
# the middle of the writes the broker makes on its event loop).
WAL_AUTOCHECKPOINT_PAGES = 10_000
# How long a writer waits for another connection's lock (the export command reading while the
# broker writes) before the write fails and is retried by its table.
BUSY_TIMEOUT_MS = 5000

Value = str | int | bytes | None


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One change: ``value`` None deletes the row ``(key, sub)`` of ``kind``."""

    kind: str
    key: str
    sub: int = 0
    value: Value = None


class MetadataDB:
    """One SQLite database in WAL mode holding every metadata kind; safe from any thread.

    Args:
        path: the database file (``STORE/config/metadata.db``); its directory is made 0700
            and the file 0600 whatever the store's modes, since it holds secret keys (SQLite
            gives its ``-wal`` and ``-shm`` files the database file's mode; older ones are
            closed at open too).
        sync_full: fsync the log at every commit (SYNC_FLUSH): see the module docstring.
        read_only: open an existing database for reading (the export command); StoreError when
            there is none.
    """

    def __init__(self, path: str, *, sync_full: bool = False, read_only: bool = False) -> None:
        self.path = path
        self.sync_full = sync_full
        self.read_only = read_only
        self._lock = threading.Lock()  # one connection, shared by the loop and saving threads
        self._conn: sqlite3.Connection | None = None
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_conn: sqlite3.Connection | None = None  # checkpoints beside the writes
        # What the writes cost, counted: tests check that a change costs the same at any size.
        self.statements = 0
        self.transactions = 0

    # -- lifecycle ------------------------------------------------------------------------------
    def open(self) -> MetadataDB:
        """Open (creating when writable and absent) the database; idempotent.

        Raises:
            StoreError: the file cannot be opened or is not a metadata store of this version.
        """
        with self._lock:
            if self._conn is not None:
                return self
            try:
                self._conn = self._connect()
            except sqlite3.Error as e:
                raise StoreError(f"metadata store {self.path} cannot be opened: {e}") from None
        return self

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            if not os.path.exists(self.path):
                raise StoreError(f"no metadata store at {self.path}")
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                   check_same_thread=False, isolation_level=None)
            self._check_schema(conn)
            return conn
        directory = os.path.dirname(self.path) or "."
        base = os.path.basename(self.path)
        try:  # owner-only before SQLite reads or creates anything (module docstring, Secrets)
            make_private(directory)
            if not os.path.exists(self.path):
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, PRIVATE_FILE_MODE))
            make_private(directory, (base, base + "-wal", base + "-shm"))
        except OSError as e:
            raise StoreError(f"metadata store {self.path}: cannot make it owner-only: {e}") from None
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                               timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"metadata store {self.path}: WAL mode refused ({mode})")
            conn.execute(f"PRAGMA synchronous={'FULL' if self.sync_full else 'NORMAL'}")
            conn.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            present = {name for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            missing = [kind for kind in KINDS if kind not in present]
            # A new store, or one written before a kind was added (users and ACLs): the
            # missing tables are created, the others left as they are.
            if version in (0, SCHEMA_VERSION) and (version == 0 or missing):
                conn.execute("BEGIN IMMEDIATE")
                for kind in missing:
                    conn.execute(f"CREATE TABLE IF NOT EXISTS {kind} (key TEXT NOT NULL, "
                                 "sub INTEGER NOT NULL, value, PRIMARY KEY (key, sub)) WITHOUT ROWID")
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                conn.execute("COMMIT")
            self._check_schema(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            conn.close()
            raise StoreError(f"metadata store {self.path} has schema version {version}, this "
                             f"broker reads version {SCHEMA_VERSION}")

    def close(self) -> None:
        """Close the connections (the last one out checkpoints the log into the database)."""
        with self._checkpoint_lock:
            checkpointer, self._checkpoint_conn = self._checkpoint_conn, None
        with self._lock:
            conn, self._conn = self._conn, None
        for c in (checkpointer, conn):
            if c is not None:
                try:
                    c.close()
                except sqlite3.Error:  # closing never loses a committed change
                    pass

    def checkpoint(self) -> tuple[int, int]:
        """Copy the log's committed pages back into the database file (a PASSIVE checkpoint:
        it waits for no one, and writes go on meanwhile through the other connection); the
        next write then starts the log over. Returns (pages in the log, pages copied).

        Raises:
            StoreError: the store is closed, or the checkpoint failed (nothing is lost: the
                pages stay in the log for the next one).
        """
        with self._checkpoint_lock:
            if self._conn is None or self.read_only:
                raise StoreError(f"metadata store {self.path} is not open for writing")
            try:
                if self._checkpoint_conn is None:
                    self._checkpoint_conn = sqlite3.connect(
                        self.path, check_same_thread=False, isolation_level=None,
                        timeout=BUSY_TIMEOUT_MS / 1000)
                    self._checkpoint_conn.execute(
                        f"PRAGMA synchronous={'FULL' if self.sync_full else 'NORMAL'}")
                _busy, log_pages, copied = self._checkpoint_conn.execute(
                    "PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error as e:
                raise StoreError(f"metadata store {self.path}: checkpoint failed: {e}") from None
        return int(log_pages), int(copied)

    def __enter__(self) -> MetadataDB:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes ---------------------------------------------------------------------------------
    def write(self, rows: Iterable[Row]) -> int:
        """Apply ``rows`` in one transaction (all or none); returns how many were applied.

        Raises:
            StoreError: the transaction failed (full disk, I/O error, a lock held too long): it
                was rolled back, nothing of it is in the store.
        """
        batch = list(rows)
        if not batch:
            return 0
        for row in batch:
            if row.kind not in KINDS:  # a kind becomes a table name: only ours
                raise StoreError(f"unknown metadata kind {row.kind!r}")
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                statements = 1
                for row in batch:
                    if row.value is None:
                        conn.execute(f"DELETE FROM {row.kind} WHERE key = ? AND sub = ?",
                                     (row.key, row.sub))
                    else:
                        conn.execute(f"INSERT INTO {row.kind} (key, sub, value) VALUES (?, ?, ?) "
                                     "ON CONFLICT (key, sub) DO UPDATE SET value = excluded.value",
                                     (row.key, row.sub, row.value))
                    statements += 1
                conn.execute("COMMIT")
            except sqlite3.Error as e:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # no transaction left to roll back (SQLite rolled it back itself)
                raise StoreError(f"metadata store {self.path}: write failed: {e}") from None
            self.statements += statements + 1
            self.transactions += 1
        return len(batch)

    # -- reads ----------------------------------------------------------------------------------
    def rows(self, kind: str) -> Iterator[tuple[str, int, Value]]:
        """Every ``(key, sub, value)`` of ``kind``, ordered by key and sub (read at once)."""
        if kind not in KINDS:
            raise StoreError(f"unknown metadata kind {kind!r}")
        with self._lock:
            conn = self._connection()
            try:
                found = conn.execute(f"SELECT key, sub, value FROM {kind} ORDER BY key, sub").fetchall()
            except sqlite3.Error as e:
                raise StoreError(f"metadata store {self.path}: read failed: {e}") from None
        return iter(found)

    def count(self, kind: str) -> int:
        """How many rows ``kind`` holds."""
        if kind not in KINDS:
            raise StoreError(f"unknown metadata kind {kind!r}")
        with self._lock:
            conn = self._connection()
            try:
                return int(conn.execute(f"SELECT COUNT(*) FROM {kind}").fetchone()[0])
            except sqlite3.Error as e:
                raise StoreError(f"metadata store {self.path}: read failed: {e}") from None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"metadata store {self.path} is not open")
        return self._conn


def _json_value(value: Value) -> Any:
    if isinstance(value, bytes):
        value = value.decode()
    return json.loads(value) if isinstance(value, str) else value


def export_tables(db: MetadataDB, kinds: Iterable[str] | None = None) -> dict[str, Any]:
    """The tables as JSON-ready data, each in the shape of the JSON file it replaced
    (RocketMQ's configType names: ``topics``, ``subscriptionGroups``, ``consumerOffsets``,
    ``delayOffsets``): what ``orbitmq store export-metadata`` prints and
    EXPORT_ROCKSDB_CONFIG_TO_JSON (355) answers. ``kinds``: those names, every table if None.
    The users and ACLs (:data:`SECRET_KINDS`) are no export name: never exported.

    Raises:
        StoreError: the store cannot be read, or a name in ``kinds`` is unknown.
    """
    wanted = list(EXPORT_NAMES) if kinds is None else list(kinds)
    unknown = [k for k in wanted if k not in EXPORT_NAMES]
    if unknown:
        raise StoreError(f"unknown metadata table {unknown[0]!r} (known: {', '.join(EXPORT_NAMES)})")
    versions = {key: _json_value(value) for key, _sub, value in db.rows(VERSIONS)}
    out: dict[str, Any] = {}
    for name in wanted:
        kind, table_field = EXPORT_NAMES[name]
        table: dict[str, Any] = {}
        for key, sub, value in db.rows(kind):
            if kind == CONSUMER_OFFSETS:
                table.setdefault(key, {})[str(sub)] = value
            elif kind == DELAY_OFFSETS:
                table[key] = value
            else:
                table[key] = _json_value(value)
        part: dict[str, Any] = {table_field: table}
        if kind in versions:
            part["dataVersion"] = versions[kind]
        out[name] = part
    return out


# export name -> (kind, the field that held the table in its JSON file); never a SECRET_KINDS
EXPORT_NAMES: dict[str, tuple[str, str]] = {
    "topics": (TOPICS, "topicConfigTable"),
    "subscriptionGroups": (SUBSCRIPTION_GROUPS, "subscriptionGroupTable"),
    "consumerOffsets": (CONSUMER_OFFSETS, "offsetTable"),
    "delayOffsets": (DELAY_OFFSETS, "offsetTable"),
}
