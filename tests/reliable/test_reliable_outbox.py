"""The outbox table on SQLite and PostgreSQL, without a broker: writes in the caller's transaction,
claiming in order, per-key blocking, concurrent claimers."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from orbitmq import Message
from orbitmq.errors import ClientError
from orbitmq.reliable import Database, Outbox, OutboxStatus, adapt, parse_url
from orbitmq.reliable.outbox import OutboxRow, backoff_ms, select_in_order


def _driver_connection(url: str):
    """The application's own connection, as it would open it (not the library's)."""
    dialect, target = parse_url(url)
    if dialect.value == "sqlite":
        return sqlite3.connect(target)
    import psycopg

    return psycopg.connect(target)


def test_add_joins_the_callers_transaction(db_url):
    outbox = Outbox()
    with Database(db_url) as db, db.transaction() as h:
        outbox.create_table(h)
    conn = _driver_connection(db_url)
    try:
        cur = conn.cursor()
        cur.execute("CREATE TABLE users (name TEXT)")
        conn.commit()
        cur.execute("INSERT INTO users VALUES ('ann')")
        outbox.add(conn, Message("UserTopic", b"ann", tags="registered", keys=["ann"]))
        conn.rollback()  # the business change fails: the message must not exist either
        assert outbox.counts(conn)[OutboxStatus.PENDING] == 0
        cur.execute("INSERT INTO users VALUES ('bob')")
        row_id = outbox.add(conn, Message("UserTopic", b"bob", tags="registered", keys=["bob"],
                                          properties={"source": "web"}, delay_level=2))
        conn.commit()
        row = outbox.get(conn, row_id)
        assert row is not None and row.status is OutboxStatus.PENDING and row.attempts == 0
        assert (row.topic, row.tags, row.keys, row.order_key, row.body) == (
            "UserTopic", "registered", "bob", "bob", b"bob")
        msg = row.message()
        assert msg.delay_level == 2 and msg.keys == ["bob"]
        assert msg.properties == {"source": "web", "ORBITMQ_OUTBOX_ID": str(row_id)}
    finally:
        conn.close()


def test_add_through_sqlalchemy_session(db_url):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.orm import Session

    outbox = Outbox()
    url = db_url.replace("postgresql://", "postgresql+psycopg://")
    engine = sqlalchemy.create_engine(url)
    try:
        with Session(engine) as session:
            outbox.create_table(session)
            session.commit()
        with Session(engine) as session:
            session.execute(sqlalchemy.text("CREATE TABLE points (user_name TEXT, points INT)"))
            session.commit()
        with Session(engine) as session, session.begin():
            session.execute(sqlalchemy.text("INSERT INTO points VALUES ('ann', 100)"))
            outbox.add(session, Message("PointsTopic", b"ann", keys="ann"))
        with Session(engine) as session:
            session.execute(sqlalchemy.text("INSERT INTO points VALUES ('bob', 100)"))
            outbox.add(session, Message("PointsTopic", b"bob", keys="bob"))
            session.rollback()
        with Session(engine) as session:
            rows = outbox.unsent(session)
            assert [r.body for r in rows] == [b"ann"]
    finally:
        engine.dispose()


def test_add_refuses_what_it_cannot_store(tmp_path):
    outbox = Outbox()
    conn = sqlite3.connect(tmp_path / "x.db")
    with pytest.raises(ClientError):
        outbox.add(conn, Message("T", b""))
    with pytest.raises(ClientError):
        outbox.add(object(), Message("T", b"x"))
    with pytest.raises(ClientError):
        Outbox("bad name; drop table")
    conn.close()


def _row(row_id: int, key: str | None) -> OutboxRow:
    return OutboxRow(row_id, "T", None, key, key, b"x", {}, OutboxStatus.PENDING, 0, None, 0, 0)


def test_select_in_order_holds_back_keys_behind_unsent_rows():
    rows = [_row(1, "a"), _row(2, "a"), _row(3, "b"), _row(5, None), _row(6, "b"), _row(7, "c")]
    # b's row 4 is unsent and not ours (failed earlier, not due): 6 must wait; 3 is before it
    before = {1: 0, 2: 1, 3: 0, 6: 2, 7: 1}  # c has an unsent row elsewhere
    assert [r.id for r in select_in_order(rows, before)] == [1, 2, 3, 5]


def test_backoff_doubles_up_to_the_cap():
    assert [backoff_ms(n, 100, 1000) for n in range(1, 7)] == [100, 200, 400, 800, 1000, 1000]


def test_claim_order_blocking_and_retry(db_url):
    clock = [1000.0]
    outbox = Outbox(clock=lambda: clock[0])
    with Database(db_url) as db:
        with db.transaction() as h:
            outbox.create_table(h)
            for key, body in [("k1", b"1"), ("k1", b"2"), ("k2", b"3"), (None, b"4")]:
                outbox.add(h, Message("T", body, keys=key))
        with db.transaction() as h:
            first = outbox.claim(h, "relay-a", limit=1, lease_ms=10_000)
        with db.transaction() as h:  # row 2 waits behind row 1, claimed by relay-a
            second = outbox.claim(h, "relay-b", limit=10, lease_ms=10_000)
        assert [r.body for r in first] == [b"1"] and [r.body for r in second] == [b"3", b"4"]
        with db.transaction() as h:
            outbox.mark_failed(h, "relay-a", [(first[0], "broker down")], base_ms=1000,
                               max_ms=8000, max_attempts=2)
            outbox.mark_sent(h, "relay-b", [(r.id, f"m{r.id}") for r in second])
        with db.transaction() as h:  # row 1 is not due for a second; row 2 still waits
            assert outbox.claim(h, "relay-b", limit=10, lease_ms=10_000) == []
        clock[0] += 1.5
        with db.transaction() as h:
            again = outbox.claim(h, "relay-b", limit=10, lease_ms=10_000)
            assert [r.body for r in again] == [b"1", b"2"] and again[0].attempts == 1
            outbox.mark_failed(h, "relay-b", [(again[0], "still down")], base_ms=1000,
                               max_ms=8000, max_attempts=2)
            outbox.release(h, "relay-b", [again[1].id])
        row = outbox.get(db.handle(), again[0].id)
        assert row is not None and row.status is OutboxStatus.FAILED and row.attempts == 2
        assert row.last_error == "still down"
        clock[0] += 100
        with db.transaction() as h:  # FAILED holds its key until an operator retries it
            assert outbox.claim(h, "relay-b", limit=10, lease_ms=10_000) == []
            assert outbox.retry(h) == 2
            assert [r.body for r in outbox.claim(h, "relay-b", 10, 10_000)] == [b"1", b"2"]


def test_expired_claims_are_taken_over(db_url):
    clock = [1000.0]
    outbox = Outbox(clock=lambda: clock[0])
    with Database(db_url) as db:
        with db.transaction() as h:
            outbox.create_table(h)
            outbox.add(h, Message("T", b"x", keys="k"))
        with db.transaction() as h:
            assert len(outbox.claim(h, "dead-relay", 10, lease_ms=2000)) == 1
        with db.transaction() as h:
            assert outbox.claim(h, "live-relay", 10, lease_ms=2000) == []
        clock[0] += 2.5
        with db.transaction() as h:
            (row,) = outbox.claim(h, "live-relay", 10, lease_ms=2000)
            assert outbox.mark_sent(h, "dead-relay", [(row.id, "late")]) == 0  # not its claim now
            assert outbox.mark_sent(h, "live-relay", [(row.id, "m1")]) == 1


def test_concurrent_claimers_never_share_a_row_and_keep_key_order(db_url):
    outbox = Outbox()
    rows_max, keys = 400, 50
    with Database(db_url) as db:
        with db.transaction() as h:
            outbox.create_table(h)
            for i in range(rows_max):
                outbox.add(h, Message("T", str(i).encode(), keys=f"k{i % keys}"))
        sent_log: list[tuple[str, int, str]] = []  # (owner, id, key) in the order marked sent
        log_lock = threading.Lock()
        errors: list[BaseException] = []

        def relay(owner: str) -> None:
            try:
                while True:
                    with db.transaction() as h:
                        rows = outbox.claim(h, owner, limit=16, lease_ms=60_000)
                    if not rows:
                        if outbox.counts(db.handle())[OutboxStatus.PENDING] == 0:
                            return
                        continue
                    time.sleep(0.002)  # the send: other relays claim meanwhile
                    with db.transaction() as h, log_lock:
                        assert outbox.mark_sent(h, owner, [(r.id, "x") for r in rows]) == len(rows)
                        sent_log.extend((owner, r.id, r.order_key or "") for r in rows)
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        threads = [threading.Thread(target=relay, args=(f"relay-{n}",)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        ids = [i for _, i, _ in sent_log]
        assert sorted(ids) == list(range(1, rows_max + 1))  # each row exactly once
        for k in range(keys):
            per_key = [i for _, i, key in sent_log if key == f"k{k}"]
            assert per_key == sorted(per_key)
        assert len({owner for owner, _, _ in sent_log}) > 1


def test_adapt_rejects_unknown_urls_and_memory_sqlite():
    with pytest.raises(ClientError):
        parse_url("mysql://x")
    with pytest.raises(ClientError):
        parse_url("sqlite:///:memory:")
    assert parse_url("sqlite:////tmp/a.db")[1] == "/tmp/a.db"
    assert parse_url("postgres://u@h:1/d")[1] == "postgresql://u@h:1/d"
    with pytest.raises(ClientError):
        adapt(42)
