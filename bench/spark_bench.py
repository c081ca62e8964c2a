"""Spark reading from and writing to OrbitMQ, next to Spark reading and writing Parquet.

Issue 19's workload, in one Spark session (``local[2]``, a standalone broker in a child process):
ROWS rows of BODY bytes in a topic of QUEUES queues (200,000 x 1 KiB over 8 by default), and

- batch reads: ``count()`` and ``sum(length(body))``, each with the columns declared
  (``.schema("queue_offset long")``, ``.schema("body binary")``: PySpark tells a Python source
  nothing of the columns a query uses, schema.py) and with the source's whole schema, next to the
  same query on a Parquet file holding the same rows (every column);
- batch writes of a cached DataFrame of the same shape (body, keys): at-least-once next to Spark
  writing it to Parquet, then ``exactlyOnce=true``;
- a streaming copy topic -> topic (Trigger.AvailableNow, ``maxOffsetsPerTrigger`` COPY_BATCH),
  exactly-once and at-least-once.

Exactly-once rates are compared with the same work done at-least-once in the same run (the
issue's target: at least half of it), the at-least-once copy with the at-least-once batch write;
reads and the at-least-once write with Parquet. Two Python data
sources that do no I/O at all (prebuilt Arrow batches in, batches dropped out) show the ceiling
PySpark's Python Data Source API sets here. Each case runs in alternation with what it is
compared with, so that both see the same load of a shared machine.

    python bench/spark_bench.py [--quick] [--rows N] [--body B] [--queues Q] [--repeat R]

Besides rows/s, each case reports the CPU a row costs in the broker process and on Spark's side
(this process, Spark's JVM and its Python workers: the sink's and the source's own work), read
from /proc around every timed run: on a machine whose cores are all busy that decides the ratios.

Never run as a test. Numbers depend on the machine's load: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from orbitmq import Admin, Message, Producer
from orbitmq.testing.process import standalone_process

COPY_BATCH = 50_000
_names = itertools.count()


_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _process_cpu() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds of the process and its reaped children) of every process."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(entry)] = (int(fields[1]), sum(int(v) for v in fields[11:15]) * _TICK_S)
    return out


class CpuMeter:
    """CPU seconds of the broker process, and of this process's other descendants and itself
    (Spark's JVM, its Python workers, the driver): what a run costs besides the wall clock."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid

    def read(self) -> tuple[float, float]:
        procs = _process_cpu()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        spark, todo = 0.0, [os.getpid()]
        while todo:
            pid = todo.pop()
            if pid == self.broker_pid or pid not in procs:
                continue
            spark += procs[pid][1]
            todo += children.get(pid, [])
        return procs.get(self.broker_pid, (0, 0.0))[1], spark


Run = tuple[float, float, float]  # wall seconds, broker CPU seconds, Spark-side CPU seconds


def _paired(a: Callable[[], object], b: Callable[[], object], repeat: int,
            meter: CpuMeter) -> tuple[list[Run], list[Run]]:
    """(wall, broker CPU, Spark CPU) of ``repeat`` runs of ``a`` and of ``b``, in alternation,
    after one warm-up run of each."""
    a()
    b()
    runs: tuple[list[Run], list[Run]] = ([], [])
    for _ in range(repeat):
        for action, out in ((a, runs[0]), (b, runs[1])):
            broker0, spark0 = meter.read()
            start = time.perf_counter()
            action()
            wall = time.perf_counter() - start
            broker1, spark1 = meter.read()
            out.append((wall, broker1 - broker0, spark1 - spark0))
    return runs


def _topic(namesrv: str, prefix: str, queues: int) -> str:
    topic = f"{prefix}{next(_names)}"
    with Admin(namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
    return topic


def _fill(namesrv: str, topic: str, rows: int, body_size: int) -> None:
    per_batch = max(1, min(500, (200 * 1024) // (body_size + 100)))
    body = b"x" * (body_size - 8)
    with Producer("spark-bench", namesrv) as producer:
        for lo in range(0, rows, per_batch):
            producer.send_batch([Message(topic, body + i.to_bytes(8, "big"), tags="bench",
                                         keys=[f"k{i}"])
                                 for i in range(lo, min(rows, lo + per_batch))])


def _register_ceilings(spark, rows: int, parts: int, body: int) -> None:
    """Two Python data sources doing no I/O, to show what PySpark's Python Data Source API itself
    allows on this machine: ``ready`` yields prebuilt Arrow batches of ``rows`` rows (``body``
    bytes, or an int64 column ``o`` when declared so), ``drop`` is a sink that discards them."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        InputPartition,
        WriterCommitMessage,
    )

    class ReadyReader(DataSourceReader):
        def __init__(self, schema) -> None:
            self.names = schema.fieldNames()

        def partitions(self):
            return [InputPartition(i) for i in range(parts)]

        def read(self, partition):
            import pyarrow as pa

            n = rows // parts
            for lo in range(0, n, 8192):
                k = min(8192, n - lo)
                if self.names == ["o"]:
                    yield pa.RecordBatch.from_arrays([pa.array(range(lo, lo + k), pa.int64())],
                                                     names=["o"])
                    continue
                offsets = pa.array(range(0, (k + 1) * body, body), pa.int32()).buffers()[1]
                values = pa.BinaryArray.from_buffers(pa.binary(), k, [None, offsets,
                                                                      pa.py_buffer(b"x" * body * k)])
                yield pa.RecordBatch.from_arrays([values], names=["body"])

    class DropWriter(DataSourceArrowWriter):
        def write(self, iterator):
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ceiling"

        def schema(self) -> str:
            return "body binary"

        def reader(self, schema):
            return ReadyReader(schema)

        def writer(self, schema, overwrite):
            return DropWriter()

    spark.dataSource.register(Ceiling)


class Bench:
    """One Spark session, one broker, one source topic and its Parquet twin. Each case is timed
    in alternation with what it is compared with (a, b, a, b, ...), so that both see the same
    load of a shared machine; the ratio is of their medians."""

    def __init__(self, spark, namesrv: str, work: Path, args: argparse.Namespace,
                 meter: CpuMeter) -> None:
        self.spark, self.namesrv, self.work, self.args = spark, namesrv, work, args
        self.meter = meter
        self.rows = args.rows
        self.results: list[tuple[str, list[Run], list[Run], str]] = []
        self.source = _topic(namesrv, "SparkBenchSource", args.queues)
        _fill(namesrv, self.source, self.rows, args.body)
        self.parquet = str(work / "source.parquet")
        self._load().write.mode("overwrite").parquet(self.parquet)  # every column
        assert spark.read.parquet(self.parquet).count() == self.rows

    def _load(self, schema: str | None = None):
        reader = self.spark.read.format("orbitmq").option("namesrv", self.namesrv)
        if schema is not None:
            reader = reader.schema(schema)
        return reader.option("topic", self.source).load()

    def _case(self, name: str, case: Callable[[], object], other: Callable[[], object],
              what: str) -> None:
        """Time ``case`` against ``other`` and record both."""
        case_s, other_s = _paired(case, other, self.args.repeat, self.meter)
        self.results.append((name, case_s, other_s, what))
        print(f"{name}: {case_s} (wall, broker CPU, Spark CPU) s, {what} {other_s}", flush=True)

    def reads(self) -> None:
        spark, rows = self.spark, self.rows
        body_sum = rows * self.args.body

        def total(df) -> Callable[[], None]:
            query = df.selectExpr("sum(length(body))")

            def run() -> None:
                got = query.first()[0]
                assert got == body_sum, (got, body_sum)
            return run

        parquet = spark.read.parquet(self.parquet)
        pq_sum = total(parquet)
        self._case("batch read, count (columns declared)",
                   lambda: self._load("queue_offset long").count(), parquet.count, "Parquet")
        self._case("batch read, count (whole schema)", lambda: self._load().count(),
                   parquet.count, "Parquet")
        self._case("batch read, sum(length(body)) (columns declared)",
                   total(self._load("body binary")), pq_sum, "Parquet")
        self._case("batch read, sum(length(body)) (whole schema)", total(self._load()), pq_sum,
                   "Parquet")
        self._case("no-I/O Python source (ceiling), count",
                   spark.read.format("ceiling").schema("o long").load().count, parquet.count,
                   "Parquet")
        self._case("no-I/O Python source (ceiling), sum(length(body))",
                   total(spark.read.format("ceiling").load()), pq_sum, "Parquet")

    def writes(self) -> Callable[[], None]:
        """Batch writes; returns the at-least-once write, which the copies are compared with."""
        body, rows = self.args.body, self.rows
        df = self.spark.range(rows, numPartitions=self.args.queues).selectExpr(
            f"cast(concat(repeat('x', {body - 12}), lpad(cast(id as string), 12, '0')) as binary)"
            " as body", "array(concat('k', id)) as keys").cache()
        df.count()
        target = _topic(self.namesrv, "SparkBenchSink", self.args.queues)

        def to_orbit(exactly_once: str) -> Callable[[], None]:
            def run() -> None:
                (df.write.format("orbitmq").option("namesrv", self.namesrv)
                 .option("topic", target).option("exactlyOnce", exactly_once)
                 .mode("append").save())
            return run

        parquet = str(self.work / "sink.parquet")

        def to_parquet() -> None:
            df.write.mode("overwrite").parquet(parquet)

        alo = to_orbit("false")
        self._case("batch write, at-least-once", alo, to_parquet, "Parquet")
        self._case("no-I/O Python sink (ceiling)",
                   lambda: df.write.format("ceiling").mode("append").save(), to_parquet,
                   "Parquet")
        self._case("batch write, exactlyOnce=true", to_orbit("true"), alo, "at-least-once write")
        return alo

    def copies(self, alo_write: Callable[[], None]) -> None:
        """Streaming copies of the source topic, each run into a new topic and checkpoint."""
        def copy(exactly_once: str) -> Callable[[], None]:
            def run() -> None:
                target = _topic(self.namesrv, "SparkBenchCopy", self.args.queues)
                query = (self.spark.readStream.format("orbitmq")
                         .option("namesrv", self.namesrv).option("topic", self.source)
                         .option("startingOffsets", "earliest")
                         .option("maxOffsetsPerTrigger", str(self.args.copy_batch)).load()
                         .selectExpr("body", "keys").writeStream.format("orbitmq")
                         .option("namesrv", self.namesrv).option("topic", target)
                         .option("exactlyOnce", exactly_once)
                         .option("checkpointLocation", str(self.work / f"ck{next(_names)}"))
                         .trigger(availableNow=True).start())
                query.awaitTermination()
                assert query.exception() is None
            return run

        alo_copy = copy("false")
        self._case("streaming copy, exactly-once", copy("true"), alo_copy, "at-least-once copy")
        self._case("streaming copy, at-least-once", alo_copy, alo_write, "at-least-once write")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40,000 rows, one timed run each")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--body", type=int, default=1024, help="body bytes (>= 16)")
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=None, help="timed runs after the warm-up")
    parser.add_argument("--copy-batch", type=int, default=COPY_BATCH,
                        help="maxOffsetsPerTrigger of the streaming copies")
    parser.add_argument("--only", choices=("reads", "writes", "copies"), default=None)
    args = parser.parse_args()
    args.rows = args.rows or (40_000 if args.quick else 200_000)
    args.repeat = args.repeat or (1 if args.quick else 3)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from orbitmq.spark import register

    began = time.monotonic()
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
            # as many partitions as OrbitMQ's read of these rows has (planning.pack_ranges)
            _register_ceilings(spark, args.rows, spark.sparkContext.defaultParallelism,
                               args.body)
            bench = Bench(spark, namesrv, work, args, CpuMeter(broker.proc.pid))
            if args.only in (None, "reads"):
                bench.reads()
            if args.only in (None, "writes", "copies"):
                alo = bench.writes()
                if args.only in (None, "copies"):
                    bench.copies(alo)
            spark.stop()
        finally:
            broker.stop()
    print(f"\nSpark local[2], {args.rows:,} rows of {args.body} B over {args.queues} queues, "
          f"{args.repeat} alternated run(s) after a warm-up, {time.monotonic() - began:.0f} s; "
          "rows/s of the median run (ratio of medians), ratio of the best runs")
    print("| work | rows/s | compared with | its rows/s | ratio | best-run ratio |\n"
          "|---|---:|---|---:|---:|---:|")
    for name, case_s, other_s, what in bench.results:
        case_wall, other_wall = statistics.median(r[0] for r in case_s), \
            statistics.median(r[0] for r in other_s)
        case, other = args.rows / case_wall, args.rows / other_wall
        best = min(r[0] for r in other_s) / min(r[0] for r in case_s)
        print(f"| {name} | {case:,.0f} | {what} | {other:,.0f} | {case / other:.2f} | {best:.2f} |")
    print("\nCPU per row (median over the runs, microseconds): the broker process; Spark's side "
          "(driver, JVM, Python workers: the sink's work included)")
    print("| work | broker | Spark's side | compared with: broker | Spark's side |\n"
          "|---|---:|---:|---:|---:|")
    for name, case_s, other_s, _what in bench.results:
        def us(runs: list[Run], i: int) -> str:
            return f"{statistics.median(r[i] for r in runs) / args.rows * 1e6:.1f}"
        print(f"| {name} | {us(case_s, 1)} | {us(case_s, 2)} | {us(other_s, 1)} | "
              f"{us(other_s, 2)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
