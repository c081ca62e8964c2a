"""Kafka-connector parity and the source's scale features (issue 19): declared columns (a count
pulls nothing), bulk pulls, minPartitions, the timestamp options, includeHeaders, Kafka-shaped
frames written as they are, and unknown options refused by name."""

from __future__ import annotations

import time

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    StringType,
    StructField,
    StructType,
)
from spark_support import consume_all, new_topic, produce

from orbitmq import Message, Producer
from orbitmq.spark import commit_log as cl
from orbitmq.spark.clients import Session
from orbitmq.spark.options import COMMIT_TOPIC_DEFAULT
from orbitmq.spark.schema import read_schema


def _load(spark, namesrv: str, topic: str, schema: str | None = None, **options: str):
    reader = spark.read.format("orbitmq").option("namesrv", namesrv).option("topic", topic)
    if schema is not None:
        reader = reader.schema(schema)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _pulls(cluster, topic: str, group: str) -> tuple[int, int]:
    """(pull answers with messages, messages) the broker served ``group`` on ``topic``."""
    counter = cluster.brokers[0].stats.get.get((topic, group))
    return (0, 0) if counter is None else (counter.times, counter.msgs)


def test_declared_columns_are_what_a_read_decodes_and_a_count_pulls_nothing(spark, namesrv,
                                                                            cluster):
    topic = new_topic(namesrv, "Prune", queues=4)
    sent = produce(namesrv, topic, 6000)
    counted = _load(spark, namesrv, topic, "queue_offset long", consumerGroup="prune-count")
    assert counted.count() == 6000
    assert _pulls(cluster, topic, "prune-count") == (0, 0)  # offsets only: no message pulled
    bodies = _load(spark, namesrv, topic, "body binary, queue_id int", consumerGroup="prune-body")
    got = sorted((r.queue_id, bytes(r.body)) for r in bodies.collect())
    assert got == sorted((s.queue_id, s.body) for s in sent)
    times, msgs = _pulls(cluster, topic, "prune-body")
    assert msgs == 6000 and times <= 8, f"{times} pulls: bulk pulls take a queue's 1,500 at once"
    tagged = _load(spark, namesrv, topic, "queue_offset long", tags="t1")
    assert tagged.count() == 2000  # a filter needs the messages: pulled and kept by tag
    for declared, words in [("nope string", "column 'nope': the orbitmq source has no such"),
                            ("queue_offset int", "column 'queue_offset': the orbitmq source gives "
                                                 "bigint, not int"),
                            ("headers string", "set includeHeaders=true")]:
        with pytest.raises(Exception, match=words):
            _load(spark, namesrv, topic, declared).count()


def test_min_partitions_split_one_big_queue_over_several_tasks(spark, namesrv):
    topic = new_topic(namesrv, "MinParts", queues=1)
    produce(namesrv, topic, 5000)
    df = _load(spark, namesrv, topic, minPartitions="4")
    assert df.rdd.getNumPartitions() == 4
    offsets = sorted(r.queue_offset for r in df.select("queue_offset").collect())
    assert offsets == list(range(5000))
    capped = _load(spark, namesrv, topic, maxRecordsPerPartition="2000")
    assert capped.rdd.getNumPartitions() == 3 and capped.count() == 5000


def _after(ms: int) -> None:
    """Wait (bounded) until the wall clock is past ``ms``: the next message is stored later."""
    deadline = time.monotonic() + 5
    while time.time() * 1000 <= ms:
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_timestamp_options_choose_where_reading_starts_and_ends(spark, namesrv):
    topic = new_topic(namesrv, "ByTime", queues=2)
    produce(namesrv, topic, 400, batch=50)
    early = _load(spark, namesrv, topic).agg({"store_timestamp": "max"}).first()[0]
    cut = int(early.timestamp() * 1000) + 1
    _after(cut)
    produce(namesrv, topic, 300, start=400, batch=50)
    late = _load(spark, namesrv, topic, startingTimestamp=str(cut))
    assert sorted(bytes(r.body) for r in late.select("body").collect()) == sorted(
        f"m-{i}".encode() for i in range(400, 700))
    assert _load(spark, namesrv, topic, endingTimestamp=str(cut)).count() == 400
    by_queue = _load(spark, namesrv, topic,
                     startingOffsetsByTimestamp=f'{{"{topic}": {{"broker-a:0": {cut}}}}}',
                     endingOffsetsByTimestamp=f'{{"{topic}": {{"broker-a:1": {cut}}}}}')
    rows = by_queue.select("queue_id", "body").collect()
    assert {int(bytes(r.body)[2:]) >= 400 for r in rows if r.queue_id == 0} == {True}
    assert {int(bytes(r.body)[2:]) < 400 for r in rows if r.queue_id == 1} == {True}
    assert len(rows) == late.filter("queue_id = 0").count() + 400 - _load(
        spark, namesrv, topic, endingTimestamp=str(cut)).filter("queue_id = 0").count()


