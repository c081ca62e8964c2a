"""The order pipeline's core (examples/order_pipeline) on the shared session and servers: orders
in SQLite and transactional messages, the windowed stats job written exactly-once, the consumer,
and the summary check that `make pipeline` prints."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from spark_support import new_topic

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "order_pipeline"
sys.path.insert(0, str(EXAMPLE))

from orders import OrderStore, make_orders, place_orders, send_tick  # noqa: E402
from run import compare  # noqa: E402
from stats_consumer import StatsConsumer  # noqa: E402
from stats_job import start_stats_query  # noqa: E402


def test_order_stats_match_the_orders_in_sqlite(spark, namesrv, tmp_path):
    orders_topic = new_topic(namesrv, "PipeOrders", queues=4)
    stats_topic = new_topic(namesrv, "PipeStats", queues=2)
    store = OrderStore(tmp_path / "orders.sqlite")
    orders = make_orders(400, 1_700_000_000_000, 3 * 60_000)
    committed = place_orders(namesrv, store, orders, topic=orders_topic)
    assert 0 < committed < len(orders)  # some payments were declined and rolled back
    send_tick(namesrv, orders[-1].event_ms + 120_000, topic=orders_topic)
    query = start_stats_query(spark, namesrv, str(tmp_path / "ck"), order_topic=orders_topic,
                              stats_topic=stats_topic, available_now=True)
    assert query.awaitTermination(180) and query.exception() is None
    consumer = StatsConsumer(namesrv, stats_topic, quiet=True)
    consumer.start()
    deadline = time.monotonic() + 30
    while consumer.totals()[0] < committed and time.monotonic() < deadline:
        time.sleep(0.2)
    consumer.stop()
    assert compare(store.totals(), consumer.snapshot()) == []
    assert consumer.duplicates == 0 and consumer.totals()[0] == committed
