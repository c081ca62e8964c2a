"""Outbox throughput next to plain producer sends, in the same run on the same embedded broker.

- ``producer-sync``: Producer.send one message at a time (one round trip each);
- ``producer-async``: Producer.send_async for all, then wait (the producer's ceiling here);
- ``outbox-sqlite`` / ``outbox-postgres``: rows inserted by the application (transactions of
  ``--tx-rows`` rows) while one relay runs, timed from the first insert to the last row marked
  sent (acknowledged by the broker). Rows spread over ``--keys`` order keys.

Usage: python bench/reliable_bench.py [--messages 5000] [--json out.json]
PostgreSQL needs Debian's postgresql package (a private server is started). Never part of tests.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from orbitmq import Admin, Message, Producer
from orbitmq.reliable import Database, Outbox, OutboxRelay, OutboxStatus, RelayConfig
from orbitmq.testing import EmbeddedCluster

TOPIC = "ReliableBench"


def bench_producer(namesrv: str, n: int, body: bytes, asynchronous: bool) -> float:
    with Producer("bench-plain", namesrv=namesrv) as producer:
        producer.send(Message(TOPIC, body))  # warm the route
        start = time.perf_counter()
        if asynchronous:
            for f in [producer.send_async(Message(TOPIC, body, keys=f"k{i}")) for i in range(n)]:
                f.result(30)
        else:
            for i in range(n):
                producer.send(Message(TOPIC, body, keys=f"k{i}"))
        return n / (time.perf_counter() - start)


def bench_outbox(namesrv: str, url: str, n: int, body: bytes, keys: int, tx_rows: int) -> float:
    outbox = Outbox()
    with Database(url) as db:
        with db.transaction() as h:
            outbox.create_table(h)
        config = RelayConfig(poll_interval=0.01, batch_size_max=500)
        with OutboxRelay(url, namesrv=namesrv, config=config) as relay:
            start = time.perf_counter()
            for first in range(0, n, tx_rows):
                with db.transaction() as h:
                    for i in range(first, min(n, first + tx_rows)):
                        outbox.add(h, Message(TOPIC, body, keys=f"k{i % keys}"))
                relay.wake()
            while outbox.counts(db.handle())[OutboxStatus.SENT] < n:
                time.sleep(0.005)
            return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--tx-rows", type=int, default=10)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    body = b"x" * args.size
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster(tmp) as cluster:
        with Admin(cluster.namesrv) as admin:
            admin.create_topic(TOPIC, read_queue_nums=8, write_queue_nums=8)
        time.sleep(1)  # the route reaches the name server
        results["producer-sync"] = bench_producer(cluster.namesrv, args.messages, body, False)
        results["producer-async"] = bench_producer(cluster.namesrv, args.messages, body, True)
        results["outbox-sqlite"] = bench_outbox(cluster.namesrv, f"sqlite:///{Path(tmp) / 'o.db'}",
                                                args.messages, body, args.keys, args.tx_rows)
        try:
            from orbitmq.testing.postgres import PostgresServer

            with PostgresServer() as pg:
                results["outbox-postgres"] = bench_outbox(cluster.namesrv, pg.create_database(),
                                                          args.messages, body, args.keys,
                                                          args.tx_rows)
        except Exception as e:  # no PostgreSQL here: report the rest
            print(f"postgres skipped: {e}")
    base = results["producer-async"]
    for name, rate in results.items():
        print(f"{name:16s} {rate:9.0f} msg/s  {rate / base:5.2f}x producer-async")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