def test_include_headers_gives_the_user_properties_as_kafkas_headers(spark, namesrv):
    topic = new_topic(namesrv, "Headers", queues=1)
    with Producer("spark-test-producer", namesrv) as producer:
        producer.send(Message(topic, b"h", tags="t", keys=["k"], properties={"color": "blue",
                                                                            "size": "L"}))
        producer.send(Message(topic, b"plain"))
    df = _load(spark, namesrv, topic, includeHeaders="true").orderBy("queue_offset")
    assert df.schema == read_schema(include_headers=True)
    headers = [sorted((h.key, bytes(h.value)) for h in r.headers)
               for r in df.select("headers").collect()]
    assert headers == [[("color", b"blue"), ("size", b"L")], []]
    assert "headers" not in _load(spark, namesrv, topic).columns


def test_kafka_shaped_frames_are_written_as_they_would_be_to_kafka(spark, namesrv):
    topic = new_topic(namesrv, "KafkaShape", queues=2)
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType([StructField("key", StringType()), StructField("value", BinaryType()),
                         StructField("headers", ArrayType(header)), StructField("topic", StringType())])
    rows = [(f"k{i}", f"v{i}".encode(), [("source", b"kafka"), ("n", str(i).encode())], topic)
            for i in range(50)]
    for exactly_once in ("false", "true"):
        (spark.createDataFrame(rows, schema).write.format("orbitmq").option("namesrv", namesrv)
         .option("exactlyOnce", exactly_once).mode("append").save())
    got = consume_all(namesrv, topic, expect=100)
    assert len(got) == 100
    assert sorted((m.body, tuple(m.keys), m.properties["source"], m.properties["n"]) for m in got) == \
        sorted((f"v{i}".encode(), (f"k{i}",), "kafka", str(i)) for i in range(50) for _ in range(2))
    both = spark.createDataFrame([(b"x", b"y")], "body binary, value binary")
    with pytest.raises(Exception, match="column 'value': give either 'body' or 'value'"):
        both.write.format("orbitmq").option("namesrv", namesrv).option("topic", topic).mode(
            "append").save()


def test_unknown_options_fail_the_query_naming_the_option(spark, namesrv):
    topic = new_topic(namesrv, "Unknown", queues=1)
    with pytest.raises(Exception, match="(?i)orbitmq option 'startingOfsets': unknown option"):
        _load(spark, namesrv, topic, startingOfsets="earliest").count()
    df = spark.range(1).selectExpr("'x' as body")
    with pytest.raises(Exception, match="(?i)orbitmq option 'exactly_once': unknown option"):
        (df.write.format("orbitmq").option("namesrv", namesrv).option("topic", topic)
         .option("exactly_once", "true").mode("append").save())
    subscribed = (spark.read.format("orbitmq").option("namesrv", namesrv)
                  .option("subscribe", topic).load())
    assert subscribed.count() == 0


def test_sql_filters_on_the_broker_by_user_properties(spark, namesrv, cluster):
    topic = new_topic(namesrv, "Sql", queues=2)
    with Producer("spark-test-producer", namesrv) as producer:
        for lo in (0, 20):
            producer.send_batch([Message(topic, f"s{i}".encode(), properties={"n": str(i)})
                                 for i in range(lo, lo + 20)])
    df = _load(spark, namesrv, topic, sql="n >= 15 AND n < 25", consumerGroup="sql-reader")
    assert sorted(bytes(r.body) for r in df.select("body").collect()) == sorted(
        f"s{i}".encode() for i in range(15, 25))
    assert _pulls(cluster, topic, "sql-reader")[1] == 10  # the broker served the matches only
    with pytest.raises(Exception, match="orbitmq option 'sql': not an SQL92 expression"):
        _load(spark, namesrv, topic, sql="n >=").count()


def test_sink_commit_topic_and_query_name_are_used(spark, namesrv, tmp_path):
    """A streaming exactly-once write named with .queryName(), its markers in its own commit
    topic (test_spark_write.py checks producerGroup); a pattern read leaves that commit topic out
    when told its name (and subscribePattern is topicPattern)."""
    source = new_topic(namesrv, "QnSource", queues=2)
    target = new_topic(namesrv, "QnTarget", queues=2)
    produce(namesrv, source, 300)
    commits = f"QnCommits{target[len('QnTarget'):]}"
    q = (spark.readStream.format("orbitmq").option("namesrv", namesrv).option("topic", source)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "200").load()
         .selectExpr("body").writeStream.queryName(f"qn_{target}").format("orbitmq")
         .option("namesrv", namesrv).option("topic", target).option("commitTopic", commits)
         .option("producerGroup", "qn-sink-group")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert q.awaitTermination(180) and q.exception() is None
    assert q.name == f"qn_{target}"
    got = consume_all(namesrv, target, expect=300)
    assert sorted(m.body for m in got) == sorted(f"m-{i}".encode() for i in range(300))
    with Session(namesrv) as session:
        for batch in (0, 1):
            assert session.run(cl.lookup_marker(session, commits, q.id, batch)) is not None
            assert session.run(cl.lookup_marker(session, COMMIT_TOPIC_DEFAULT, q.id, batch)) is None
    pattern = f"QnCommits{target[len('QnTarget'):]}|{target}"
    both = (spark.read.format("orbitmq").option("namesrv", namesrv)
            .option("subscribePattern", pattern).load())
    assert {r.topic for r in both.select("topic").distinct().collect()} == {target, commits}
    only = (spark.read.format("orbitmq").option("namesrv", namesrv)
            .option("subscribePattern", pattern).option("commitTopic", commits).load())
    assert only.select("topic").distinct().collect()[0].topic == target and only.count() == 300
