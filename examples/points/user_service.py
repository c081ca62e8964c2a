"""The user service of the example: registering a user and announcing it, in one transaction.

The users table and the outbox row are written by the same database transaction, so a
registration that rolls back announces nothing, and one that commits is announced for sure: the
outbox relay sends the row whenever the broker is reachable.
"""

from __future__ import annotations

import json

from orbitmq import Message
from orbitmq.reliable import Database, Outbox

TOPIC = "UserRegistered"
WELCOME_POINTS = 100
outbox = Outbox()


def create_schema(db: Database) -> None:
    with db.transaction() as tx:
        tx.execute("CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, email TEXT NOT NULL)")
        outbox.create_table(tx)


def register(db: Database, name: str, email: str) -> bool:
    """Insert the user and the "registered" message together; False when the name is taken
    (the transaction rolls back, and the message with it)."""
    try:
        with db.transaction() as tx:
            outbox.add(tx, Message(TOPIC, json.dumps({"user": name, "points": WELCOME_POINTS})
                                   .encode(), tags="registered", keys=[name]))
            tx.execute("INSERT INTO users (name, email) VALUES (?, ?)", (name, email))
    except Exception as e:  # the driver's IntegrityError: sqlite3 and psycopg name it differently
        if "unique" not in str(e).lower():
            raise
        return False
    return True
