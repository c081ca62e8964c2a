"""Pure parts of orbitmq.spark: options, offsets, the columnar decoder, pull answers (no Spark)."""

from __future__ import annotations

import json
import logging

import pytest

from orbitmq.client.consumer.pull_codec import parse_raw_pull_response
from orbitmq.client.results import RawPullResult
from orbitmq.errors import (
    ClientError,
    OrbitMQError,
    RemoteProtocolError,
    SparkCommitError,
    SparkDataLossError,
    SparkError,
    SparkSchemaError,
    TopicNotFoundError,
)
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.stored import encode_stored_message, iter_stored_messages
from orbitmq.spark.decode import decode_body, offset_rows, user_headers
from orbitmq.spark.fetch import Window, _step
from orbitmq.spark.offsets import QueueRange, canonical, rate_limit, split_ranges, to_json
from orbitmq.spark.options import OptionError, parse_read_options, parse_write_options
from orbitmq.spark.planning import QueueBounds, check_retention

NS = {"namesrv": "127.0.0.1:9876"}


@pytest.mark.parametrize(("options", "streaming", "name"), [
    ({"topic": "T"}, False, "namesrv"),
    ({**NS}, False, "topic"),
    ({**NS, "topic": "T", "topicpattern": "T.*"}, False, "topic"),
    ({**NS, "topic": "bad topic"}, False, "topic"),
    ({**NS, "topicPattern": "("}, False, "topicPattern"),
    ({**NS, "topic": "T", "startingOffsets": "yesterday"}, False, "startingOffsets"),
    ({**NS, "topic": "T", "startingOffsets": '{"T": {"a-0": 1}}'}, False, "startingOffsets"),
    ({**NS, "topic": "T", "startingOffsets": '{"T": {"b:0": -3}}'}, False, "startingOffsets"),
    ({**NS, "topic": "T", "endingOffsets": "earliest"}, False, "endingOffsets"),
    ({**NS, "topic": "T", "endingOffsets": "latest"}, True, "endingOffsets"),
    ({**NS, "topic": "T", "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
    ({**NS, "topic": "T", "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"}, True,
     "minOffsetsPerTrigger"),
    ({**NS, "topic": "T", "maxTriggerDelay": "5s"}, True, "maxTriggerDelay"),
    ({**NS, "topic": "T", "minOffsetsPerTrigger": "9", "maxTriggerDelay": "soon"}, True,
     "maxTriggerDelay"),
    ({**NS, "topic": "T", "failOnDataLoss": "maybe"}, True, "failOnDataLoss"),
    ({**NS, "topic": "T", "startingTimestamp": "noon"}, True, "startingTimestamp"),
    ({**NS, "topic": "T", "startingTimestamp": "1", "startingOffsets": "latest"}, True,
     "startingTimestamp"),
    ({**NS, "topic": "T", "tags": "a || *"}, True, "tags"),
    ({"namesrv": "nohost", "topic": "T"}, True, "namesrv"),
    ({**NS, "topic": "T", "startingOfsets": "earliest"}, False, "startingOfsets"),
    ({**NS, "topic": "T", "assign": '{"T":[0]}'}, False, "assign"),
    ({**NS, "topic": "T", "kafka.bootstrap.servers": "h:9092"}, False, "kafka.bootstrap.servers"),
    ({**NS, "subscribe": "T", "topic": "T"}, False, "topic"),
    ({**NS, "subscribe": "T", "subscribePattern": "T.*"}, False, "topic"),
    ({**NS, "topic": "T", "minPartitions": "0"}, False, "minPartitions"),
    ({**NS, "topic": "T", "maxRecordsPerPartition": "-4"}, False, "maxOffsetsPerPartition"),
    ({**NS, "topic": "T", "maxRecordsPerPartition": "4", "maxOffsetsPerPartition": "5"}, False,
     "maxOffsetsPerPartition"),
    ({**NS, "topic": "T", "includeHeaders": "sometimes"}, False, "includeHeaders"),
    ({**NS, "topic": "T", "startingOffsetsByTimestamp": '{"T": {"b:0": "noon"}}'}, False,
     "startingOffsetsByTimestamp"),
    ({**NS, "topic": "T", "startingOffsetsByTimestamp": '{"T": {"b:0": 5}}',
      "startingTimestamp": "5"}, False, "startingOffsetsByTimestamp"),
    ({**NS, "topic": "T", "endingTimestamp": "5"}, True, "endingTimestamp"),
    ({**NS, "topic": "T", "endingOffsetsByTimestamp": '{"T": {"b:0": 5}}'}, True,
     "endingOffsetsByTimestamp"),
    ({**NS, "topic": "T", "endingTimestamp": "5", "endingOffsets": "latest"}, False,
     "endingTimestamp"),
    ({**NS, "topic": "T", "endingTimestamp": "yesterday"}, False, "endingTimestamp"),
])
def test_bad_read_options_name_the_option(options, streaming, name):
    with pytest.raises(OptionError) as excinfo:
        parse_read_options(options, streaming=streaming)
    assert excinfo.value.option == name
    assert str(excinfo.value).startswith(f"orbitmq option '{name}': ")


def test_unknown_options_are_refused_with_what_is_known_instead():
    with pytest.raises(OptionError, match="unknown option; the orbitmq source knows .*namesrv"):
        parse_read_options({**NS, "topic": "T", "startingOfsets": "earliest"}, streaming=False)
    with pytest.raises(OptionError, match="'assign': unknown option; OrbitMQ reads whole topics"):
        parse_read_options({**NS, "topic": "T", "assign": "{}"}, streaming=False)
    with pytest.raises(OptionError, match="'kafka.group.id': unknown option; OrbitMQ takes no "
                                          "Kafka client options"):
        parse_read_options({**NS, "topic": "T", "kafka.group.id": "g"}, streaming=False)
    with pytest.raises(OptionError, match="'exactlyOnce': unknown option; the orbitmq source"):
        parse_read_options({**NS, "topic": "T", "exactlyOnce": "true"}, streaming=False)
    with pytest.raises(OptionError, match="'tags': unknown option; the orbitmq sink knows"):
        parse_write_options({**NS, "tags": "a"}, streaming=False)
    with pytest.raises(OptionError, match="'path': unknown option; the orbitmq format takes no path"):
        parse_write_options({**NS, "path": "/tmp/x"}, streaming=True)
    assert parse_write_options({**NS, "checkpointlocation": "/ck"}, streaming=True).namesrv


def test_kafka_names_timestamps_and_partitioning_options():
    opts = parse_read_options({**NS, "subscribe": "A,B", "maxRecordsPerPartition": "7",
                               "minPartitions": "5", "includeHeaders": "true",
                               "startingOffsetsByTimestamp": '{"A": {"b:0": 1000}}',
                               "endingTimestamp": "2000"}, streaming=False)
    assert (opts.topics, opts.max_offsets_per_partition, opts.min_partitions) == (("A", "B"), 7, 5)
    assert opts.include_headers and opts.starting.kind == "timestamps"
    assert opts.starting.offsets == {"A": {"b:0": 1000}}
    assert (opts.ending.kind, opts.ending.timestamp_ms) == ("timestamp", 2000)
    pattern = parse_read_options({**NS, "subscribepattern": "A.*"}, streaming=True)
    assert pattern.topic_pattern == "A.*"
    ends = parse_read_options({**NS, "topic": "A", "endingOffsetsByTimestamp": '{"A": {"b:1": 9}}'},
                              streaming=False)
    assert (ends.ending.kind, ends.ending.offsets) == ("timestamps", {"A": {"b:1": 9}})


def test_min_partitions_divide_big_ranges_in_proportion_and_deterministically():
    from orbitmq.spark.planning import partition_ranges

    ranges = [QueueRange("T", "b", 0, 0, 900), QueueRange("T", "b", 1, 50, 150),
              QueueRange("T", "b", 2, 7, 7)]
    base = parse_read_options({**NS, "topic": "T"}, streaming=False)
    assert [(r.queue_id, r.start, r.end) for r in partition_ranges(base, ranges)] == [
        (0, 0, 900), (1, 50, 150)]
    opts = parse_read_options({**NS, "topic": "T", "minPartitions": "10"}, streaming=False)
    pieces = partition_ranges(opts, ranges)
    assert [(r.queue_id, r.start, r.end) for r in pieces] == [
        (0, 0, 100), (0, 100, 200), (0, 200, 300), (0, 300, 400), (0, 400, 500), (0, 500, 600),
        (0, 600, 700), (0, 700, 800), (0, 800, 900), (1, 50, 150)]
    assert partition_ranges(opts, ranges) == pieces
    capped = parse_read_options({**NS, "topic": "T", "maxRecordsPerPartition": "400",
                                 "minPartitions": "3"}, streaming=False)
    assert [(r.queue_id, r.start, r.end) for r in partition_ranges(capped, ranges)] == [
        (0, 0, 400), (0, 400, 800), (0, 800, 900), (1, 50, 150)]


def test_small_ranges_are_packed_to_the_parallelism_and_big_ones_kept_apart():
    from orbitmq.spark.planning import pack_ranges

    base = parse_read_options({**NS, "topic": "T"}, streaming=False)
    small = [QueueRange("T", "b", q, 0, 25) for q in range(8)] + [QueueRange("T", "b", 8, 5, 5)]

    def shape(groups):
        return [[(r.queue_id, r.start, r.end) for r in g] for g in groups]

    assert shape(pack_ranges(base, small, None)) == [[(q, 0, 25)] for q in range(8)]
    packed = pack_ranges(base, small, 2)
    assert shape(packed) == [[(q, 0, 25) for q in (0, 2, 4, 6)], [(q, 0, 25) for q in (1, 3, 5, 7)]]
    assert pack_ranges(base, list(reversed(small)), 2) == packed  # order of the input: no matter
    four = parse_read_options({**NS, "topic": "T", "minPartitions": "4"}, streaming=False)
    assert [len(g) for g in pack_ranges(four, small, 2)] == [2, 2, 2, 2]
    capped = parse_read_options({**NS, "topic": "T", "maxOffsetsPerPartition": "60"},
                                streaming=False)
    assert [sum(r.size for r in g) for g in pack_ranges(capped, small, 1)] == [50, 50, 50, 50]
    uneven = [QueueRange("T", "b", 0, 0, 900), QueueRange("T", "b", 1, 0, 50),
              QueueRange("T", "b", 2, 0, 40), QueueRange("T", "b", 3, 0, 10)]
    assert shape(pack_ranges(base, uneven, 2)) == [[(0, 0, 900)],
                                                   [(1, 0, 50), (2, 0, 40), (3, 0, 10)]]
    assert pack_ranges(base, [QueueRange("T", "b", 0, 3, 3)], 2) == []
    # queues of unequal sizes still make exactly as many partitions as wanted, balanced
    ragged = [QueueRange("T", "b", q, 0, 25_600 - 400 * (q % 3)) for q in range(8)]
    assert [sum(r.size for r in g) for g in pack_ranges(base, ragged, 2)] == [101_200, 100_800]


def test_parallelism_without_a_spark_context_comes_from_the_conf_and_is_checked():
    from orbitmq.errors import SparkError
    from orbitmq.spark.source import default_parallelism

    class ConnectLike:  # a Spark Connect session: no SparkContext, a conf
        def __init__(self, conf: dict[str, str]) -> None:
            self.conf = conf

        @property
        def sparkContext(self):  # noqa: N802
            raise NotImplementedError("no SparkContext on Spark Connect")

    assert default_parallelism(ConnectLike({})) is None
    assert default_parallelism(ConnectLike({"spark.default.parallelism": "6"})) == 6
    for bad in ("0", "-2", "many"):
        with pytest.raises(SparkError, match="spark.default.parallelism is .* not a positive"):
            default_parallelism(ConnectLike({"spark.default.parallelism": bad}))


def test_read_options_defaults_and_lower_cased_keys():
    batch = parse_read_options({**NS, "topic": "B,A,A"}, streaming=False)
    assert batch.topics == ("A", "B") and batch.starting.kind == "earliest"
    stream = parse_read_options({**NS, "topic": "A", "maxoffsetspertrigger": "10",
                                 "minoffsetspertrigger": "5", "maxtriggerdelay": "2m",
                                 "tags": "x||y", "failondataloss": "false"}, streaming=True)
    assert stream.starting.kind == "latest" and stream.max_offsets_per_trigger == 10
    assert stream.max_trigger_delay_ms == 120_000 and stream.tag_set == {"x", "y"}
    assert stream.fail_on_data_loss is False
    assert parse_write_options(NS, streaming=True).exactly_once is True
    assert parse_write_options(NS, streaming=False).exactly_once is False


def test_timeouts_groups_commit_topic_and_sql_options_are_parsed_and_checked():
    read = parse_read_options({**NS, "topic": "A", "pulltimeoutms": "2500", "sql": "n > 3",
                               "consumergroup": "g1", "committopic": "Commits"}, streaming=False)
    assert (read.pull_timeout_ms, read.consumer_group, read.commit_topic) == (2500, "g1", "Commits")
    assert read.sql == "n > 3" and read.tag_set is None and read.selector.expression == "n > 3"
    write = parse_write_options({**NS, "sendtimeoutms": "750", "producergroup": "g2",
                                 "committopic": "C2", "transactioncheckimmunityseconds": "60"},
                                streaming=True)
    assert (write.send_timeout_ms, write.producer_group, write.commit_topic,
            write.check_immunity_s) == (750, "g2", "C2", 60)
    for options, name in [({"pullTimeoutMs": "0"}, "pullTimeoutMs"),
                          ({"sql": "n >"}, "sql"),
                          ({"sql": "n > 1", "tags": "a"}, "sql"),
                          ({"consumerGroup": "a b"}, "consumerGroup"),
                          ({"consumerGroup": ""}, "consumerGroup"),
                          ({"commitTopic": "a/b"}, "commitTopic"),
                          ({"commitTopic": ""}, "commitTopic")]:
        with pytest.raises(OptionError) as excinfo:
            parse_read_options({**NS, "topic": "A", **options}, streaming=False)
        assert excinfo.value.option == name
    for options, name in [({"sendTimeoutMs": "-5"}, "sendTimeoutMs"),
                          ({"producerGroup": ""}, "producerGroup"),  # not the default
                          ({"commitTopic": ""}, "commitTopic"),
                          ({"transactionCheckImmunitySeconds": "soon"},
                           "transactionCheckImmunitySeconds")]:
        with pytest.raises(OptionError) as excinfo:
            parse_write_options({**NS, **options}, streaming=True)
        assert excinfo.value.option == name


def test_offsets_are_canonical_and_rate_limits_are_fair_and_exact():
    messy = {"b": {"x:10": 1, "x:2": 2}, "a": {"y:0": 3}}
    assert to_json(messy) == '{"a":{"y:0":3},"b":{"x:10":1,"x:2":2}}'
    assert list(canonical(messy)) == ["a", "b"]
    start = {"T": {"b:0": 0, "b:1": 10, "b:2": 5}}
    latest = {"T": {"b:0": 1000, "b:1": 10, "b:2": 505}}
    end = rate_limit(start, latest, 301)
    assert sum(end["T"][k] - start["T"][k] for k in start["T"]) == 301
    assert end == {"T": {"b:0": 201, "b:1": 10, "b:2": 105}}
    assert rate_limit(start, latest, 10_000) == latest
    assert rate_limit(start, latest, 301) == end  # deterministic
    pieces = split_ranges([QueueRange("T", "b", 0, 5, 30)], 10)
    assert [(p.start, p.end) for p in pieces] == [(5, 15), (15, 25), (25, 30)]


def test_retention_below_the_start_fails_or_is_logged(caplog):
    opts = parse_read_options({**NS, "topic": "T"}, streaming=True)
    with pytest.raises(Exception, match=r"queue b:0: offsets \[3, 9\) are no longer stored"):
        check_retention(opts, "T", "b:0", 3, QueueBounds(9, 20))
    lenient = parse_read_options({**NS, "topic": "T", "failOnDataLoss": "false"}, streaming=True)
    with caplog.at_level(logging.WARNING):
        assert check_retention(lenient, "T", "b:0", 3, QueueBounds(9, 20)) == 9
    assert "offsets [3, 9) are no longer stored" in caplog.text


def _stored(n: int, *, tags: str = "a", compressed_body: bytes | None = None) -> bytes:
    import zlib

    out = []
    for i in range(n):
        body = f"body-{i}".encode()
        kw = {}
        if compressed_body is not None:
            body, kw = zlib.compress(compressed_body), {"sys_flag": 1}
        out.append(encode_stored_message(
            topic="T", body=body, queue_offset=i, queue_id=2, born_timestamp=1000 + i,
            properties={"TAGS": f"{tags}{i % 2}", "KEYS": f"k{i} x", "UNIQ_KEY": f"U{i:031d}"},
            **kw))
    return b"".join(out)


def _plan(columns: str, include_properties: bool = False, tags: bool = False):
    from pyspark.sql.types import StructType

    from orbitmq.spark.schema import read_plan, read_schema

    full = read_schema(include_headers=True)
    wanted = StructType([full[name] for name in columns.split()])
    return read_plan(wanted, include_properties, tags, False)


def test_pull_bodies_decode_into_the_batches_spark_expects():
    raw = _stored(50)
    plan = _plan("topic broker_name queue_id queue_offset msg_id keys tags body properties "
                 "born_timestamp store_timestamp reconsume_times headers", include_properties=True,
                 tags=True)
    batch = decode_body(raw, "T", "broker-a", 40, plan, frozenset({"a1"}))
    assert batch is not None and batch.schema == plan.schema
    ref = [m for m in iter_stored_messages(raw) if m.queue_offset < 40 and m.tags == "a1"]
    got = batch.to_pydict()
    assert got["queue_offset"] == [m.queue_offset for m in ref] and len(ref) == 20
    assert got["body"] == [m.body for m in ref] and got["msg_id"] == [m.msg_id for m in ref]
    assert got["keys"] == [m.keys for m in ref] and set(got["topic"]) == {"T"}
    assert batch.column("born_timestamp").cast("int64").to_pylist() == [
        m.born_timestamp * 1000 for m in ref]
    assert [dict(p) for p in got["properties"]] == [m.properties for m in ref]
    assert got["headers"] == [[]] * 20  # TAGS, KEYS and UNIQ_KEY are the system's
    only_body = _plan("body")
    packed = decode_body(_stored(1, compressed_body=b"z" * 5000), "T", "b", 10, only_body, None)
    assert packed is not None and packed.to_pydict() == {"body": [b"z" * 5000]}
    with pytest.raises(Exception, match="CRC"):
        decode_body(raw.replace(b"body-3", b"body-X"), "T", "b", 99, only_body, None)
    assert decode_body(raw, "T", "b", 0, only_body, None) is None
    counted = _plan("queue_offset")
    assert counted.offsets_only and not _plan("queue_offset", tags=True).offsets_only
    rows = offset_rows("T", "b", 3, 5, 9, _plan("topic queue_id queue_offset"))
    assert rows.to_pydict() == {"topic": ["T"] * 4, "queue_id": [3] * 4, "queue_offset": [5, 6, 7, 8]}


def test_user_headers_leave_system_properties_out():
    assert user_headers({"KEYS": "k", "color": "blue", "UNIQ_KEY": "U", "TRAN_MSG": "true",
                         "__SHARDINGKEY": "s", "n": "é"}) == [("color", b"blue"), ("n", "é".encode())]


def _answer(code: int, nxt: int, lo: int = 0, hi: int = 100, remark: str | None = None,
            body: bytes = b"") -> RawPullResult:
    """A broker's pull answer as the SDK's raw pull hands it to the source."""
    fields = {"suggestWhichBrokerId": "0", "nextBeginOffset": str(nxt), "minOffset": str(lo),
              "maxOffset": str(hi)}
    resp = RemotingCommand(code=code, remark=remark, ext_fields=fields, body=body)
    return parse_raw_pull_response(resp, None)


def test_pull_answers_that_skip_offsets_are_gaps():
    win = Window(10, 50)
    assert _step(win, _answer(ResponseCode.SUCCESS, 42, body=b"x"), 10, 50) == 42
    assert _step(win, _answer(ResponseCode.PULL_RETRY_IMMEDIATELY, 45), 42, 50) == 45
    assert win.gaps == [] and win.bodies == [b"x"]
    assert _step(win, _answer(ResponseCode.PULL_OFFSET_MOVED, 48, lo=48), 45, 50) == 48
    assert _step(win, _answer(ResponseCode.PULL_RETRY_IMMEDIATELY, 49,
                              remark="MESSAGE_WAS_REMOVING"), 48, 50) == 49
    assert _step(win, _answer(ResponseCode.PULL_NOT_FOUND, 49, hi=49), 49, 50) == 50
    assert [(g.start, g.end) for g in win.gaps] == [(45, 48), (48, 49), (49, 50)]
    with pytest.raises(TopicNotFoundError):  # fetch_window turns it into "the topic was deleted"
        _answer(ResponseCode.TOPIC_NOT_EXIST, 0)
    with pytest.raises(RemoteProtocolError, match="nextBeginOffset"):  # a broker that stalls
        _step(Window(0, 10), _answer(ResponseCode.PULL_RETRY_IMMEDIATELY, 3), 3, 10)
    assert json.dumps([g.reason for g in win.gaps])


def test_the_connectors_errors_are_orbitmq_errors_under_their_old_names():
    import orbitmq.spark
    from orbitmq.spark import commit_log, fetch, sink_rows

    assert orbitmq.spark.OptionError is OptionError
    assert (orbitmq.spark.DataLossError, fetch.DataLossError) == (SparkDataLossError,) * 2
    assert (orbitmq.spark.CommitError, commit_log.CommitError) == (SparkCommitError,) * 2
    assert orbitmq.spark.SinkSchemaError is sink_rows.SinkSchemaError is SparkSchemaError
    with pytest.raises(OptionError) as excinfo:
        parse_read_options({"topic": "T"}, streaming=False)
    for kind in (SparkError, OrbitMQError, ClientError, ValueError):
        assert isinstance(excinfo.value, kind)
    assert str(excinfo.value).startswith("orbitmq option 'namesrv': ")
    schema_error = SparkSchemaError("body", "required")
    assert isinstance(schema_error, ValueError) and schema_error.column == "body"
    assert str(schema_error) == "orbitmq sink column 'body': required"
    assert issubclass(SparkDataLossError, SparkError) and issubclass(SparkCommitError, SparkError)


def test_sink_rows_become_the_messages_the_sdk_constructor_would_build():
    import pyarrow as pa
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    from orbitmq.protocol.message import Message, PropertyKey
    from orbitmq.spark.sink_rows import _message, plan_columns, to_messages

    built = _message("T", b"b", "tag", ["k1", "k2"], {PropertyKey.SHARDING_KEY: "s", "a": "1"})
    assert built == Message.with_system_properties(
        "T", b"b", properties={PropertyKey.SHARDING_KEY: "s", "a": "1"}, tags="tag",
        keys=["k1", "k2"])  # every field: a field added to Message fails this
    schema = StructType([StructField("body", BinaryType()), StructField("topic", StringType()),
                         StructField("keys", ArrayType(StringType())),
                         StructField("properties", MapType(StringType(), StringType())),
                         StructField("sharding_key", StringType())])
    opts = parse_write_options({**NS}, streaming=False)
    rb = pa.RecordBatch.from_pydict({
        "body": [b"x", b"y"], "topic": ["A", "B"], "keys": [["k"], None],
        "properties": [[("color", "red"), ("KEYS", "dropped")], None],
        "sharding_key": ["s1", None]})
    out = to_messages(rb, plan_columns(schema, opts), opts)
    assert [(o.message.topic, o.message.body, o.message.keys, o.message.properties, o.sharding_key)
            for o in out] == [("A", b"x", ["k"], {"color": "red", PropertyKey.SHARDING_KEY: "s1"},
                               "s1"), ("B", b"y", None, {}, None)]
    assert out[0].message.properties is not out[1].message.properties
    nulls = pa.RecordBatch.from_pydict({"body": [b"x", None], "topic": ["A", "A"],
                                        "keys": [None, None], "properties": [None, None],
                                        "sharding_key": [None, None]})
    with pytest.raises(SparkSchemaError, match="column 'body': a row has a null body"):
        to_messages(nulls, plan_columns(schema, opts), opts)
    no_topic = pa.RecordBatch.from_pydict({"body": [b"x"], "topic": [None], "keys": [None],
                                           "properties": [None], "sharding_key": [None]})
    with pytest.raises(SparkSchemaError, match="a row has a null topic"):
        to_messages(no_topic, plan_columns(schema, opts), opts)


def test_sink_columns_encode_as_the_sinks_messages_would():
    """to_columns (Arrow buffers to the SDK's column encoder) sends the bytes that to_messages
    and the per-Message encoder would: our frame with two topics, and Kafka's shape."""
    import pyarrow as pa
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    from orbitmq.client.producer.send_codec import prepare_batch
    from orbitmq.protocol.column_batch import encode_columns
    from orbitmq.spark.sink_rows import plan_columns, to_columns, to_messages

    ours = StructType([StructField("body", StringType()), StructField("topic", StringType()),
                       StructField("keys", ArrayType(StringType())),
                       StructField("tags", StringType()),
                       StructField("properties", MapType(StringType(), StringType()))])
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    kafka = StructType([StructField("value", BinaryType()), StructField("key", BinaryType()),
                        StructField("headers", ArrayType(header))])
    frames = [
        (ours, {}, pa.RecordBatch.from_pydict({
            "body": ["a", "bé", "c", "d"], "topic": ["A", "B", "A", "A"],
            "keys": [["k1", "k2"], None, [], ["x"]], "tags": ["t", None, "", "u"],
            "properties": [[("color", "red"), ("KEYS", "dropped")], None, [], [("n", "1")]]})
         .slice(0)),
        (kafka, {"topic": "K"}, pa.RecordBatch.from_pydict({
            "value": [b"v1", b"v2", b"v3"], "key": [b"key", None, "ключ".encode()],
            "headers": [[{"key": "h", "value": b"1"}], None, []]}).slice(1)),
    ]
    for schema, options, rb in frames:
        opts = parse_write_options({**NS, **options}, streaming=False)
        plan = plan_columns(schema, opts)
        messages = [o.message for o in to_messages(rb, plan, opts)]
        parts = to_columns(rb, plan, opts)
        assert sum(len(c) for _, c in parts) == rb.num_rows
        for topic, columns in parts:
            mine = [m for m in messages if m.topic == topic]
            ids = [f"{'0' * 28}{i:04X}" for i in range(len(mine))]
            assert encode_columns(columns, ids, rows_max=len(mine), bytes_max=1 << 20,
                                  message_size_max=1 << 20).body == \
                prepare_batch(mine, ids, 1 << 20).body, topic
    schema, _, rb = frames[0]
    opts = parse_write_options({**NS}, streaming=False)
    with pytest.raises(SparkSchemaError, match="column 'keys': an array of keys holds a null"):
        to_columns(pa.RecordBatch.from_pydict({**rb.to_pydict(), "keys": [["a", None]] * 4}),
                   plan_columns(schema, opts), opts)
    kafka_opts = parse_write_options({**NS, "topic": "K"}, streaming=False)
    with pytest.raises(SparkSchemaError, match="column 'key': a value is not UTF-8 text"):
        to_columns(pa.RecordBatch.from_pydict({"value": [b"v"], "key": [b"\xff"],
                                               "headers": [None]}, schema=frames[1][2].schema),
                   plan_columns(kafka, kafka_opts), kafka_opts)
