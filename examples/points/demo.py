"""User registration -> welcome points, with a transactional outbox and an idempotent consumer.

    .venv/bin/python examples/points/demo.py --db sqlite:///points-demo.db
    .venv/bin/python examples/points/demo.py --private-postgres
    .venv/bin/python examples/points/demo.py --db postgresql://user:password@host:5432/demo

Without --namesrv it starts an embedded name server and broker of its own (in a temporary
directory); with --namesrv HOST:PORT it uses yours (`make run`). --points-db puts the points
service in a database of its own (default: the same database). --private-postgres starts a
throwaway PostgreSQL server from Debian's postgresql package (as the tests do) and uses it.

What it shows: registrations write the user and the message in one transaction (a rolled-back
registration sends nothing); the relay delivers the messages; the points service credits each
user once, even when a message is delivered twice (the demo sends one again on purpose).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator

import points_service
import user_service

from orbitmq import (
    Admin,
    ConsumeFrom,
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
    TopicExistsError,
)
from orbitmq.reliable import ConsumeLog, Database, OutboxRelay, RelayConfig

USERS = [("ann", "ann@example.com"), ("bob", "bob@example.com"), ("cid", "cid@example.com")]
WAIT_S = 60


@contextlib.contextmanager
def name_server(namesrv: str | None) -> Iterator[str]:
    if namesrv:
        yield namesrv
        return
    from orbitmq.testing import EmbeddedCluster

    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster(tmp) as cluster:
        yield cluster.namesrv


def wait_for(predicate, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            sys.exit(f"gave up waiting for {what}")
        time.sleep(0.1)


def create_topic(namesrv: str) -> None:
    with Admin(namesrv) as admin:
        try:
            admin.create_topic(user_service.TOPIC, read_queue_nums=4, write_queue_nums=4)
        except TopicExistsError:
            pass  # an earlier run against the same server created it


def run(namesrv: str, users_db: Database, points_db: Database) -> None:
    user_service.create_schema(users_db)
    points_service.create_schema(points_db)
    create_topic(namesrv)
    new = sum(user_service.register(users_db, name, email) for name, email in USERS)
    taken = not user_service.register(users_db, "ann", "other@example.com")
    print(f"registered {new} new users; a second 'ann' rolled back: {taken}")

    log = ConsumeLog(points_db, processing_timeout=30)
    credit = points_service.make_listener(log)
    handled: Counter[str] = Counter()  # acknowledged deliveries per user

    def listener(messages, context):  # type: ignore[no-untyped-def]
        result = credit(messages, context)
        if result is ConsumeResult.SUCCESS:
            handled.update(m.keys[0] for m in messages)
        return result

    consumer = PushConsumer("points-service", namesrv=namesrv, consume_from=ConsumeFrom.FIRST,
                            rebalance_interval_ms=1000)
    consumer.subscribe(user_service.TOPIC, "registered", listener)
    with OutboxRelay(users_db, namesrv=namesrv, config=RelayConfig(poll_interval=0.1)) as relay, \
            consumer:
        wait_for(lambda: len(points_service.balances(points_db)) == len(USERS), "points")
        print(f"relay sent {relay.sent_total} messages; points: {points_service.balances(points_db)}")
        before = handled["ann"]
        with Producer("demo-duplicate", namesrv=namesrv) as producer:  # a delivery twice over
            producer.send(Message(user_service.TOPIC, b'{"user": "ann", "points": 100}',
                                  tags="registered", keys=["ann"]))
        wait_for(lambda: handled["ann"] > before, "the duplicate delivery")
    final = points_service.balances(points_db)
    print(f"ann's message delivered again, acknowledged without a credit; points: {final}")
    assert final == {name: 100 for name, _ in USERS}, final
    print("every user credited exactly once")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", default="sqlite:///points-demo.db",
                        help="the user service's database URL")
    parser.add_argument("--points-db", default=None, help="the points service's (default: --db)")
    parser.add_argument("--namesrv", default=None, help="HOST:PORT (default: an embedded one)")
    parser.add_argument("--private-postgres", action="store_true",
                        help="run on a throwaway PostgreSQL server instead of --db")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.private_postgres:
            from orbitmq.testing.postgres import PostgresServer

            args.db = stack.enter_context(PostgresServer()).create_database("demo")
            print(f"private PostgreSQL at {args.db}")
        namesrv = stack.enter_context(name_server(args.namesrv))
        users_db = stack.enter_context(Database(args.db))
        points_db = stack.enter_context(Database(args.points_db or args.db))
        run(namesrv, users_db, points_db)


if __name__ == "__main__":
    main()
