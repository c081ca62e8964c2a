"""Structured Streaming reads: admission control, restart from a checkpoint, queues added live."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows
from spark_support import new_topic, produce

from orbitmq import Admin, Message, Producer
from orbitmq.spark.options import parse_read_options
from orbitmq.spark.reader import OrbitMQStreamReader
from orbitmq.spark.schema import read_schema


class BatchLog:
    """What foreachBatch saw, by batch id (a replayed batch overwrites its earlier attempt)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[tuple[int, int]]] = {}
        self.lock = threading.Lock()

    def __call__(self, df, batch_id: int) -> None:
        rows = [(r.queue_id, r.queue_offset) for r in df.select("queue_id", "queue_offset").collect()]
        with self.lock:
            self.batches[batch_id] = rows

    def rows(self) -> list[tuple[int, int]]:
        with self.lock:
            return [row for b in sorted(self.batches) for row in self.batches[b]]


def _stream(spark, namesrv: str, topic: str, **options: str):
    reader = spark.readStream.format("orbitmq").option("namesrv", namesrv).option("topic", topic)
    for name, value in {"startingOffsets": "earliest", **options}.items():
        reader = reader.option(name, value)
    return reader.load()


def _wait(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_max_offsets_per_trigger_and_restart_from_checkpoint(spark, namesrv, tmp_path):
    topic = new_topic(namesrv, "StreamLimit", queues=4)
    produce(namesrv, topic, 4500)
    log = BatchLog()

    latest: list[object] = []

    def run() -> list[int]:
        q = (_stream(spark, namesrv, topic, maxOffsetsPerTrigger="1000").writeStream
             .foreachBatch(log).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
        assert q.awaitTermination(180), "the availableNow query did not finish"
        assert q.exception() is None
        latest.append(q.lastProgress["sources"][0]["latestOffset"])
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]

    first = run()
    assert first == [1000, 1000, 1000, 1000, 500]
    produce(namesrv, topic, 2500, start=4500)
    second = run()
    assert sum(second) == 2500 and max(second) <= 1000
    rows = log.rows()
    assert len(rows) == len(set(rows)) == 7000  # no repeat
    per_queue: dict[int, list[int]] = {}
    for qid, offset in rows:
        per_queue.setdefault(qid, []).append(offset)
    # no gap: each queue read from 0 to its end without a hole, in order across the restart
    assert all(offsets == list(range(len(offsets))) for offsets in per_queue.values())
    assert sorted(log.batches) == list(range(len(log.batches)))
    # the source reports the queues' newest offsets (reportLatestOffset): nothing left behind
    reported = [json.loads(x) if isinstance(x, str) else x for x in latest]
    assert sum(reported[-1][topic].values()) == 7000 and sum(reported[0][topic].values()) == 4500


def test_queues_added_while_the_query_runs_are_picked_up(spark, namesrv, tmp_path):
    topic = new_topic(namesrv, "StreamGrow", queues=2)
    produce(namesrv, topic, 100, batch=10)  # batches go round robin: both queues get some
    log = BatchLog()
    q = (_stream(spark, namesrv, topic).writeStream.foreachBatch(log)
         .option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="300 milliseconds").start())
    try:
        _wait(lambda: len(log.rows()) >= 100, 90, "the first 100 rows")
        with Admin(namesrv) as admin:
            admin.update_topic(topic, read_queue_nums=6, write_queue_nums=6)
        with Producer("spark-test-producer", namesrv) as producer:
            for i in range(60):
                target = 2 + i % 4
                producer.send(Message(topic, f"new-{i}".encode()),
                              lambda qs, _m, qid: next(mq for mq in qs if mq.queue_id == qid),
                              target)
        _wait(lambda: len(log.rows()) >= 160, 90, "the rows of the new queues")
    finally:
        q.stop()
    rows = log.rows()
    assert len(rows) == len(set(rows)) == 160
    assert {qid for qid, _ in rows} == set(range(6))


def _reader(**options: str) -> OrbitMQStreamReader:
    opts = parse_read_options({"namesrv": "127.0.0.1:1", "topic": "T", **options}, streaming=True)
    return OrbitMQStreamReader(opts, read_schema())


def test_default_read_limit_follows_the_options():
    assert _reader().getDefaultReadLimit() == ReadAllAvailable()
    assert _reader(maxOffsetsPerTrigger="10").getDefaultReadLimit() == ReadMaxRows(10)
    both = _reader(maxOffsetsPerTrigger="10", minOffsetsPerTrigger="5")
    assert both.getDefaultReadLimit() == ReadMinRows(5)


def test_min_offsets_wait_for_data_until_max_trigger_delay():
    reader = _reader(minOffsetsPerTrigger="100", maxOffsetsPerTrigger="150",
                     maxTriggerDelay="2s")
    start = {"T": {"b:0": 0, "b:1": 0}}
    few = {"T": {"b:0": 30, "b:1": 20}}
    assert reader._admit(start, few, ReadMinRows(100)) == start  # too few: wait
    reader._last_batch_at -= 3  # maxTriggerDelay passed
    assert reader._admit(start, few, ReadMinRows(100)) == few
    many = {"T": {"b:0": 300, "b:1": 100}}
    capped = reader._admit(start, many, ReadMinRows(100))
    assert capped == {"T": {"b:0": 113, "b:1": 37}}  # maxOffsetsPerTrigger still caps: 150
    assert reader._admit(start, many, ReadAllAvailable()) == many
