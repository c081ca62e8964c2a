"""SQL92 property filters end to end: the SDK's pull and push consumers against a real broker with
``enable_property_filter`` on, raw requests for what goes on the wire (refusals, offsets that do
not move, CHECK_CLIENT_CONFIG, heartbeat subscriptions), and a broker with filtering off."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from push_support import wait_until
from test_broker_support import BrokerHarness, broker_config

from orbitmq import (
    Admin,
    BrokerError,
    ConsumeResult,
    ExpressionError,
    Message,
    MessageSelector,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
)
from orbitmq.protocol.bodies import (
    CheckClientRequestBody,
    ConsumerData,
    HeartbeatData,
    SubscriptionData,
)
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.headers import PullMessageRequestHeader, PullSysFlag
from orbitmq.protocol.message import MessageExt
from orbitmq.testing import EmbeddedCluster

FAST = {"rebalance_interval_ms": 2000, "persist_consumer_offset_interval_ms": 1000}
COUNT = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("sql"), enable_property_filter=True) as c:
        yield c


def send_numbered(namesrv: str, topic: str, count: int = COUNT) -> None:
    """Messages whose property ``a`` is 0..count-1 (every fifth without it), tags red/blue."""
    with Admin(namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
        wait_until(lambda: topic in admin.list_topics(), 10, f"route of {topic}")
    with Producer("sql-producer", namesrv=namesrv) as producer:
        for i in range(count):
            props = {} if i % 5 == 4 else {"a": str(i)}
            producer.send(Message(topic, f"m{i}".encode(), tags="red" if i % 2 else "blue",
                                  properties=props))


def pull_everything(consumer: PullConsumer, topic: str, expression: object) -> list[MessageExt]:
    out: list[MessageExt] = []
    for mq in consumer.fetch_queues(topic):
        offset = 0
        for _ in range(100):
            res = consumer.pull(mq, offset, 32, expression)  # type: ignore[arg-type]
            out.extend(res.messages)
            if res.status is PullStatus.NO_NEW_MSG:
                break
            offset = res.next_begin_offset
    return out


def bodies(messages: list[MessageExt]) -> list[str]:
    return sorted(m.body.decode() for m in messages)


def expected(predicate: object) -> list[str]:
    return sorted(f"m{i}" for i in range(COUNT) if predicate(i))  # type: ignore[operator]


# -- the SDK --------------------------------------------------------------------------------------
def test_a_pull_by_sql_returns_exactly_the_matching_messages(cluster: EmbeddedCluster) -> None:
    topic = "SqlPull"
    send_numbered(cluster.namesrv, topic)
    with PullConsumer("sql-pull", cluster.namesrv) as consumer:
        got = pull_everything(consumer, topic, MessageSelector.by_sql("a > 5"))
        assert bodies(got) == expected(lambda i: i > 5 and i % 5 != 4)
        both = pull_everything(consumer, topic,
                               MessageSelector.by_sql("TAGS = 'red' AND a BETWEEN 3 AND 12"))
        assert bodies(both) == expected(lambda i: i % 2 and 3 <= i <= 12 and i % 5 != 4)
        missing = pull_everything(consumer, topic, MessageSelector.by_sql("a IS NULL"))
        assert bodies(missing) == expected(lambda i: i % 5 == 4)
        tags = pull_everything(consumer, topic, MessageSelector.by_tag("blue"))
        assert bodies(tags) == expected(lambda i: i % 2 == 0)


def test_a_bad_expression_raises_before_anything_is_sent(cluster: EmbeddedCluster) -> None:
    """It used to be sent as tags: ``"a > 5"`` matched nothing and the pull moved
    next_begin_offset past every message."""
    topic = "SqlBad"
    send_numbered(cluster.namesrv, topic, 5)
    with PullConsumer("sql-bad", cluster.namesrv) as consumer:
        mq = consumer.fetch_queues(topic)[0]
        with pytest.raises(ExpressionError, match="by_sql"):
            consumer.pull(mq, 0, 32, "a > 5")
        with pytest.raises(ExpressionError, match="character 4"):
            consumer.pull(mq, 0, 32, MessageSelector.by_sql("a >"))
        # Nothing was skipped: the whole queue is still there from offset 0.
        assert consumer.pull(mq, 0, 32).next_begin_offset > 0


def test_a_push_consumer_by_sql_gets_exactly_the_matching_messages(
        cluster: EmbeddedCluster) -> None:
    topic, group = "SqlPush", "sql-push"
    send_numbered(cluster.namesrv, topic)
    got: list[str] = []
    lock = threading.Lock()

    def listener(messages: list[MessageExt], _ctx: object) -> ConsumeResult:
        with lock:
            got.extend(m.body.decode() for m in messages)
        return ConsumeResult.SUCCESS

    want = expected(lambda i: i >= 10 and i % 5 != 4)
    consumer = PushConsumer(group, namesrv=cluster.namesrv, consume_from="FIRST", **FAST)
    consumer.subscribe(topic, MessageSelector.by_sql("a >= 10"), listener)
    with consumer:
        wait_until(lambda: len(got) >= len(want), 30, "the matching messages")
        with Producer("sql-producer", namesrv=cluster.namesrv) as producer:  # while running
            producer.send(Message(topic, b"late-no", properties={"a": "1"}))
            producer.send(Message(topic, b"late-yes", properties={"a": "99"}))
        wait_until(lambda: "late-yes" in got, 30, "the late matching message")
    assert sorted(got) == sorted([*want, "late-yes"])


def test_a_long_poll_by_sql_wakes_for_a_matching_message(cluster: EmbeddedCluster) -> None:
    topic = "SqlLongPoll"
    send_numbered(cluster.namesrv, topic, 2)
    with PullConsumer("sql-poll", cluster.namesrv) as consumer, \
            Producer("sql-producer", namesrv=cluster.namesrv) as producer:
        mq = consumer.fetch_queues(topic)[0]
        end = consumer.max_offset(mq)
        result: list[object] = []
        poller = threading.Thread(target=lambda: result.append(consumer.pull(
            mq, end, 32, MessageSelector.by_sql("a = 7"), suspend=20)))
        poller.start()
        sent = producer.send(Message(topic, b"seven", properties={"a": "7"}),
                             selector=lambda mqs, _m, _a: next(q for q in mqs if q == mq))
        poller.join(30)
        assert not poller.is_alive()
        [res] = result
        assert sent.queue == mq
        assert [m.body for m in res.messages] == [b"seven"]  # type: ignore[attr-defined]


# -- the wire -------------------------------------------------------------------------------------
@pytest.fixture
def broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerHarness]:
    enabled = getattr(request, "param", True)
    h = BrokerHarness(broker_config(tmp_path, enable_property_filter=enabled))
    try:
        yield h
    finally:
        h.close()


def sql_pull(h: BrokerHarness, topic: str, expression: str, *, offset: int = 0,
             commit_offset: int = -1, group: str = "g", flag_subscription: bool = True,
             expression_type: str = "SQL92") -> tuple[int, str | None, dict[str, str], list[str]]:
    flags = PullSysFlag.SUBSCRIPTION if flag_subscription else PullSysFlag(0)
    if commit_offset >= 0:
        flags |= PullSysFlag.COMMIT_OFFSET
    fields = PullMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=0, queue_offset=offset, max_msg_nums=32,
        sys_flag=int(flags), commit_offset=max(commit_offset, 0), suspend_timeout_millis=0,
        subscription=expression, expression_type=expression_type).to_ext_fields()
    h.wait_dispatched()
    r = h.invoke(RequestCode.PULL_MESSAGE, fields)
    from orbitmq.protocol.stored import iter_stored_messages

    msgs = [m.body.decode() for m in iter_stored_messages(r.body)] if r.body else []
    return r.code, r.remark, dict(r.ext_fields), msgs


def committed(h: BrokerHarness, topic: str, group: str = "g") -> int:
    return h.on_loop(lambda: h.broker.offsets.query(group, topic, 0))


def fill(h: BrokerHarness, topic: str, count: int = 10) -> None:
    for i in range(count):
        h.send_ok(topic, f"m{i}".encode(), props={"a": str(i)})


def test_the_broker_filters_a_raw_sql_pull(broker: BrokerHarness) -> None:
    fill(broker, "RawSql")
    code, _, fields, msgs = sql_pull(broker, "RawSql", "a > 6")
    assert code == ResponseCode.SUCCESS and msgs == ["m7", "m8", "m9"]
    assert fields["nextBeginOffset"] == "10"
    code, _, fields, msgs = sql_pull(broker, "RawSql", "a > 100")
    assert code == ResponseCode.PULL_RETRY_IMMEDIATELY and msgs == []
    assert fields["nextBeginOffset"] == "10"  # evaluated all ten: they may be skipped


@pytest.mark.parametrize("expression, expression_type, words", [
    ("a >", "SQL92", "at character 4"),
    ("a = NULL", "SQL92", "IS NULL"),
    ("||", "TAG", "names no tag"),
    ("a > 5", "JSONPATH", "unknown expression type"),
])
def test_an_expression_that_does_not_parse_moves_no_offset(
        broker: BrokerHarness, expression: str, expression_type: str, words: str) -> None:
    fill(broker, "RawBad")
    broker.on_loop(lambda: broker.broker.offsets.commit("g", "RawBad", 0, 2))
    code, remark, fields, msgs = sql_pull(broker, "RawBad", expression, commit_offset=7,
                                          expression_type=expression_type)
    assert code == ResponseCode.SUBSCRIPTION_PARSE_FAILED == 23
    assert remark is not None and words in remark and repr(expression) in remark
    assert "nextBeginOffset" not in fields and msgs == []
    assert committed(broker, "RawBad") == 2  # the request's commit of 7 was not applied


@pytest.mark.parametrize("broker", [False], indirect=True)
def test_a_broker_with_filtering_off_refuses_sql_with_its_own_code(broker: BrokerHarness) -> None:
    fill(broker, "RawOff")
    broker.on_loop(lambda: broker.broker.offsets.commit("g", "RawOff", 0, 1))
    code, remark, fields, _ = sql_pull(broker, "RawOff", "a > 5", commit_offset=5)
    assert code == ResponseCode.FILTER_NOT_SUPPORTED
    assert remark is not None and "enable_property_filter" in remark
    assert "nextBeginOffset" not in fields and committed(broker, "RawOff") == 1
    code, _, _, msgs = sql_pull(broker, "RawOff", "*", expression_type="TAG")
    assert code == ResponseCode.SUCCESS and len(msgs) == 10  # tags still work


@pytest.mark.parametrize("broker, expression, code", [
    (True, "a > 5", ResponseCode.SUCCESS),
    (True, "a >", ResponseCode.SUBSCRIPTION_PARSE_FAILED),
    (False, "a > 5", ResponseCode.FILTER_NOT_SUPPORTED),
], indirect=["broker"])
def test_check_client_config_answers_as_a_pull_would(broker: BrokerHarness, expression: str,
                                                     code: ResponseCode) -> None:
    sub = SubscriptionData("T", expression, expression_type="SQL92")
    body = CheckClientRequestBody("client-1", "g", sub).to_json()
    assert broker.invoke(RequestCode.CHECK_CLIENT_CONFIG, body=body).code == code
    tag = CheckClientRequestBody("client-1", "g", SubscriptionData("T", "a || b")).to_json()
    assert broker.invoke(RequestCode.CHECK_CLIENT_CONFIG, body=tag).code == ResponseCode.SUCCESS


def test_a_pull_without_its_own_subscription_uses_the_heartbeat_one(
        broker: BrokerHarness) -> None:
    fill(broker, "RawBeat")
    sub = SubscriptionData("RawBeat", "a < 2", expression_type="SQL92")
    beat = HeartbeatData("client-1", [], [ConsumerData("beat-group", subscription_data_set=[sub])])
    assert broker.invoke(RequestCode.HEART_BEAT, body=beat.to_json()).code == ResponseCode.SUCCESS
    code, _, _, msgs = sql_pull(broker, "RawBeat", "", group="beat-group",
                                flag_subscription=False, expression_type="")
    assert code == ResponseCode.SUCCESS and msgs == ["m0", "m1"]


def test_a_push_consumer_does_not_start_on_a_broker_with_filtering_off(tmp_path: Path) -> None:
    with EmbeddedCluster(tmp_path) as off:
        send_numbered(off.namesrv, "SqlOff", 2)
        consumer = PushConsumer("sql-off", namesrv=off.namesrv, **FAST)
        consumer.subscribe("SqlOff", MessageSelector.by_sql("a > 0"), lambda m, c: None)
        with pytest.raises(BrokerError) as refused:
            consumer.start()
        assert refused.value.code == ResponseCode.FILTER_NOT_SUPPORTED
        assert "enable_property_filter" in refused.value.remark
        with PullConsumer("sql-off-pull", off.namesrv) as puller:
            mq = puller.fetch_queues("SqlOff")[0]
            with pytest.raises(BrokerError) as pull_refused:
                puller.pull(mq, 0, 32, MessageSelector.by_sql("a > 0"))
            assert pull_refused.value.code == ResponseCode.FILTER_NOT_SUPPORTED


# -- Spark ----------------------------------------------------------------------------------------
def test_a_spark_read_range_with_the_sql_option_reads_the_matching_rows(
        cluster: EmbeddedCluster) -> None:
    """The Spark source's partition reader (no SparkSession needed) with ``sql``."""
    pytest.importorskip("pyarrow")
    from orbitmq.spark.fetch import read_range
    from orbitmq.spark.offsets import QueueRange
    from orbitmq.spark.options import parse_read_options
    from orbitmq.spark.schema import read_plan, read_schema

    topic = "SqlSpark"
    send_numbered(cluster.namesrv, topic)
    opts = parse_read_options({"namesrv": cluster.namesrv, "topic": topic, "sql": "a < 4"},
                              streaming=False)
    plan = read_plan(read_schema(), opts.include_properties, False, True)
    rows: list[bytes] = []
    with PullConsumer("sql-spark-probe", cluster.namesrv) as probe:
        for mq in probe.fetch_queues(topic):
            rng = QueueRange(topic, mq.broker_name, mq.queue_id, 0, probe.max_offset(mq))
            for batch in read_range(rng, opts, plan):
                rows.extend(batch.column("body").to_pylist())
    assert sorted(r.decode() for r in rows) == expected(lambda i: i < 4)
