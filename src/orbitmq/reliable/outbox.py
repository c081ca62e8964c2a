"""The transactional outbox: messages written in the business transaction, sent by a relay.

A message that must leave if and only if a database change commits is written as a row of the
outbox table by the same transaction (:meth:`Outbox.add`). A relay (:mod:`orbitmq.reliable.relay`)
sends committed rows in id order and marks them sent. Nothing is lost: a row stays until the
broker acknowledged it. Rows with the same ``order_key`` leave in id order, one after the other: a
row is sent only once every earlier row of its key is sent, so a failing row holds back the rows
of its key behind it (and only those).

This module holds the table's operations; the relay decides when to run them.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from orbitmq.errors import ClientError
from orbitmq.protocol.message import KEY_SEPARATOR, Message, PropertyKey
from orbitmq.reliable.db import Dialect, SqlHandle, adapt
from orbitmq.reliable.schema import (
    DEFAULT_OUTBOX_TABLE,
    check_table_name,
    create_tables,
    outbox_ddl,
)

__all__ = ["OutboxStatus", "OutboxRow", "Outbox", "select_in_order", "backoff_ms", "OUTBOX_ID_PROPERTY"]

OUTBOX_ID_PROPERTY = "ORBITMQ_OUTBOX_ID"  # set on every relayed message: its row id
_COLUMNS = ('id, topic, tags, "keys", order_key, body, properties, status, attempts, last_error, '
            "created_at, next_attempt_at, claimed_by, claimed_until, sent_at, msg_id")


class OutboxStatus(enum.IntEnum):
    """A row's state. PENDING rows are sent (when due); FAILED rows gave up after the relay's
    ``max_attempts`` and wait for ``orbitmq outbox retry``; both hold back later rows of their key."""

    PENDING = 0
    SENT = 1
    FAILED = 2


@dataclasses.dataclass(frozen=True, slots=True)
class OutboxRow:
    """One row of the outbox table (times in ms since the epoch)."""

    id: int
    topic: str
    tags: str | None
    keys: str | None
    order_key: str | None
    body: bytes
    properties: dict[str, str]
    status: OutboxStatus
    attempts: int
    last_error: str | None
    created_at: int
    next_attempt_at: int
    claimed_by: str | None = None
    claimed_until: int | None = None
    sent_at: int | None = None
    msg_id: str | None = None

    @classmethod
    def from_db(cls, row: Sequence[Any]) -> OutboxRow:
        (id_, topic, tags, keys, order_key, body, props, status, attempts, last_error, created,
         due, claimed_by, claimed_until, sent_at, msg_id) = row
        return cls(int(id_), topic, tags, keys, order_key, bytes(body), json.loads(props or "{}"),
                   OutboxStatus(status), int(attempts), last_error, int(created), int(due),
                   claimed_by, claimed_until, sent_at, msg_id)

    def message(self) -> Message:
        """The message to send, its row id in the ORBITMQ_OUTBOX_ID property."""
        props = dict(self.properties)
        delay = int(props.pop(PropertyKey.DELAY, "0") or 0)
        props[OUTBOX_ID_PROPERTY] = str(self.id)
        keys = [k for k in (self.keys or "").split(KEY_SEPARATOR) if k]
        # Rows written before reserved names were refused may hold some: relay them as stored.
        return Message.with_system_properties(self.topic, self.body, tags=self.tags,
                                              keys=keys or None, properties=props,
                                              delay_level=delay)


def backoff_ms(attempts: int, base_ms: int, max_ms: int) -> int:
    """The wait before the next try after ``attempts`` failed ones: base, 2*base, 4*base, ...,
    capped at ``max_ms``."""
    assert attempts >= 1
    return min(max_ms, base_ms * (1 << min(attempts - 1, 30)))


def select_in_order(candidates: Sequence[OutboxRow], unsent_before: dict[int, int]) -> list[OutboxRow]:
    """The candidates that may be sent now without breaking per-key order.

    ``candidates`` are in id order; ``unsent_before[id]`` is how many unsent rows of the same key
    have a smaller id (in the whole table). A row may go when all of those are candidates picked
    before it: then this relay sends them first, in order. Once a row of a key is held back, every
    later row of that key is too. Rows without an order key always go.
    """
    picked: list[OutboxRow] = []
    picked_per_key: dict[str, int] = {}
    blocked: set[str] = set()
    for row in candidates:
        key = row.order_key
        if key is None:
            picked.append(row)
            continue
        if key in blocked:
            continue
        if unsent_before.get(row.id, 0) == picked_per_key.get(key, 0):
            picked.append(row)
            picked_per_key[key] = picked_per_key.get(key, 0) + 1
        else:
            blocked.add(key)
    return picked


class Outbox:
    """An outbox table (default ``orbitmq_outbox``) and what can be done with it.

    Args:
        table: the table's name.
        clock: seconds since the epoch (tests pass a fake one).
    """

    def __init__(self, table: str = DEFAULT_OUTBOX_TABLE, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.table = check_table_name(table)
        self._clock = clock

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def create_table(self, conn: Any) -> None:
        """Create the table and its indexes if missing (in ``conn``'s current transaction)."""
        handle = adapt(conn)
        create_tables(handle, outbox_ddl(handle.dialect, self.table))

    # -- the application's side ------------------------------------------------------------------
    def add(self, conn: Any, message: Message, *, order_key: str | None = None) -> int:
        """Write ``message`` into the outbox in ``conn``'s current transaction; returns its row id.

        The message is sent once the caller commits, and never if it rolls back. Call it in the
        same transaction as the business change. ``order_key`` (default: the message's keys)
        groups rows that must leave in order; pass ``""`` for no order.

        On PostgreSQL, writers of one order key are serialized until their commit (an advisory
        lock), so that id order is commit order for the rows of a key.

        Raises:
            ClientError: not a Message, empty body, or a connection we cannot use.
        """
        if not isinstance(message, Message):
            raise ClientError(f"expected a Message, got {type(message).__name__}")
        if not message.body:
            raise ClientError("message body is empty")
        handle = adapt(conn)
        keys = message.keys
        keys_text = KEY_SEPARATOR.join([keys] if isinstance(keys, str) else keys) if keys else None
        key = keys_text if order_key is None else (order_key or None)
        props = dict(message.properties)
        if message.delay_level > 0:
            props[PropertyKey.DELAY] = str(message.delay_level)
        now = self.now_ms()
        values = (message.topic, message.tags, keys_text, key, bytes(message.body),
                  json.dumps(props, sort_keys=True), now, now)
        insert = (f'INSERT INTO {self.table} (topic, tags, "keys", order_key, body, properties, '
                  "status, attempts, created_at, next_attempt_at) ")
        if key is not None and handle.dialect is Dialect.POSTGRES:  # lock and insert: one trip
            cur = handle.execute(
                "WITH lock AS (SELECT pg_advisory_xact_lock(hashtext(?))) " + insert +
                "SELECT ?, ?, ?, ?, ?, ?, 0, 0, ?, ? FROM lock RETURNING id",
                (f"{self.table}:{key}", *values))
        else:
            cur = handle.execute(insert + "VALUES (?, ?, ?, ?, ?, ?, 0, 0, ?, ?) RETURNING id", values)
        row = cur.fetchone()
        assert row is not None
        return int(row[0])

    # -- the relay's side ------------------------------------------------------------------------
    def claim(self, handle: SqlHandle, owner: str, limit: int, lease_ms: int) -> list[OutboxRow]:
        """Claim up to ``limit`` rows that are due and may be sent now, in id order (run it in a
        transaction: BEGIN IMMEDIATE on SQLite; on PostgreSQL candidate rows are locked with
        FOR UPDATE SKIP LOCKED, so concurrent relays claim different rows without waiting).

        A claim is ``claimed_by = owner`` until ``now + lease_ms``; another relay takes the row
        only after that.
        """
        now = self.now_ms()
        lock = " FOR UPDATE SKIP LOCKED" if handle.dialect is Dialect.POSTGRES else ""
        rows = [OutboxRow.from_db(r) for r in handle.fetchall(
            f"SELECT {_COLUMNS} FROM {self.table} WHERE status = 0 AND next_attempt_at <= ? "
            "AND (claimed_until IS NULL OR claimed_until < ?) ORDER BY id LIMIT ?" + lock,
            (now, now, limit))]
        if not rows:
            return []
        keyed = [r.id for r in rows if r.order_key is not None]
        before: dict[int, int] = {}
        if keyed:
            marks = ", ".join("?" * len(keyed))
            before = {int(i): int(n) for i, n in handle.fetchall(
                f"SELECT o.id, (SELECT COUNT(*) FROM {self.table} p WHERE p.order_key = "
                f"o.order_key AND p.id < o.id AND p.status <> 1) FROM {self.table} o "
                f"WHERE o.id IN ({marks})", keyed)}
        picked = select_in_order(rows, before)
        until = now + lease_ms
        handle.executemany(f"UPDATE {self.table} SET claimed_by = ?, claimed_until = ? WHERE id = ?",
                           [(owner, until, r.id) for r in picked])
        return [dataclasses.replace(r, claimed_by=owner, claimed_until=until) for r in picked]

    def mark_sent(self, handle: SqlHandle, owner: str, sent: Iterable[tuple[int, str]]) -> int:
        """Rows ``(id, msg_id)`` the broker acknowledged; returns how many were still ours."""
        now = self.now_ms()
        return handle.executemany(
            f"UPDATE {self.table} SET status = 1, sent_at = ?, msg_id = ?, attempts = attempts + 1, "
            "last_error = NULL, claimed_by = NULL, claimed_until = NULL "
            "WHERE id = ? AND claimed_by = ? AND status = 0",
            [(now, msg_id, row_id, owner) for row_id, msg_id in sent])

    def mark_failed(self, handle: SqlHandle, owner: str, failed: Iterable[tuple[OutboxRow, str]],
                    *, base_ms: int, max_ms: int, max_attempts: int | None) -> None:
        """Rows whose send failed: count the attempt, record the error, schedule the next try
        (exponential backoff), or give up (FAILED) after ``max_attempts``."""
        now = self.now_ms()
        rows = []
        for row, error in failed:
            attempts = row.attempts + 1
            status = (OutboxStatus.FAILED if max_attempts is not None and attempts >= max_attempts
                      else OutboxStatus.PENDING)
            rows.append((int(status), attempts, error[:2000], now + backoff_ms(attempts, base_ms,
                                                                               max_ms), row.id, owner))
        handle.executemany(
            f"UPDATE {self.table} SET status = ?, attempts = ?, last_error = ?, next_attempt_at = ?, "
            "claimed_by = NULL, claimed_until = NULL WHERE id = ? AND claimed_by = ?", rows)

    def release(self, handle: SqlHandle, owner: str, ids: Iterable[int]) -> None:
        """Give back claims of rows not tried (no attempt counted)."""
        handle.executemany(f"UPDATE {self.table} SET claimed_by = NULL, claimed_until = NULL "
                           "WHERE id = ? AND claimed_by = ?", [(i, owner) for i in ids])

    # -- operators' side -------------------------------------------------------------------------
    def get(self, conn: Any, row_id: int) -> OutboxRow | None:
        row = adapt(conn).fetchone(f"SELECT {_COLUMNS} FROM {self.table} WHERE id = ?", (row_id,))
        return None if row is None else OutboxRow.from_db(row)

    def counts(self, conn: Any) -> dict[OutboxStatus, int]:
        """Rows per status."""
        found = dict(adapt(conn).fetchall(f"SELECT status, COUNT(*) FROM {self.table} GROUP BY status"))
        return {s: int(found.get(int(s), 0)) for s in OutboxStatus}

    def unsent(self, conn: Any, limit: int = 100) -> list[OutboxRow]:
        """The oldest rows not yet sent (pending and failed), in id order."""
        return [OutboxRow.from_db(r) for r in adapt(conn).fetchall(
            f"SELECT {_COLUMNS} FROM {self.table} WHERE status <> 1 ORDER BY id LIMIT ?", (limit,))]

    def retry(self, conn: Any, ids: Sequence[int] | None = None) -> int:
        """Make unsent rows due now with a fresh attempt count (FAILED ones pending again):
        those in ``ids``, or every unsent row. Returns how many rows changed."""
        handle = adapt(conn)
        # Claims are left alone: a row in flight stays its relay's until it is marked.
        sql = (f"UPDATE {self.table} SET status = 0, attempts = 0, next_attempt_at = ? "
               "WHERE status <> 1")
        now = self.now_ms()
        if ids is None:
            return int(handle.execute(sql, (now,)).rowcount)
        return sum(int(handle.execute(sql + " AND id = ?", (now, i)).rowcount) for i in ids)
