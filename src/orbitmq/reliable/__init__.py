"""Reliable messaging on a relational database: the transactional outbox and idempotent consumers.

- :class:`Outbox` + :class:`OutboxRelay`: write a message in the same transaction as the business
  change (``outbox.add(conn, msg)``); the relay sends committed rows in order and retries until
  the broker has them. Nothing is lost, per-key order is kept, relays can run side by side.
- :class:`ConsumeLog` + :func:`idempotent`: a consumer applies each message's effect once however
  often it is delivered, and parks messages that keep failing for a person to look at.

SQLite (the default, no server) and PostgreSQL (``pip install 'orbitmq[postgres]'``). See
docs/reliable.md. Imports the client SDK only.
"""

from orbitmq.reliable.consume_log import (
    ClaimResult,
    ConsumeLog,
    ConsumeRecord,
    ConsumeStatus,
    default_key,
)
from orbitmq.reliable.db import Database, Dialect, SqlHandle, adapt, parse_url
from orbitmq.reliable.idempotent import Outcome, consume_once, idempotent
from orbitmq.reliable.outbox import OUTBOX_ID_PROPERTY, Outbox, OutboxRow, OutboxStatus
from orbitmq.reliable.relay import (
    AsyncOutboxRelay,
    OutboxRelay,
    OutboxTransactionListener,
    RelayConfig,
)
from orbitmq.reliable.schema import DEFAULT_CONSUME_LOG_TABLE, DEFAULT_OUTBOX_TABLE

__all__ = [
    "Outbox",
    "OutboxRow",
    "OutboxStatus",
    "OUTBOX_ID_PROPERTY",
    "OutboxRelay",
    "AsyncOutboxRelay",
    "RelayConfig",
    "OutboxTransactionListener",
    "ConsumeLog",
    "ConsumeRecord",
    "ConsumeStatus",
    "ClaimResult",
    "default_key",
    "idempotent",
    "consume_once",
    "Outcome",
    "Database",
    "Dialect",
    "SqlHandle",
    "adapt",
    "parse_url",
    "DEFAULT_OUTBOX_TABLE",
    "DEFAULT_CONSUME_LOG_TABLE",
]
