"""Spark writes to a topic that does not exist yet (issue 36): batch and streaming, exactly-once and
at-least-once, create it as any first send does when the brokers auto-create topics (an
exactly-once write used to fail: "a transaction batch does not create it"), and fail with one line
naming the topic when they do not (a second, small cluster with ``auto_create_topic=False``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from spark_support import consume_all, new_topic, produce

from orbitmq import Admin
from orbitmq.testing.embedded import EmbeddedCluster

_ids = itertools.count()
QUEUES_OF_A_FIRST_SEND = 4  # a producer's defaultTopicQueueNums


def _fresh(prefix: str) -> str:
    return f"{prefix}{next(_ids)}"


def _queues(namesrv: str, topic: str) -> int:
    with Admin(namesrv) as admin:
        return len(admin.topic_status(topic))


@pytest.fixture(scope="module")
def no_auto_namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with EmbeddedCluster(tmp_path_factory.mktemp("spark-no-auto"), auto_create_topic=False) as c:
        yield c.namesrv


@pytest.mark.parametrize("exactly_once", ["true", "false"])
def test_a_batch_write_creates_its_missing_topic(spark, namesrv, exactly_once):
    topic = _fresh(f"SinkNewBatch{'EO' if exactly_once == 'true' else 'ALO'}")
    df = spark.range(600).selectExpr("cast(cast(id as string) as binary) as body")
    (df.write.format("orbitmq").option("namesrv", namesrv).option("topic", topic)
     .option("exactlyOnce", exactly_once).mode("append").save())
    got = consume_all(namesrv, topic, expect=600)
    assert sorted(m.body for m in got) == sorted(str(i).encode() for i in range(600))
    assert _queues(namesrv, topic) == QUEUES_OF_A_FIRST_SEND


@pytest.mark.parametrize("exactly_once", ["true", "false"])
def test_a_streaming_write_creates_its_missing_topic(spark, namesrv, tmp_path, exactly_once):
    source = new_topic(namesrv, "SinkNewStreamSrc", queues=2)
    target = _fresh(f"SinkNewStream{'EO' if exactly_once == 'true' else 'ALO'}")
    produce(namesrv, source, 400, batch=100)
    q = (spark.readStream.format("orbitmq").option("namesrv", namesrv).option("topic", source)
         .option("startingOffsets", "earliest").load().selectExpr("body")
         .writeStream.format("orbitmq").option("namesrv", namesrv).option("topic", target)
         .option("exactlyOnce", exactly_once)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert q.awaitTermination(180) and q.exception() is None
    got = consume_all(namesrv, target, expect=400)
    assert sorted(m.body for m in got) == sorted(f"m-{i}".encode() for i in range(400))


@pytest.mark.parametrize("exactly_once", ["true", "false"])
def test_without_auto_create_a_write_fails_naming_the_topic(spark, no_auto_namesrv, tmp_path,
                                                            exactly_once):
    topic = _fresh("SinkNoSuchTopic")
    line = (f"orbitmq: topic '{topic}' does not exist and the brokers do not create topics "
            f"(autoCreateTopicEnable is false): create it first (orbitmq topic create -t {topic})")
    df = spark.range(10).selectExpr("cast(id as string) as body")
    with pytest.raises(Exception) as batch:
        (df.write.format("orbitmq").option("namesrv", no_auto_namesrv).option("topic", topic)
         .option("exactlyOnce", exactly_once).mode("append").save())
    assert line in str(batch.value)
    # A topic column is checked by the task that sends to it: the same line.
    with pytest.raises(Exception) as by_column:
        (df.selectExpr("body", f"'{topic}' as topic").write.format("orbitmq")
         .option("namesrv", no_auto_namesrv).option("exactlyOnce", exactly_once)
         .mode("append").save())
    assert line in str(by_column.value)
    source = new_topic(no_auto_namesrv, "SinkNoAutoSrc", queues=1)
    produce(no_auto_namesrv, source, 5)
    with pytest.raises(Exception) as streaming:
        q = (spark.readStream.format("orbitmq").option("namesrv", no_auto_namesrv)
             .option("topic", source).option("startingOffsets", "earliest").load()
             .selectExpr("body").writeStream.format("orbitmq")
             .option("namesrv", no_auto_namesrv).option("topic", topic)
             .option("exactlyOnce", exactly_once)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
             .start())
        q.awaitTermination(180)
    assert line in str(streaming.value)
    with Admin(no_auto_namesrv) as admin:
        assert topic not in admin.list_topics()
