"""Subscription filters and the official C++ client (PyPI ``rocketmq`` 0.4.4) on a broker with
SQL92 property filtering on (``--enable-property-filter true``).

The C++ client cannot subscribe with SQL92: its API takes a tag expression only, and nothing it
sends names an expression type (its heartbeats' subscription data and its PULL_MESSAGE headers
have no ``expressionType``: see the frames it sent in tests/data/golden.json), so whatever
expression it is given is a TAG expression to the broker, as it is to RocketMQ's. These tests show
that its TAG subscriptions still work with filtering on, that an SQL92-looking expression given to
it selects by tag (so it matches nothing here, and the broker does not refuse it), while OrbitMQ's
SDK gets exactly the SQL92 matches from the same topic.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from compat_support import (
    CppClient,
    OurClient,
    Outgoing,
    RawClient,
    Received,
    Servers,
    unique,
    wait_for_default_route,
)
from test_cpp_client import cpp_pull, sent_ok, spec, wait_stored

import orbitmq
from orbitmq.testing import standalone_process

pytestmark = pytest.mark.compat

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden.json"
SERVER_READY_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def servers(compat_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """`orbitmq standalone` with property filtering on (this module's own servers)."""
    proc = standalone_process(str(tmp_path_factory.mktemp("filter-store")),
                              "--enable-property-filter", "true")
    try:
        addrs = proc.wait_ready("namesrv", "broker", timeout=SERVER_READY_TIMEOUT_S)
        found = Servers(addrs["namesrv"], addrs["broker"], proc.output)
        wait_for_default_route(found)
        yield found
    finally:
        proc.stop()
        if proc.proc.stdout is not None:
            proc.proc.stdout.close()


@pytest.fixture(scope="module")
def filtered_topic(module_cpp: CppClient, servers: Servers) -> tuple[str, list[dict[str, Any]]]:
    """Messages sent by the C++ client, tagged TagA/TagB/TagC, with a numeric property ``a``."""
    topic = unique("CompatFilter")
    tags = ["TagA", "TagB", "TagC", "TagA", "TagB", "TagC", "TagA", "TagB"]
    want = [spec(topic, i, tags=tag, prefix="filtered", props={"a": str(i), "color": f"c{i}"})
            for i, tag in enumerate(tags)]
    sent_ok(module_cpp.run("send_sync", group=unique("CompatProducer"), messages=want), len(want))
    with RawClient(servers.namesrv) as raw:
        wait_stored(raw, topic, len(want))
    return topic, want


def test_the_cpp_client_names_no_expression_type() -> None:
    frames = json.loads(GOLDEN.read_text())["frames"]
    pulls = [f for f in frames if f.get("code") == 11]
    assert pulls and all("expressionType" not in f["ext_fields"] for f in pulls)
    text = json.dumps(frames)
    assert "subscriptionDataSet" in text and "expressionType" not in text


def test_cpp_tag_subscriptions_work_with_filtering_on(
        cpp: CppClient, filtered_topic: tuple[str, list[dict[str, Any]]]) -> None:
    topic, sent = filtered_topic
    for expression, tags in (("TagA || TagC", {"TagA", "TagC"}), ("*", {"TagA", "TagB", "TagC"})):
        got = cpp_pull(cpp, topic, expression)
        want = [m for m in sent if m["tags"] in tags]
        assert sorted((m.body, m.tags) for m in got) == sorted(
            (m["body"].encode(), m["tags"]) for m in want), expression


def test_sql_given_to_the_cpp_client_is_a_tag_expression(
        cpp: CppClient, servers: Servers, filtered_topic: tuple[str, list[dict[str, Any]]]) -> None:
    topic, sent = filtered_topic
    assert cpp_pull(cpp, topic, "a > 5") == []  # no message has the tag "a > 5"
    with orbitmq.PullConsumer(unique("SdkSql"), namesrv=servers.namesrv) as consumer:
        got: list[Received] = []
        for mq in consumer.fetch_queues(topic):
            res = consumer.pull(mq, 0, 32, orbitmq.MessageSelector.by_sql("a > 5"))
            got.extend(Received.from_ext(m) for m in res.messages)
    assert sorted(m.body for m in got) == sorted(m["body"].encode() for m in sent
                                                 if int(m["properties"]["a"]) > 5)


def test_cpp_push_consumer_with_tags_on_a_filtering_broker(
        cpp: CppClient, servers: Servers) -> None:
    """A C++ push consumer's TAG subscription (heartbeat subscription data without a type) is
    filtered by tag; messages from OrbitMQ's SDK carry properties it does not ask about."""
    topic, group = unique("CompatPushFilter"), unique("CompatPushFilterGroup")
    messages = [Outgoing(topic, f"push-{i}".encode(), tags="TagA" if i % 2 else "TagB",
                         keys=[f"k{i}"], properties={"a": str(i)}) for i in range(6)]
    with orbitmq.Admin(servers.namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
    push = cpp.start("push", group=group, topic=topic, expression="TagA", expect=3, wait_s=30,
                     thread_count=1, properties=["a"])
    push.wait_event("started")
    with RawClient(servers.namesrv) as raw:
        OurClient(raw).send(unique("SdkProducer"), messages)
    result = push.result()
    assert "start" not in result, result
    got = [Received.from_cpp(m) for m in result["messages"]]
    assert result["complete"], f"received {len(got)} of 3: {got}"
    assert sorted(m.body for m in got) == [b"push-1", b"push-3", b"push-5"]
