"""A 5.x message's ``trace_context`` (OpenTelemetry) is kept: stored as the TRACE_CONTEXT property
(as RocketMQ 5's proxy stores it), handed back to 5.x receivers in the system property, and
refused with BAD_REQUEST when it is too long or holds control characters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2
from test_broker_support import BrokerHarness, broker_config

from orbitmq.assembly import grpc_endpoint
from orbitmq.grpc._generated import definition_pb2 as pb
from orbitmq.grpc._generated import service_pb2 as spb
from orbitmq.grpc._generated import service_pb2_grpc as spb_grpc
from orbitmq.grpc.convert import TRACE_CONTEXT_MAX, incoming_properties, to_wire_message
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.message import MessageExt, PropertyKey

META = (("x-mq-client-id", "trace-client@1"),)
CONTEXT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _message(topic: str, mid: str, context: str | None) -> pb.Message:
    sp = pb.SystemProperties(message_id=mid, message_type=pb.NORMAL)
    if context is not None:
        sp.trace_context = context
    return pb.Message(topic=pb.Resource(name=topic), system_properties=sp, body=b"traced")


def test_the_trace_context_is_a_stored_property_and_comes_back() -> None:
    props = incoming_properties(_message("T", "01AA", CONTEXT))
    assert props[PropertyKey.TRACE_CONTEXT] == CONTEXT
    assert PropertyKey.TRACE_CONTEXT not in incoming_properties(_message("T", "01AB", None))
    wire = to_wire_message(MessageExt("T", b"x", properties={**props}), body_max=1024)
    assert wire.system_properties.trace_context == CONTEXT
    assert PropertyKey.TRACE_CONTEXT not in wire.user_properties


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[BrokerHarness]:
    h = BrokerHarness(broker_config(tmp_path / "store"))
    try:
        yield h
    finally:
        h.close()


@pytest.fixture
def stub(harness: BrokerHarness) -> Iterator[Any]:
    endpoint = grpc_endpoint(harness.broker)
    assert endpoint is not None
    with grpc.insecure_channel(f"127.0.0.1:{endpoint.port}") as channel:
        yield spb_grpc.MessagingServiceStub(channel)


def test_a_receiver_gets_the_senders_trace_context(harness: BrokerHarness, stub: Any) -> None:
    harness.on_loop(lambda: harness.broker.topics.update(TopicConfig("CtxT", 1, 1)))
    sent = stub.SendMessage(spb.SendMessageRequest(messages=[_message("CtxT", "01C0", CONTEXT)]),
                            metadata=META, timeout=10)
    assert sent.status.code == pb.OK, sent
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name="CtxG"), message_queue=pb.MessageQueue(topic=pb.Resource(name="CtxT")),
        batch_size=4, invisible_duration=duration_pb2.Duration(seconds=30),
        long_polling_timeout=duration_pb2.Duration(seconds=5))
    got = [r.message for r in stub.ReceiveMessage(req, metadata=META, timeout=20)
           if r.HasField("message")]
    assert [m.system_properties.trace_context for m in got] == [CONTEXT]


@pytest.mark.parametrize("context", ["x" * (TRACE_CONTEXT_MAX + 1), "00-\x01-01", "a\nb"])
def test_a_bad_trace_context_is_refused(harness: BrokerHarness, stub: Any, context: str) -> None:
    harness.on_loop(lambda: harness.broker.topics.update(TopicConfig("CtxBad", 1, 1)))
    sent = stub.SendMessage(spb.SendMessageRequest(messages=[_message("CtxBad", "01C1", context)]),
                            metadata=META, timeout=10)
    assert sent.status.code == pb.BAD_REQUEST
    assert "trace context" in sent.status.message
