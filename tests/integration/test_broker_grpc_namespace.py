"""Namespaces at the gRPC wire (grpc/namespaces.py): each call's topics and groups stored as
``NS%name``, answers in bare names with the namespace beside them, refusals in the RPC's answer.

A real broker on a free gRPC port, called with grpcio and the generated stubs.
"""

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
from orbitmq.grpc.namespaces import apply_namespace, strip_namespace
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.namespaces import NAMESPACE_CHARS_MAX

CLIENT = ("x-mq-client-id", "ns-client@1")


def meta(ns: str | None = None) -> tuple[tuple[str, str], ...]:
    return (CLIENT,) if ns is None else (CLIENT, ("x-mq-namespace", ns))


def res(name: str, ns: str = "") -> pb.Resource:
    return pb.Resource(name=name, resource_namespace=ns)


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


def _topic(h: BrokerHarness, name: str) -> str:
    h.on_loop(lambda: h.broker.topics.update(TopicConfig(name, 2, 2)))
    return name


def _message(topic: pb.Resource, body: bytes, mid: str) -> pb.Message:
    return pb.Message(topic=topic, body=body, system_properties=pb.SystemProperties(
        message_id=mid, message_type=pb.NORMAL))


def _receive(stub: Any, topic: pb.Resource, group: pb.Resource, ns: str | None) -> list[pb.Message]:
    req = spb.ReceiveMessageRequest(group=group, message_queue=pb.MessageQueue(topic=topic),
                                    batch_size=32, invisible_duration=duration_pb2.Duration(seconds=30),
                                    long_polling_timeout=duration_pb2.Duration(seconds=1))
    return [r.message for r in stub.ReceiveMessage(req, metadata=meta(ns), timeout=20)
            if r.HasField("message")]


def test_apply_and_strip_walk_every_resource() -> None:
    req = spb.ReceiveMessageRequest(group=res("G"), message_queue=pb.MessageQueue(topic=res("T", "shop")))
    assert apply_namespace(req, "shop") == "shop"
    assert (req.group.name, req.message_queue.topic.name) == ("shop%G", "shop%T")
    assert not req.group.resource_namespace and not req.message_queue.topic.resource_namespace
    settings = spb.TelemetryCommand(settings=pb.Settings(subscription=pb.Subscription(
        group=res("%RETRY%G"), subscriptions=[pb.SubscriptionEntry(topic=res("RMQ_SYS_TRACE_TOPIC"))])))
    apply_namespace(settings, "shop")
    sub = settings.settings.subscription
    assert (sub.group.name, sub.subscriptions[0].topic.name) == ("%RETRY%shop%G", "RMQ_SYS_TRACE_TOPIC")
    strip_namespace(settings, "shop")
    assert (sub.group.name, sub.group.resource_namespace) == ("%RETRY%G", "shop")
    assert (sub.subscriptions[0].topic.name, sub.subscriptions[0].topic.resource_namespace) == \
        ("RMQ_SYS_TRACE_TOPIC", "")
    plain = spb.QueryRouteRequest(topic=res("bank%T"))
    assert apply_namespace(plain, "") == "" and plain.topic.name == "bank%T"  # no namespace: as is


def test_same_topic_in_two_namespaces_is_two_topics(harness: BrokerHarness, stub: Any) -> None:
    _topic(harness, "shop%Orders")
    _topic(harness, "bank%Orders")
    for ns in ("shop", "bank"):  # one names it in the metadata only, one in the resource only
        topic = res("Orders", ns) if ns == "bank" else res("Orders")
        sent = stub.SendMessage(spb.SendMessageRequest(messages=[
            _message(topic, ns.encode(), f"01{ns.upper().encode().hex()}")]),
            metadata=meta(ns if ns == "shop" else None), timeout=10)
        assert sent.status.code == pb.OK, sent
    harness.wait_dispatched()
    for ns in ("shop", "bank"):
        got = _receive(stub, res("Orders", ns), res("G", ns), ns)
        assert [(m.body, m.topic.name, m.topic.resource_namespace) for m in got] == \
            [(ns.encode(), "Orders", ns)]
    route = stub.QueryRoute(spb.QueryRouteRequest(topic=res("Orders", "shop")), metadata=meta("shop"),
                            timeout=10)
    assert route.status.code == pb.OK
    assert {(q.topic.name, q.topic.resource_namespace) for q in route.message_queues} == {("Orders", "shop")}
    missing = stub.QueryRoute(spb.QueryRouteRequest(topic=res("Orders")), metadata=meta(), timeout=10)
    assert missing.status.code == pb.TOPIC_NOT_FOUND  # the bare name is no topic


