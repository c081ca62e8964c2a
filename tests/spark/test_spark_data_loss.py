"""failOnDataLoss on messages removed by retention and on a deleted (then recreated) topic."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator

import pytest
from spark_support import new_topic, produce, queue_bounds

from orbitmq import Admin
from orbitmq.config import TEST_MIN_STORE
from orbitmq.testing.embedded import EmbeddedCluster


@pytest.fixture(scope="module")
def lossy(tmp_path_factory) -> Iterator[EmbeddedCluster]:
    """A cluster of its own whose retention keeps nothing but the segment being written."""
    store = dataclasses.replace(TEST_MIN_STORE, file_reserved_time_hours=0)
    with EmbeddedCluster(tmp_path_factory.mktemp("lossy"), store=store) as c:
        yield c


def _expire(cluster: EmbeddedCluster, topic: str) -> int:
    """Ask for retention until the queue's oldest offset moved, then wait until it stays put for
    1.5 s (every queued request ran); returns it. Bounded wait."""
    deadline = time.monotonic() + 60
    seen = [queue_bounds(cluster.namesrv, topic)[0][0]]
    while seen[-1] == 0:
        assert time.monotonic() < deadline, "retention removed nothing"
        cluster.brokers[0].store.clean_expired_files()
        time.sleep(0.5)
        seen.append(queue_bounds(cluster.namesrv, topic)[0][0])
    while len(seen) < 5 or len(set(seen[-5:])) > 1:
        assert time.monotonic() < deadline, f"retention did not settle: {seen[-5:]}"
        time.sleep(0.3)
        seen.append(queue_bounds(cluster.namesrv, topic)[0][0])
    return seen[-1]


def _error_text(excinfo: pytest.ExceptionInfo) -> str:
    return str(excinfo.value)


def _finish(q) -> str | None:
    """Wait for an availableNow query; its error text, or None when it succeeded."""
    from pyspark.errors import StreamingQueryException

    try:
        assert q.awaitTermination(120), "the query did not finish"
    except StreamingQueryException as e:
        return str(e)
    return None


def test_retention_fails_the_read_or_is_skipped(spark, lossy):
    ns = lossy.namesrv
    topic = new_topic(ns, "Lossy", queues=1)
    produce(ns, topic, 2000, batch=50, body=lambda i: b"x" * 1000 + str(i).encode())
    low = _expire(lossy, topic)
    start = json.dumps({topic: {"broker-a:0": 0}})
    reader = (spark.read.format("orbitmq").option("namesrv", ns).option("topic", topic)
              .option("startingOffsets", start))
    with pytest.raises(Exception) as excinfo:
        reader.load().count()
    text = _error_text(excinfo)
    assert f"data loss on topic '{topic}' queue broker-a:0: offsets [0, {low})" in text
    assert "failOnDataLoss=false" in text
    rows = reader.option("failOnDataLoss", "false").load().select("queue_offset").collect()
    assert sorted(r.queue_offset for r in rows) == list(range(low, 2000))
    # the same for a streaming query starting below the oldest offset
    stream = (spark.readStream.format("orbitmq").option("namesrv", ns).option("topic", topic)
              .option("startingOffsets", start))
    q = stream.load().writeStream.format("noop").trigger(availableNow=True).start()
    assert f"offsets [0, {low}) are no longer stored" in (_finish(q) or "")
    q = (stream.option("failOnDataLoss", "false").load().writeStream.format("noop")
         .trigger(availableNow=True).start())
    assert _finish(q) is None
    assert sum(p["numInputRows"] for p in q.recentProgress) == 2000 - low


def test_a_deleted_queue_fails_the_query_or_is_skipped(spark, namesrv, tmp_path):
    topic = new_topic(namesrv, "Gone", queues=2)
    produce(namesrv, topic, 200, batch=50)
    checkpoint = str(tmp_path / "ck")

    def run(fail: str):
        q = (spark.readStream.format("orbitmq").option("namesrv", namesrv).option("topic", topic)
             .option("startingOffsets", "earliest").option("failOnDataLoss", fail).load()
             .writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
        return q, _finish(q)

    first, error = run("true")
    assert error is None
    assert sum(p["numInputRows"] for p in first.recentProgress) == 200
    with Admin(namesrv) as admin:
        admin.delete_topic(topic)
        admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    produce(namesrv, topic, 10, batch=5)
    _failed, text = run("true")
    assert f"data loss on topic '{topic}' queue broker-a:" in (text or "")
    assert "the queue was recreated and lost its messages" in (text or "")
    skipped, error = run("false")
    assert error is None
    assert sum(p["numInputRows"] for p in skipped.recentProgress) == 10
