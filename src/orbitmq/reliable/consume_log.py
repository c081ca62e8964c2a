"""The consume log: one row per message a consumer group handles, so that its effect happens once.

Delivery is at-least-once (a producer retry, a relay crash, a rebalance: the same message comes
again), and a message id is no identity (a resend gets a new one). The log therefore keys rows by
(consumer group, topic, tags, business key) as the seed articles do, the business key being the
message's KEYS (or what a key function returns). Each row carries a status, the number of times
its handler was started (``consume_times``), the last error and a ``version`` for optimistic
locking:

- NEW -> PROCESSING: claimed by one consumer (version checked, so two duplicates racing cannot
  both win), with a lease: a consumer killed inside its handler leaves PROCESSING behind, which
  another delivery takes over once the lease ran out;
- PROCESSING -> DONE: in the handler's own transaction, together with the business change, and
  again only if the version is still the claimed one;
- PROCESSING -> FAILED (retried by the broker) or PARKED (after ``max_attempts`` starts: kept
  for a person, ``orbitmq consumelog retry ID`` sends it again).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from orbitmq.client import RETRY_BOOKKEEPING, retry_topic
from orbitmq.errors import ClientError
from orbitmq.protocol.message import KEY_SEPARATOR, Message, MessageExt, PropertyKey
from orbitmq.reliable.db import Database, SqlHandle, adapt
from orbitmq.reliable.schema import (
    DEFAULT_CONSUME_LOG_TABLE,
    check_table_name,
    consume_log_ddl,
    create_tables,
)

__all__ = ["ConsumeStatus", "ConsumeRecord", "Claim", "ClaimResult", "ConsumeLog", "default_key"]

KeyFunction = Callable[[MessageExt], str]
_COLUMNS = ('id, consumer_group, topic, tags, "keys", msg_id, body, properties, status, '
            "consume_times, last_error, version, lease_until, created_at, updated_at")


class ConsumeStatus(enum.IntEnum):
    """A consume-log row's state (0-3 as the seed article's table; PARKED is ours)."""

    NEW = 0
    PROCESSING = 1
    FAILED = 2
    DONE = 3
    PARKED = 4


def default_key(msg: MessageExt) -> str:
    """The business key: the message's KEYS, else its message id (unique per send only)."""
    return KEY_SEPARATOR.join(msg.keys) or msg.uniq_key or msg.msg_id


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumeRecord:
    """One row of the consume log (times in ms since the epoch)."""

    id: int
    consumer_group: str
    topic: str
    tags: str
    keys: str
    msg_id: str | None
    body: bytes | None
    properties: dict[str, str]
    status: ConsumeStatus
    consume_times: int
    last_error: str | None
    version: int
    lease_until: int | None
    created_at: int
    updated_at: int

    @classmethod
    def from_db(cls, row: Sequence[Any]) -> ConsumeRecord:
        (id_, group, topic, tags, keys, msg_id, body, props, status, times, error, version, lease,
         created, updated) = row
        return cls(int(id_), group, topic, tags, keys, msg_id, None if body is None else bytes(body),
                   json.loads(props or "{}"), ConsumeStatus(status), int(times), error,
                   int(version), lease, int(created), int(updated))

    def resend_message(self) -> Message:
        """The message to send to ``%RETRY%{group}`` so that the group consumes it again."""
        if self.body is None:
            raise ClientError(f"consume log row {self.id} has no body stored; cannot resend")
        props = {k: v for k, v in self.properties.items()
                 if k not in RETRY_BOOKKEEPING | {PropertyKey.TAGS, PropertyKey.KEYS}}
        props[PropertyKey.RETRY_TOPIC] = self.topic
        keys = [k for k in self.properties.get(PropertyKey.KEYS, "").split(KEY_SEPARATOR) if k]
        return Message.with_system_properties(retry_topic(self.consumer_group), self.body,
                                              tags=self.tags or None, keys=keys or None,
                                              properties=props)


class ClaimResult(enum.Enum):
    """What a delivery found in the log."""

    RUN = "run"  # claimed: run the handler
    DUPLICATE = "duplicate"  # DONE already: acknowledge without running
    PARKED = "parked"  # parked (now or before): acknowledge, a person takes over
    BUSY = "busy"  # another consumer holds it (or won the race): reconsume later