@pytest.mark.parametrize("metadata_ns, resource_ns, why", [
    ("a%b", "", "x-mq-namespace"),
    ("", "sp ace", "namespace"),
    ("x" * (NAMESPACE_CHARS_MAX + 1), "", "longer than"),
    ("shop", "bank", "where the call names"),
])
def test_bad_namespaces_are_refused_in_the_answer(stub: Any, metadata_ns: str, resource_ns: str,
                                                  why: str) -> None:
    r = stub.QueryRoute(spb.QueryRouteRequest(topic=res("Orders", resource_ns)),
                        metadata=meta(metadata_ns), timeout=10)
    assert r.status.code == pb.BAD_REQUEST and why in r.status.message, r
    got = list(stub.ReceiveMessage(spb.ReceiveMessageRequest(
        group=res("G", resource_ns), message_queue=pb.MessageQueue(topic=res("T", resource_ns))),
        metadata=meta(metadata_ns), timeout=10))
    assert [a.status.code for a in got] == [pb.BAD_REQUEST]


def test_a_name_too_long_once_wrapped_is_refused(stub: Any) -> None:
    r = stub.QueryRoute(spb.QueryRouteRequest(topic=res("T" * 251, "shop")), metadata=meta("shop"),
                        timeout=10)
    assert r.status.code == pb.BAD_REQUEST and "longer than 255" in r.status.message


def test_telemetry_settings_in_a_namespace(harness: BrokerHarness, stub: Any) -> None:
    settings = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
        group=res("TeleG", "shop"), long_polling_timeout=duration_pb2.Duration(seconds=20)))
    bad = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
        group=res("TeleG", "bad%ns")))
    stream = stub.Telemetry(iter([spb.TelemetryCommand(settings=settings),
                                  spb.TelemetryCommand(settings=bad)]), metadata=meta("shop"), timeout=10)
    answer, refused = next(stream), next(stream)
    stream.cancel()
    assert answer.status.code == pb.OK
    assert (answer.settings.subscription.group.name,
            answer.settings.subscription.group.resource_namespace) == ("TeleG", "shop")
    assert harness.broker.pop.ctx.sub_groups.find("shop%TeleG") is not None
    assert refused.status.code == pb.BAD_REQUEST and "not of" in refused.status.message


def test_remoting_takes_wrapped_names_and_leaves_the_ns_ext_fields(harness: BrokerHarness) -> None:
    """A 4.x client wraps names itself (``shop%Orders``): an ordinary topic to the broker. The
    ``ns``/``nsd`` extFields a Java client's namespaceV2 adds are accepted and, as RocketMQ's
    brokers do, not applied."""
    _topic(harness, "shop%Orders")
    _topic(harness, "Orders")
    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
        for topic in ("shop%Orders", "Orders"):
            h = harness.send_header(topic)
            fields = h.to_v2_ext_fields() if code == RequestCode.SEND_MESSAGE_V2 else h.to_ext_fields()
            fields.update({"ns": "shop", "nsd": "true"})
            r = harness.invoke(code, fields, topic.encode())
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    harness.wait_dispatched()
    assert [bytes(m.body) for m in harness.pull_all("shop%Orders", 0)] == [b"shop%Orders"] * 2
    assert [bytes(m.body) for m in harness.pull_all("Orders", 0)] == [b"Orders"] * 2
