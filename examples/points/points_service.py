"""The points service of the example: credits welcome points once per registered user, however
often the "registered" message is delivered.

The handler's change (the points) and the consume log's "done" commit in one transaction; a
duplicate delivery finds the row done and is acknowledged without crediting again.
"""

from __future__ import annotations

import json

from orbitmq import MessageExt
from orbitmq.reliable import ConsumeLog, Database, SqlHandle, idempotent


def create_schema(db: Database) -> None:
    with db.transaction() as tx:
        tx.execute("CREATE TABLE IF NOT EXISTS points "
                   "(name TEXT PRIMARY KEY, balance INTEGER NOT NULL)")


def make_listener(log: ConsumeLog):  # type: ignore[no-untyped-def]
    """The push consumer listener: one ``credit`` per message, deduplicated through ``log``."""

    @idempotent(log)
    def credit(msg: MessageExt, tx: SqlHandle) -> None:
        event = json.loads(msg.body)
        tx.execute("INSERT INTO points (name, balance) VALUES (?, ?) ON CONFLICT (name) "
                   "DO UPDATE SET balance = points.balance + excluded.balance",
                   (event["user"], event["points"]))

    return credit


def balances(db: Database) -> dict[str, int]:
    return {name: int(balance) for name, balance in
            db.handle().fetchall("SELECT name, balance FROM points ORDER BY name")}