@dataclasses.dataclass(frozen=True, slots=True)
class Claim:
    result: ClaimResult
    row_id: int = 0
    version: int = 0
    consume_times: int = 0


class ConsumeLog:
    """A consume-log table and the state changes of its rows.

    Args:
        database: a :class:`Database` or its URL; the handler's business tables live there too.
        table: the table's name (default ``orbitmq_consume_log``).
        max_attempts: handler starts before a message is parked (default 3).
        processing_timeout: seconds a claim holds; a PROCESSING row older than that is taken over
            by the next delivery (keep it above your handler's longest run).
        key: the business key of a message (default :func:`default_key`).
        group: the consumer group to record (default: the listener context's group).
        store_body: keep bodies and properties, which ``consumelog retry`` needs to resend.
        clock: seconds since the epoch.
    """

    def __init__(self, database: Database | str, *, table: str = DEFAULT_CONSUME_LOG_TABLE,
                 max_attempts: int = 3, processing_timeout: float = 60.0,
                 key: KeyFunction | None = None, group: str | None = None, store_body: bool = True,
                 clock: Callable[[], float] = time.time) -> None:
        if max_attempts < 1 or processing_timeout <= 0:
            raise ClientError("max_attempts >= 1 and processing_timeout > 0 are required")
        self.database = Database(database) if isinstance(database, str) else database
        self.table = check_table_name(table)
        self.max_attempts = max_attempts
        self.processing_timeout = processing_timeout
        self.key = key or default_key
        self.group = group
        self.store_body = store_body
        self._clock = clock
        self._created = False

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def create_table(self, conn: Any = None) -> None:
        """Create the table if missing (on ``conn``, or in a transaction of its own)."""
        if conn is not None:
            handle = adapt(conn)
            create_tables(handle, consume_log_ddl(handle.dialect, self.table))
            return
        with self.database.transaction() as handle:
            create_tables(handle, consume_log_ddl(handle.dialect, self.table))
        self._created = True

    def ensure_table(self) -> None:
        if not self._created:
            self.create_table()

    def close(self) -> None:
        self.database.close()

    # -- a delivery's life -----------------------------------------------------------------------
    def claim(self, msg: MessageExt, group: str, key: KeyFunction | None = None) -> Claim:
        """Record the delivery of ``msg`` and decide what to do with it (one transaction)."""
        self.ensure_table()
        ident = (group, msg.topic, msg.tags or "", (key or self.key)(msg))
        now = self.now_ms()
        body = bytes(msg.body) if self.store_body else None
        props = json.dumps(msg.properties if self.store_body else {}, sort_keys=True)
        where = 'consumer_group = ? AND topic = ? AND tags = ? AND "keys" = ?'
        with self.database.transaction() as h:
            h.execute(f'INSERT INTO {self.table} (consumer_group, topic, tags, "keys", msg_id, body, '
                      "properties, status, consume_times, version, created_at, updated_at) VALUES "
                      "(?, ?, ?, ?, ?, ?, ?, 0, 0, 1, ?, ?) ON CONFLICT (consumer_group, topic, "
                      'tags, "keys") DO NOTHING', (*ident, msg.msg_id, body, props, now, now))
            row = h.fetchone(f"SELECT id, status, consume_times, version, lease_until FROM "
                             f"{self.table} WHERE {where}", ident)
            assert row is not None
            return self._decide(h, now, *row)

    def _decide(self, h: SqlHandle, now: int, row_id: int, status: int, times: int, version: int,
                lease_until: int | None) -> Claim:
        state = ConsumeStatus(status)
        if state is ConsumeStatus.DONE:
            return Claim(ClaimResult.DUPLICATE, row_id, version, times)
        if state is ConsumeStatus.PARKED:
            return Claim(ClaimResult.PARKED, row_id, version, times)
        if state is ConsumeStatus.PROCESSING and lease_until is not None and lease_until >= now:
            return Claim(ClaimResult.BUSY, row_id, version, times)
        if times >= self.max_attempts:  # failed (or killed its consumer) too often: a poison message
            h.execute(f"UPDATE {self.table} SET status = 4, version = version + 1, lease_until = "
                      "NULL, updated_at = ? WHERE id = ? AND version = ?", (now, row_id, version))
            return Claim(ClaimResult.PARKED, row_id, version + 1, times)
        lease = now + int(self.processing_timeout * 1000)
        cur = h.execute(f"UPDATE {self.table} SET status = 1, consume_times = consume_times + 1, "
                        "version = version + 1, lease_until = ?, updated_at = ? "
                        "WHERE id = ? AND version = ?", (lease, now, row_id, version))
        if cur.rowcount != 1:  # another consumer changed it since we read it
            return Claim(ClaimResult.BUSY, row_id, version, times)
        return Claim(ClaimResult.RUN, row_id, version + 1, times + 1)

    def complete(self, handle: SqlHandle, claim: Claim) -> bool:
        """Mark the claimed row DONE in ``handle``'s transaction (the handler's); False when the
        claim was lost (taken over after its lease): then roll the business change back."""
        cur = handle.execute(f"UPDATE {self.table} SET status = 3, version = version + 1, "
                             "lease_until = NULL, last_error = NULL, updated_at = ? "
                             "WHERE id = ? AND version = ? AND status = 1",
                             (self.now_ms(), claim.row_id, claim.version))
        return bool(cur.rowcount == 1)

    def fail(self, claim: Claim, error: str) -> ConsumeStatus | None:
        """Record a failed start: FAILED, or PARKED once ``max_attempts`` starts failed. None when
        the claim was lost meanwhile."""
        with self.database.transaction() as h:
            cur = h.execute(f"UPDATE {self.table} SET status = CASE WHEN consume_times >= ? THEN 4 "
                            "ELSE 2 END, last_error = ?, version = version + 1, lease_until = NULL, "
                            "updated_at = ? WHERE id = ? AND version = ?",
                            (self.max_attempts, error[:2000], self.now_ms(), claim.row_id,
                             claim.version))
            if cur.rowcount != 1:
                return None
            row = h.fetchone(f"SELECT status FROM {self.table} WHERE id = ?", (claim.row_id,))
        assert row is not None
        return ConsumeStatus(row[0])

    # -- operators' side -------------------------------------------------------------------------
    def get(self, row_id: int) -> ConsumeRecord | None:
        self.ensure_table()
        row = self.database.handle().fetchone(f"SELECT {_COLUMNS} FROM {self.table} WHERE id = ?",
                                              (row_id,))
        return None if row is None else ConsumeRecord.from_db(row)

    def records(self, status: ConsumeStatus | None = None, limit: int = 100,
                group: str | None = None) -> list[ConsumeRecord]:
        """Rows (of ``status`` and ``group`` when given), oldest first."""
        self.ensure_table()
        conds: list[str] = []
        params: list[object] = []
        if status is not None:
            conds.append("status = ?")
            params.append(int(status))
        if group is not None:
            conds.append("consumer_group = ?")
            params.append(group)
        where = f" WHERE {' AND '.join(conds)}" if conds else ""
        return [ConsumeRecord.from_db(r) for r in self.database.handle().fetchall(
            f"SELECT {_COLUMNS} FROM {self.table}{where} ORDER BY id LIMIT ?", (*params, limit))]

    def counts(self) -> dict[ConsumeStatus, int]:
        self.ensure_table()
        found = dict(self.database.handle().fetchall(
            f"SELECT status, COUNT(*) FROM {self.table} GROUP BY status"))
        return {s: int(found.get(int(s), 0)) for s in ConsumeStatus}

    def reset(self, row_id: int) -> ConsumeRecord | None:
        """Make a FAILED or PARKED row NEW with no attempts, so that its next delivery runs the
        handler afresh; returns the row, None when there is no such FAILED/PARKED row."""
        self.ensure_table()
        with self.database.transaction() as h:
            cur = h.execute(f"UPDATE {self.table} SET status = 0, consume_times = 0, version = "
                            "version + 1, lease_until = NULL, updated_at = ? WHERE id = ? AND "
                            "status IN (2, 4)", (self.now_ms(), row_id))
            if cur.rowcount != 1:
                return None
            row = h.fetchone(f"SELECT {_COLUMNS} FROM {self.table} WHERE id = ?", (row_id,))
        return None if row is None else ConsumeRecord.from_db(row)
