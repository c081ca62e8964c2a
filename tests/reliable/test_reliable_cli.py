"""``orbitmq outbox`` and ``orbitmq consumelog`` through click's CliRunner, plus ``outbox relay`` as
a real process; a message that keeps failing is parked, then retried from the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid

from click.testing import CliRunner
from reliable_support import create_topic, wait_until

from orbitmq import ConsumeFrom, Message, Producer, PushConsumer
from orbitmq.cli.main import cli
from orbitmq.reliable import ConsumeLog, ConsumeStatus, Database, Outbox, OutboxStatus, idempotent


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_outbox_status_and_retry(db_url):
    clock = [1000.0]
    outbox = Outbox(clock=lambda: clock[0])
    assert "outbox table orbitmq_outbox ready" in run("outbox", "init", "--db", db_url)
    with Database(db_url) as db:
        with db.transaction() as h:
            for i in range(3):
                outbox.add(h, Message("CliTopic", b"x", keys=f"k{i}"))
        with db.transaction() as h:
            rows = outbox.claim(h, "relay", 10, 10_000)
            outbox.mark_sent(h, "relay", [(rows[0].id, "m1")])
            outbox.mark_failed(h, "relay", [(rows[1], "BrokerError: no route")], base_ms=60_000,
                               max_ms=60_000, max_attempts=1)
            outbox.release(h, "relay", [rows[2].id])
    text = run("outbox", "status", "--db", db_url)
    assert "pending: 1  sent: 1  failed: 1" in text
    assert "BrokerError: no route" in text and "FAILED" in text
    data = json.loads(run("outbox", "status", "--db", db_url, "--format", "json"))
    assert data["counts"] == {"pending": 1, "sent": 1, "failed": 1}
    assert [r["id"] for r in data["unsent"]] == [2, 3]
    assert "1 row(s) due now" in run("outbox", "retry", "--db", db_url, "2")
    with Database(db_url) as db:
        row = outbox.get(db.handle(), 2)
        assert row is not None and row.status is OutboxStatus.PENDING and row.attempts == 0
    assert "2 row(s) due now" in run("outbox", "retry", "--db", db_url, "--all")
    bad = CliRunner().invoke(cli, ["outbox", "retry", "--db", db_url])
    assert bad.exit_code == 2


def test_relay_process_sends_until_interrupted(tmp_path, cluster):
    db_url = f"sqlite:///{tmp_path / 'relay.db'}"
    topic = f"CliRelay-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.namesrv, topic)
    outbox = Outbox()
    with Database(db_url) as db, db.transaction() as h:
        outbox.create_table(h)
        for i in range(20):
            outbox.add(h, Message(topic, f"{i}".encode(), keys=f"k{i % 3}"))
    proc = subprocess.Popen([sys.executable, "-m", "orbitmq.cli.main", "outbox", "relay", "--db",
                             db_url, "--namesrv", cluster.namesrv, "--poll-interval", "0.05"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        def all_sent() -> bool:
            with Database(db_url) as db:
                return outbox.counts(db.handle())[OutboxStatus.SENT] == 20

        wait_until(all_sent, 30, "the relay process to send every row")
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "orbitmq outbox relay started" in out and "stopped sent=20 failed=0" in out


def test_parked_message_retried_from_the_cli(db_url, cluster):
    topic, group = f"CliPark-{uuid.uuid4().hex[:8]}", f"park-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.namesrv, topic, queues=1)
    with Database(db_url) as db, db.transaction() as h:
        h.execute("CREATE TABLE orders (id TEXT PRIMARY KEY)")
    log = ConsumeLog(db_url)  # parks after 3 attempts
    broken = threading.Event()
    broken.set()

    @idempotent(log)
    def handler(msg, tx):
        if broken.is_set():
            raise RuntimeError("inventory service unavailable")
        tx.execute("INSERT INTO orders (id) VALUES (?)", (msg.keys[0],))

    consumer = PushConsumer(group, namesrv=cluster.namesrv, consume_from=ConsumeFrom.FIRST,
                            rebalance_interval_ms=1000)
    consumer.subscribe(topic, "*", handler)
    with consumer:
        with Producer("park-producer", namesrv=cluster.namesrv) as producer:
            producer.send(Message(topic, b'{"order": 7}', tags="created", keys=["order-7"]))
        wait_until(lambda: log.counts()[ConsumeStatus.PARKED] == 1, 40, "the message parked")
        listed = run("consumelog", "list", "--db", db_url, "--status", "parked")
        assert "order-7" in listed and "inventory service unavailable" in listed
        (record,) = log.records(ConsumeStatus.PARKED)
        assert record.consume_times == 3
        broken.clear()  # the cause is fixed; an operator retries the message
        out = run("consumelog", "retry", str(record.id), "--db", db_url, "--namesrv",
                  cluster.namesrv)
        assert f"row {record.id} (CliPark" in out and f"resent to %RETRY%{group}" in out
        wait_until(lambda: log.counts()[ConsumeStatus.DONE] == 1, 30, "the retried message done")
    with Database(db_url) as db:
        assert db.handle().fetchall("SELECT id FROM orders") == [("order-7",)]
    assert json.loads(run("consumelog", "list", "--db", db_url, "--format", "json"))["status"] == "done"
    failed = CliRunner().invoke(cli, ["consumelog", "retry", str(record.id), "--db", db_url,
                                      "--no-resend"])
    assert failed.exit_code == 1 and "is done, not failed or parked" in failed.output
    log.close()
