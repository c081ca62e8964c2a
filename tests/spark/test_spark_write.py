"""The sink: batch and streaming writes, queue selection, exactly-once commit, replay and checks."""

from __future__ import annotations

import collections
import time

import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType
from spark_support import consume_all, new_topic, produce

from orbitmq import Admin, Message, Producer
from orbitmq.client.producer.transaction_state import LocalTransactionState
from orbitmq.protocol.message import MessageExt
from orbitmq.spark import commit_log as cl
from orbitmq.spark.clients import Session, executor_session
from orbitmq.spark.commit_log import TXN_PROPERTY, SinkTransactionListener
from orbitmq.spark.options import parse_write_options
from orbitmq.spark.sink_rows import plan_columns
from orbitmq.spark.writer import _Sink


def _writer(df, namesrv: str, **options: str):
    w = df.write.format("orbitmq").option("namesrv", namesrv).mode("append")
    for name, value in options.items():
        w = w.option(name, value)
    return w


def _pending(namesrv: str) -> list:
    with Admin(namesrv) as admin:
        return [t for t in admin.list_transactions().transactions
                if t.producer_group == "orbitmq-spark-sink"]


def test_batch_write_sends_every_row_with_its_columns(spark, namesrv):
    topic = new_topic(namesrv, "SinkBatch", queues=4)
    df = spark.range(3000).selectExpr(
        "concat('row-', id) as body", "array(concat('k', id), 'shared') as keys",
        "concat('t', id % 2) as tags", "map('color', 'blue', 'n', cast(id as string)) as properties")
    _writer(df, namesrv, topic=topic).save()
    got = consume_all(namesrv, topic, expect=3000)
    assert len(got) == 3000
    rows = {(m.body, tuple(m.keys), m.tags, m.properties["color"], m.properties["n"]) for m in got}
    assert rows == {(f"row-{i}".encode(), (f"k{i}", "shared"), f"t{i % 2}", "blue", str(i))
                    for i in range(3000)}


def test_queue_id_and_sharding_key_choose_queues_in_order(spark, namesrv):
    topic = new_topic(namesrv, "SinkFifo", queues=4)
    df = spark.range(400).coalesce(1).selectExpr(
        "cast(id as string) as body", "cast(id % 4 as int) as queue_id", f"'{topic}' as topic")
    _writer(df, namesrv).save()
    got = consume_all(namesrv, topic, expect=400)
    assert all(int(m.body) % 4 == m.queue_id for m in got) and len(got) == 400
    sharded = new_topic(namesrv, "SinkShard", queues=4)
    df = spark.range(300).coalesce(1).selectExpr(
        "cast(id as string) as body", "concat('order-', id % 5) as sharding_key")
    _writer(df, namesrv, topic=sharded).save()
    by_key = collections.defaultdict(list)
    for m in sorted(consume_all(namesrv, sharded, expect=300), key=lambda m: m.queue_offset):
        by_key[m.properties["__SHARDINGKEY"]].append((m.queue_id, int(m.body)))
    for key, items in by_key.items():
        assert len({q for q, _ in items}) == 1, f"{key} spread over queues"
        assert [b for _, b in items] == sorted(b for _, b in items), f"{key} out of order"


def test_batch_exactly_once_write_commits_every_row_once(spark, namesrv):
    topic = new_topic(namesrv, "SinkBatchEO", queues=2)
    df = spark.range(1500).selectExpr("cast(cast(id as string) as binary) as body")
    _writer(df, namesrv, topic=topic, exactlyOnce="true").save()
    got = consume_all(namesrv, topic, expect=1500)
    assert sorted(m.body for m in got) == sorted(str(i).encode() for i in range(1500))
    assert not [m for m in got if TXN_PROPERTY in m.properties]  # the batches carry it, not rows


def test_streaming_write_is_exactly_once_from_topic_to_topic(spark, namesrv, tmp_path):
    source = new_topic(namesrv, "SinkStreamA", queues=4)
    target = new_topic(namesrv, "SinkStreamB", queues=2)
    produce(namesrv, source, 3000, batch=100)
    q = (spark.readStream.format("orbitmq").option("namesrv", namesrv).option("topic", source)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "700").load()
         .selectExpr("body", "keys", "tags").writeStream.format("orbitmq")
         .option("namesrv", namesrv).option("topic", target)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert q.awaitTermination(180) and q.exception() is None
    got = consume_all(namesrv, target, expect=3000)
    assert len(got) == 3000
    assert sorted(m.body for m in got) == sorted(f"m-{i}".encode() for i in range(3000))
    assert {m.keys[0] for m in got} == {f"k{i}" for i in range(3000)}


def _sink(namesrv: str, topic: str, immunity_s: int = 1, first: int = 0,
          rows: int = 200, **options: str) -> tuple[_Sink, list[pa.RecordBatch]]:
    opts = parse_write_options({"namesrv": namesrv, "topic": topic,
                                "transactionCheckImmunitySeconds": str(immunity_s), **options},
                               streaming=True)
    schema = StructType([StructField("body", BinaryType()),
                         StructField("keys", ArrayType(StringType()))])
    ids = range(first, first + rows)
    batch = pa.RecordBatch.from_pydict(
        {"body": [f"r{i}".encode() for i in ids], "keys": [[f"k{i}"] for i in ids]})
    return _Sink(opts, plan_columns(schema, opts)), [batch]


