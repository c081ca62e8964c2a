"""Batch reads: every produced message exactly, offset ranges, tags, properties, topic patterns."""

from __future__ import annotations

import json

import pytest
from spark_support import new_topic, produce

from orbitmq import Message, Producer


def _load(spark, namesrv: str, topic: str, **options: str):
    reader = spark.read.format("orbitmq").option("namesrv", namesrv).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_batch_read_returns_exactly_the_produced_messages(spark, namesrv):
    topic = new_topic(namesrv, "Read50k", queues=4)
    sent = produce(namesrv, topic, 50_000)
    df = _load(spark, namesrv, topic)
    assert df.schema.fieldNames() == [
        "topic", "broker_name", "queue_id", "queue_offset", "msg_id", "keys", "tags", "body",
        "properties", "born_timestamp", "store_timestamp", "reconsume_times"]
    table = df.select("queue_id", "queue_offset", "body", "keys", "tags", "msg_id",
                      "broker_name", "topic").toArrow()
    assert table.num_rows == 50_000
    c = table.to_pydict()
    got = {(q, o): (b, k, t, m) for q, o, b, k, t, m in zip(
        c["queue_id"], c["queue_offset"], c["body"], c["keys"], c["tags"], c["msg_id"],
        strict=True)}
    want = {(s.queue_id, s.queue_offset): (s.body, [s.key], s.tag, s.msg_id) for s in sent}
    assert got == want
    assert set(zip(c["broker_name"], c["topic"], strict=True)) == {("broker-a", topic)}


def test_starting_and_ending_offsets_json_give_exactly_that_range(spark, namesrv):
    topic = new_topic(namesrv, "ReadRange", queues=2)
    sent = produce(namesrv, topic, 2000, batch=100)
    start = {topic: {"broker-a:0": 100, "broker-a:1": -2}}
    end = {topic: {"broker-a:0": 350, "broker-a:1": 40}}
    df = _load(spark, namesrv, topic, startingOffsets=json.dumps(start),
               endingOffsets=json.dumps(end))
    got = sorted((r.queue_id, r.queue_offset, bytes(r.body))
                 for r in df.select("queue_id", "queue_offset", "body").collect())
    want = sorted((s.queue_id, s.queue_offset, s.body) for s in sent
                  if (s.queue_id == 0 and 100 <= s.queue_offset < 350)
                  or (s.queue_id == 1 and s.queue_offset < 40))
    assert got == want and len(got) == 290
    # ending "latest" (-1) for one queue, the other not named: latest too
    df = _load(spark, namesrv, topic, startingOffsets=json.dumps({topic: {"broker-a:0": 990}}),
               endingOffsets=json.dumps({topic: {"broker-a:0": -1}}))
    assert df.filter("queue_id = 0").count() == 10
    assert df.filter("queue_id = 1").count() == 1000


def test_small_queues_are_packed_into_as_many_tasks_as_the_session_has_cores(spark, namesrv):
    topic = new_topic(namesrv, "ReadPacked", queues=8)
    sent = produce(namesrv, topic, 4000)
    df = _load(spark, namesrv, topic)
    assert spark.sparkContext.defaultParallelism == 2
    assert df.rdd.getNumPartitions() == 2
    got = sorted((r.queue_id, r.queue_offset) for r in df.select("queue_id", "queue_offset")
                 .collect())
    assert got == sorted((s.queue_id, s.queue_offset) for s in sent)
    assert {q for q, _ in got} == set(range(8))
    assert _load(spark, namesrv, topic, minPartitions="8").rdd.getNumPartitions() == 8


def test_large_queues_are_split_and_tags_and_properties_are_read(spark, namesrv):
    topic = new_topic(namesrv, "ReadSplit", queues=2)
    produce(namesrv, topic, 6000)
    with Producer("spark-test-producer", namesrv) as producer:
        producer.send(Message(topic, b"with-props", tags="special", keys=["a", "b"],
                              properties={"color": "blue"}))
    df = _load(spark, namesrv, topic, maxOffsetsPerPartition="1000")
    assert df.rdd.getNumPartitions() == 7  # 3001 and 3000 offsets in 1,000-offset pieces
    assert df.count() == 6001
    tagged = _load(spark, namesrv, topic, tags="t1 || special", includeProperties="true")
    rows = tagged.select("tags", "body", "keys", "properties").collect()
    assert len(rows) == 2001 and {r.tags for r in rows} == {"t1", "special"}
    special = next(r for r in rows if r.tags == "special")
    assert list(special.keys) == ["a", "b"] and special.properties["color"] == "blue"
    assert _load(spark, namesrv, topic).select("properties").first().properties is None


def test_topic_list_and_pattern(spark, namesrv):
    a = new_topic(namesrv, "PatOrders", queues=1)
    b = new_topic(namesrv, "PatOrders", queues=1)
    produce(namesrv, a, 30)
    produce(namesrv, b, 20)
    assert _load(spark, namesrv, f"{a},{b}").count() == 50
    pattern = (spark.read.format("orbitmq").option("namesrv", namesrv)
               .option("topicPattern", "PatOrders[0-9]+").load())
    assert {r.topic for r in pattern.select("topic").distinct().collect()} >= {a, b}


def test_an_empty_range_reads_nothing(spark, namesrv):
    topic = new_topic(namesrv, "ReadEmpty", queues=2)
    assert _load(spark, namesrv, topic).count() == 0
    produce(namesrv, topic, 10)
    assert _load(spark, namesrv, topic, startingOffsets="latest").count() == 0


@pytest.mark.parametrize("body", [b"", b"\x00\xff" * 600, "é".encode() * 3000])
def test_bodies_round_trip_byte_for_byte(spark, namesrv, body):
    topic = new_topic(namesrv, "ReadBodies", queues=1)
    produce(namesrv, topic, 3, body=lambda i: body + bytes([i]))
    got = [bytes(r.body) for r in _load(spark, namesrv, topic).orderBy("queue_offset").collect()]
    assert got == [body + bytes([i]) for i in range(3)]
