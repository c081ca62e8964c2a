"""Message trace under access control (RocketMQ 5's rule: the trace topic is a topic like any
other): a traced producer's user needs Pub on the trace topic. Without it the sends still
succeed and the refused trace records are counted as lost; with it they are stored and found."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from auth_support import ALICE, ALICE_TOPIC, ROOT, auth_cluster

from orbitmq.client import Admin, Producer, TraceConfig
from orbitmq.protocol.message import Message
from orbitmq.protocol.topics import TRACE_TOPIC
from orbitmq.testing import EmbeddedCluster

QUICK = TraceConfig(flush_interval_ms=100, send_timeout_ms=3000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with auth_cluster(Path(tmp_path_factory.mktemp("trace-auth"))) as c:
        with Admin(c.namesrv, credentials=ROOT) as admin:
            admin.create_topic(TRACE_TOPIC, read_queue_nums=1, write_queue_nums=1)
        yield c


def _traced_send(cluster: EmbeddedCluster) -> tuple[str, object]:
    with Producer("alice-traced", cluster.namesrv, credentials=ALICE, enable_msg_trace=True,
                  trace_config=QUICK) as producer:
        sent = producer.send(Message(ALICE_TOPIC, b"traced"))
    return sent.msg_id, producer.trace_stats


def test_without_pub_on_the_trace_topic_sends_succeed_and_traces_are_lost(
        cluster: EmbeddedCluster) -> None:
    _msg_id, stats = _traced_send(cluster)
    assert (stats.appended, stats.sent_records, stats.lost) == (1, 0, 1)  # type: ignore[attr-defined]


def test_with_pub_on_the_trace_topic_the_trace_is_stored(cluster: EmbeddedCluster) -> None:
    with Admin(cluster.namesrv, credentials=ROOT) as admin:
        admin.create_acl("User:alice", [f"Topic:{TRACE_TOPIC}"], "Pub")
    msg_id, stats = _traced_send(cluster)
    assert (stats.sent_records, stats.lost) == (1, 0)  # type: ignore[attr-defined]
    with Admin(cluster.namesrv, credentials=ROOT) as admin:
        deadline = time.monotonic() + 20
        while not (trace := admin.message_trace(msg_id)).published:
            assert time.monotonic() < deadline, "the trace was never found"
            time.sleep(0.1)
    assert trace.published[0].producer_group == "alice-traced"
