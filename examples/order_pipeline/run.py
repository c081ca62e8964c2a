"""The order pipeline end to end (``make pipeline``): it starts a standalone broker, the order
service, the Spark stats job and the stats consumer, shows progress, stops by itself and checks
the stats against the orders in SQLite.

    python examples/order_pipeline/run.py [--orders 3000] [--timeout 300]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from orders import OrderStore, make_orders, place_orders, send_tick  # noqa: E402
from stats_consumer import StatsConsumer  # noqa: E402
from stats_job import start_stats_query  # noqa: E402

from orbitmq import Admin  # noqa: E402
from orbitmq.testing.process import standalone_process  # noqa: E402

MINUTE_MS = 60_000


def compare(expected: dict, got: dict) -> list[str]:
    """Differences between SQLite's totals and the stats received (empty when they agree)."""
    problems = []
    for key in sorted(set(expected) | set(got)):
        want, have = expected.get(key), got.get(key)
        if want is None or have is None or want[1] != have[1] or abs(want[0] - have[0]) > 0.005:
            problems.append(f"minute {key[0]} {key[1]}: SQLite {want}, stats {have}")
    return problems


def run(args: argparse.Namespace, work: Path) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    broker = standalone_process(str(work / "broker"))
    try:
        namesrv = broker.wait_ready("namesrv", "broker")["namesrv"]
        print(f"broker ready, name server {namesrv}", flush=True)
        with Admin(namesrv) as admin:
            admin.create_topic("OrderTopic", read_queue_nums=4, write_queue_nums=4)
            admin.create_topic("OrderStats", read_queue_nums=2, write_queue_nums=2)
        return pipeline(args, work, namesrv)
    finally:
        broker.stop()


def pipeline(args: argparse.Namespace, work: Path, namesrv: str) -> int:
    from pyspark.sql import SparkSession

    from orbitmq.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("order-pipeline")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    query = start_stats_query(spark, namesrv, str(work / "checkpoint"))
    consumer = StatsConsumer(namesrv)
    consumer.start()
    store = OrderStore(work / "orders.sqlite")
    start_ms = (int(time.time() * 1000) // MINUTE_MS - 10) * MINUTE_MS
    orders = make_orders(args.orders, start_ms, 5 * MINUTE_MS)
    print(f"placing {len(orders)} orders over 5 minutes of event time", flush=True)

    def progress(done: int, committed: int) -> None:
        if done % 500 == 0 or done == len(orders):
            print(f"orders placed {done}/{len(orders)} (committed {committed}) | stats received "
                  f"{len(consumer.snapshot())} | stats batches {len(query.recentProgress)}",
                  flush=True)

    committed = place_orders(namesrv, store, orders, progress)
    send_tick(namesrv, orders[-1].event_ms + 2 * MINUTE_MS)
    deadline = time.monotonic() + args.timeout
    while consumer.totals()[0] < committed and time.monotonic() < deadline:
        if query.exception() is not None:
            break
        print(f"waiting for the last windows: {consumer.totals()[0]}/{committed} orders counted",
              flush=True)
        time.sleep(2)
    time.sleep(1)  # anything arriving late would be a duplicate: give it a moment
    query.stop()
    consumer.stop()
    spark.stop()
    return summary(store.totals(), consumer, committed, len(orders))


def summary(expected: dict, consumer: StatsConsumer, committed: int, placed: int) -> int:
    got = consumer.snapshot()
    orders, revenue = consumer.totals()
    print(f"\nsummary: {placed} orders placed, {committed} committed, "
          f"{placed - committed} declined (rolled back)")
    print(f"stats: {len(got)} (minute, product) windows, {orders} orders, revenue {revenue:.2f}")
    problems = compare(expected, got)
    if consumer.duplicates:
        problems.append(f"{consumer.duplicates} window(s) delivered more than once")
    if problems:
        print("summary check FAILED:\n  " + "\n  ".join(problems[:20]))
        return 1
    print(f"summary check OK: every window matches the {committed} orders in SQLite, "
          "each delivered once")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=3000)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="order-pipeline-") as tmp:
        return run(args, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
