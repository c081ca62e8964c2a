"""The Structured Streaming job: per-minute revenue and order count per product, written to
OrderStats exactly-once.

Orders are read from OrderTopic, their JSON parsed, and grouped into one-minute event-time windows
with a 30-second watermark; in append mode a window is written once, when the watermark has
passed it, as one message per (minute, product) keyed ``<minute>:<product>``. Tick messages (no
product) move the watermark without counting as orders.
"""

from __future__ import annotations

from typing import Any

ORDER_SCHEMA = ("kind string, order_id string, product string, quantity int, amount double, "
                "event_ms long")


def order_stats(orders: Any) -> Any:
    """The stats of a DataFrame read from the order topic, as sink columns (body, keys, tags)."""
    from pyspark.sql import functions as F

    parsed = (orders.select(F.from_json(F.col("body").cast("string"), ORDER_SCHEMA).alias("o"))
              .select("o.*").withColumn("event_time", F.timestamp_millis("event_ms")))
    # Ticks must reach the watermark: the optimizer pushes a filter on input columns (grouping
    # keys included) below withWatermark, so ticks are aggregated too, count as no order, and
    # their group is dropped by a filter on an aggregate, which cannot be pushed down.
    is_order = F.col("kind") == "order"
    stats = (parsed.withWatermark("event_time", "30 seconds")
             .groupBy(F.window("event_time", "1 minute"), "product")
             .agg(F.round(F.sum(F.when(is_order, F.col("amount"))), 2).alias("revenue"),
                  F.count(F.when(is_order, 1)).alias("orders"))
             .filter(F.col("orders") > 0))
    minute_ms = F.unix_millis(F.col("window.start"))
    return stats.select(
        F.to_json(F.struct(minute_ms.alias("minute_ms"), "product", "revenue", "orders"))
        .alias("body"),
        F.concat_ws(":", minute_ms.cast("string"), "product").alias("keys"),
        F.lit("stats").alias("tags"),
    )


def start_stats_query(spark: Any, namesrv: str, checkpoint: str, *, order_topic: str = "OrderTopic",
                      stats_topic: str = "OrderStats", available_now: bool = False) -> Any:
    """Start the job; ``available_now`` processes what is there and stops, otherwise it runs
    every 2 seconds until stopped."""
    orders = (spark.readStream.format("orbitmq").option("namesrv", namesrv)
              .option("topic", order_topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "2000").load())
    writer = (order_stats(orders).writeStream.format("orbitmq").outputMode("append")
              .option("namesrv", namesrv).option("topic", stats_topic)
              .option("checkpointLocation", checkpoint).queryName("order_stats"))
    trigger = {"availableNow": True} if available_now else {"processingTime": "2 seconds"}
    return writer.trigger(**trigger).start()