def test_a_replayed_batch_sends_nothing_and_stray_halves_are_rolled_back(spark, namesrv):
    topic = new_topic(namesrv, "SinkReplay", queues=2)
    crashed, batches = _sink(namesrv, topic)  # a run whose driver died after write()
    stray = crashed.write(iter(batches), "query-r", 4, "0.0")
    assert sum(h.batch_size for h in stray.halves) == 200 and not stray.replayed
    rerun, _ = _sink(namesrv, topic)  # the restarted run replays batch 4
    first = rerun.write(iter(batches), "query-r", 4, "0.0")
    rerun.commit([first], 4)
    assert len(consume_all(namesrv, topic, expect=200)) == 200
    again = rerun.write(iter(batches), "query-r", 4, "0.0")  # replayed after the commit
    assert again.replayed and again.halves == ()
    rerun.commit([again], 4)  # commits the marker's halves again: no second delivery
    with executor_session(namesrv) as session:  # a live producer of the group answers checks
        listener = SinkTransactionListener(session, rerun.opts.commit_topic)

        def verdict(ref, txn: str) -> LocalTransactionState:
            msg = MessageExt(topic, b"", msg_id=ref.msg_id, properties={TXN_PROPERTY: txn})
            return session.run(listener.check_local_transaction(msg))

        assert verdict(first.halves[0], f"query-r:4:{rerun.run}:0.0") is LocalTransactionState.COMMIT
        assert verdict(stray.halves[0], f"query-r:4:{crashed.run}:0.0") is (
            LocalTransactionState.ROLLBACK)
        assert verdict(stray.halves[0], "query-r:5:x:0.0") is LocalTransactionState.UNKNOWN
        deadline = time.monotonic() + 60
        while _pending(namesrv):  # the brokers check the stray halves back and roll them back
            assert time.monotonic() < deadline, f"{len(_pending(namesrv))} halves still pending"
            time.sleep(0.5)
    got = consume_all(namesrv, topic)
    assert len(got) == 200 and len({m.msg_id for m in got}) == 200


def test_the_producer_group_option_is_the_group_of_the_transaction_batches(spark, namesrv):
    topic = new_topic(namesrv, "SinkGroup", queues=2)
    sink, batches = _sink(namesrv, topic, immunity_s=600, producerGroup="own-sink-group")
    sent = sink.write(iter(batches), "query-g", 0, "0.0")
    ids = {h.msg_id for h in sent.halves}
    with Admin(namesrv) as admin:
        pending = [t for t in admin.list_transactions().transactions if t.msg_id in ids]
    assert len(pending) == len(ids) > 0
    assert {t.producer_group for t in pending} == {"own-sink-group"}
    sink.commit([sent], 0)
    assert sorted(m.body for m in consume_all(namesrv, topic, expect=200)) == sorted(
        f"r{i}".encode() for i in range(200))
    with Admin(namesrv) as admin:
        assert not [t for t in admin.list_transactions().transactions if t.msg_id in ids]


def test_a_driver_retry_after_a_partial_commit_delivers_every_row_once(spark, namesrv):
    """The driver died in commit() after writing the marker and committing one of its two batches;
    Spark runs commit() of the batch again in a new driver (a fresh writer), twice. Each row is
    delivered once: the retry ends the listed halves through the SDK's end_transaction, and the
    brokers answer the already committed ones without a second delivery. The brokers' checks
    stay out of it (a long immunity), so the retry is what commits the rest."""
    topic = new_topic(namesrv, "SinkRetry", queues=2)
    tasks = [_sink(namesrv, topic, immunity_s=600, first=200 * p) for p in range(2)]
    parts = [sink.write(iter(batches), "query-d", 7, f"{p}.0")
             for p, (sink, batches) in enumerate(tasks)]
    halves = sorted(h for m in parts for h in m.halves)
    assert sum(h.batch_size for h in halves) == 400
    opts = tasks[0][0].opts
    with Session(namesrv) as session:  # the first driver, up to its crash
        session.run(cl.write_marker(session, opts.commit_topic, opts.producer_group, "query-d", 7,
                                    "token-of-the-dead-driver", halves))
        early = halves[:1]  # one of the two transaction batches
        assert session.run(cl.end_halves(session, opts.producer_group, opts.commit_topic, early,
                                         commit=True)) == []
    retry, _ = _sink(namesrv, topic, immunity_s=600)
    retry.commit(parts, 7)
    retry.commit(parts, 7)  # once more: a retry of the retry
    with Producer("sink-retry-sentinel", namesrv) as producer:  # stored after anything the
        producer.send(Message(topic, b"sentinel"))               # commits stored
    consume_all(namesrv, topic, expect=401)
    got = consume_all(namesrv, topic)  # a second pass: everything before the sentinel is in
    assert sorted(m.body for m in got) == sorted(
        [f"r{i}".encode() for i in range(400)] + [b"sentinel"])
    ids = {h.msg_id for h in halves}
    assert not [t for t in _pending(namesrv) if t.msg_id in ids]


@pytest.mark.parametrize(("columns", "options", "message"), [
    ("cast(id as string) as text", {"topic": "X"}, "column 'body': required"),
    ("cast(id as string) as body, id as keys", {"topic": "X"}, "column 'keys': expected string"),
    ("cast(id as string) as body", {}, "column 'topic': no 'topic' column and no 'topic' option"),
    ("cast(id as string) as body, 1 as queue_id", {"topic": "X", "exactlyOnce": "true"},
     "cannot choose their queue"),
    ("cast(id as string) as body", {"topic": "X", "exactlyOnce": "perhaps"},
     "option 'exactlyOnce': expected true or false"),
])
def test_sink_schema_and_option_errors_name_the_column(spark, namesrv, columns, options, message):
    df = spark.range(3).selectExpr(*columns.split(", "))
    with pytest.raises(Exception) as excinfo:
        _writer(df, namesrv, **options).save()
    assert message in str(excinfo.value)
