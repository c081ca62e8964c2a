"""Spark reading from and writing to OrbitMQ, next to Spark reading and writing Parquet.

In one run, on ``local[2]`` with a standalone broker in a child process: for 1 KiB and 100-byte
bodies and 4 and 8 queues, the rows/s of a batch read of a topic (into Spark's ``noop`` sink) next
to a batch read of the same rows from a local Parquet file; then the sink's rows/s (at-least-once
and exactly-once) next to Spark writing the same DataFrame to Parquet. Prints a table with ratios.

    python bench/spark_bench.py [--quick] [--rows N]

Never run as a test. Numbers depend on the machine's load: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from orbitmq import Admin, Message, Producer
from orbitmq.testing.process import standalone_process


def _timed(action: Callable[[], object], repeat: int) -> float:
    """Median seconds of ``repeat`` runs after one warm-up run."""
    action()
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def _fill(namesrv: str, topic: str, queues: int, rows: int, body_size: int) -> None:
    with Admin(namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
    per_batch = max(1, min(500, (200 * 1024) // (body_size + 100)))
    body = b"x" * (body_size - 8)
    with Producer("spark-bench", namesrv) as producer:
        for lo in range(0, rows, per_batch):
            producer.send_batch([Message(topic, body + i.to_bytes(8, "big"), tags="bench",
                                         keys=[f"k{i}"])
                                 for i in range(lo, min(rows, lo + per_batch))])


def _read_case(spark, namesrv: str, work: Path, rows: int, body: int, queues: int,
               repeat: int) -> tuple[str, float, float]:
    topic = f"SparkBench{body}b{queues}q"
    _fill(namesrv, topic, queues, rows, body)
    source = (spark.read.format("orbitmq").option("namesrv", namesrv).option("topic", topic)
              .load())
    parquet = str(work / f"{topic}.parquet")
    source.write.mode("overwrite").parquet(parquet)  # the same rows, every column
    assert spark.read.parquet(parquet).count() == rows
    orbit_s = _timed(lambda: source.write.format("noop").mode("overwrite").save(), repeat)
    parquet_s = _timed(
        lambda: spark.read.parquet(parquet).write.format("noop").mode("overwrite").save(), repeat)
    return f"read {body} B bodies, {queues} queues", rows / orbit_s, rows / parquet_s


def _write_cases(spark, namesrv: str, work: Path, rows: int, eo_rows: int,
                 repeat: int) -> list[tuple[str, float, float]]:
    with Admin(namesrv) as admin:
        admin.create_topic("SparkBenchSink", read_queue_nums=8, write_queue_nums=8)
    out = []
    for body in (1024, 100):
        df = spark.range(rows, numPartitions=4).selectExpr(
            f"cast(concat(repeat('x', {body - 12}), lpad(cast(id as string), 12, '0')) as binary)"
            " as body", "concat('k', id) as keys").cache()
        df.count()
        parquet = str(work / f"sink{body}.parquet")

        def to_orbit(frame=df, exactly_once: str = "false") -> None:
            (frame.write.format("orbitmq").option("namesrv", namesrv)
             .option("topic", "SparkBenchSink").option("exactlyOnce", exactly_once)
             .mode("append").save())

        orbit_s = _timed(to_orbit, repeat)
        parquet_s = _timed(lambda frame=df, p=parquet: frame.write.mode("overwrite").parquet(p),
                           repeat)
        out.append((f"write {body} B bodies, at-least-once", rows / orbit_s, rows / parquet_s))
        small = df.limit(eo_rows).cache()
        small.count()
        eo_s = _timed(lambda frame=small: to_orbit(frame, "true"), 1)
        small_parquet_s = _timed(
            lambda frame=small, p=parquet: frame.write.mode("overwrite").parquet(p), 1)
        out.append((f"write {body} B bodies, exactly-once", eo_rows / eo_s,
                    eo_rows / small_parquet_s))
        df.unpersist()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rows, one timed run each")
    parser.add_argument("--rows", type=int, default=None)
    args = parser.parse_args()
    rows = args.rows or (40_000 if args.quick else 200_000)
    eo_rows = 5_000 if args.quick else 20_000
    repeat = 1 if args.quick else 3
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from orbitmq.spark import register

    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
        work = Path(tmp)
        broker = standalone_process(str(work / "broker"))
        try:
            namesrv = broker.wait_ready("namesrv", "broker")["namesrv"]
            spark = (SparkSession.builder.master("local[2]").appName("orbitmq-spark-bench")
                     .config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            register(spark)
            results = [_read_case(spark, namesrv, work, rows, body, queues, repeat)
                       for body in (1024, 100) for queues in (4, 8)]
            results += _write_cases(spark, namesrv, work, rows, eo_rows, repeat)
            spark.stop()
        finally:
            broker.stop()
    print(f"\nSpark local[2], {rows} rows per case ({eo_rows} for exactly-once), "
          f"median of {repeat} run(s) after a warm-up")
    print("| case | OrbitMQ rows/s | Parquet rows/s | OrbitMQ / Parquet |\n|---|---:|---:|---:|")
    for name, orbit, parquet in results:
        print(f"| {name} | {orbit:,.0f} | {parquet:,.0f} | {orbit / parquet:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
