"""Access control on the gRPC endpoint, at the wire: signed metadata, its refusals, the RPC table.

A real broker with authentication and authorization on, called with grpcio and the generated
stubs: the metadata a 5.x client signs, forged or left out, and a Normal user whose rules allow
one topic and one group.
"""

from __future__ import annotations

import inspect
import json
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
from orbitmq.grpc.access import RPC_NEEDS, audit_code, peer_host
from orbitmq.grpc.endpoint import GrpcEndpoint
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.security import Acl, User
from orbitmq.security.signature import grpc_signature

ROOT = ("root", "root-secret-1")
ALICE = ("alice", "alice-secret-1")
DATE = "20240101T120000Z"  # a day long past: no clock skew is checked (the client's Z is local)
SERVICE = spb.DESCRIPTOR.services_by_name["MessagingService"]


def signed(ak: str, sk: str, date: str = DATE, *, signature: str | None = None,
           client: str = "auth-test@1") -> tuple[tuple[str, str], ...]:
    """The metadata the official 5.x clients send (util/signature.py of the Python client)."""
    sig = signature if signature is not None else grpc_signature(date, sk).lower()
    return (("x-mq-client-id", client), ("x-mq-date-time", date),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, "
                              f"Signature={sig}"))


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHarness]:
    init = json.dumps({"username": ROOT[0], "password": ROOT[1]})
    h = BrokerHarness(broker_config(tmp_path_factory.mktemp("store"), authentication_enabled=True,
                                    authorization_enabled=True, init_authentication_user=init))
    try:
        registry = h.broker.access.registry
        registry.put_user(User(ALICE[0], ALICE[1]), create=True)
        registry.put_acl(Acl.from_dict({"subject": "User:alice", "policies": [{"entries": [
            {"resource": "Topic:AuthT", "actions": ["Pub", "Sub"], "decision": "Allow"},
            {"resource": "Group:AuthG", "actions": ["Sub"], "decision": "Allow"}]}]}))
        for name in ("AuthT", "OtherT"):
            h.on_loop(lambda n=name: h.broker.topics.update(TopicConfig(n, 2, 2)))  # type: ignore[misc]
        yield h
    finally:
        h.close()


@pytest.fixture(scope="module")
def stub(harness: BrokerHarness) -> Iterator[Any]:
    assert grpc_endpoint(harness.broker) is not None
    with grpc.insecure_channel(f"127.0.0.1:{grpc_endpoint(harness.broker).port}") as channel:
        yield spb_grpc.MessagingServiceStub(channel)


def _message(topic: str, mid: str = "01AUTH") -> pb.Message:
    return pb.Message(topic=pb.Resource(name=topic), body=b"x",
                      system_properties=pb.SystemProperties(message_id=mid, message_type=pb.NORMAL))


def _send(stub: Any, metadata: Any, *topics: str) -> spb.SendMessageResponse:
    return stub.SendMessage(spb.SendMessageRequest(messages=[_message(t) for t in topics]),
                            metadata=metadata, timeout=10)


def _stored(h: BrokerHarness, topic: str) -> int:
    """Messages in ``topic``'s queues once every acknowledged send is dispatched (queue
    entries are written after the answer)."""
    assert h.call(h.broker.wait_dispatched())
    return h.on_loop(lambda: sum(h.broker.store.get_max_offset_in_queue(topic, q) for q in (0, 1)))


def test_every_rpc_of_the_service_has_one_row_and_a_handler() -> None:
    names = [m.name for m in SERVICE.methods]
    assert sorted(RPC_NEEDS) == sorted(names)
    for name in names:
        assert inspect.iscoroutinefunction(getattr(GrpcEndpoint, name)) or \
            inspect.isasyncgenfunction(getattr(GrpcEndpoint, name)), name
        assert GrpcEndpoint.__dict__.get(name) is not None, f"{name} is not served by the endpoint"
    # docs/rocketmq5.md's access table names every call, and the audit codes it gives are right.
    doc = (Path(__file__).resolve().parents[2] / "docs" / "rocketmq5.md").read_text()
    section = doc[doc.index("## Access control"):]
    section = section[:section.index("\n## ")]
    table = section[section.index("| call | needs |"):]
    for name in names:
        assert name in table, f"docs/rocketmq5.md's access table lacks {name}"
    for name in ("QueryRoute", "Heartbeat", "SendMessage", "ReceiveMessage", "Telemetry"):
        assert f"{name} {audit_code(name)}" in " ".join(section.split()), name


def test_grpc_peer_strings_give_their_hosts() -> None:
    assert peer_host("ipv4:10.1.2.3:5555") == "10.1.2.3"
    assert peer_host("ipv6:[::1]:5555") == "::1"
    assert peer_host("unix:/tmp/s") == "unix:/tmp/s"


@pytest.mark.parametrize("metadata, why", [
    ((("x-mq-client-id", "c@1"),), "no credentials"),
    (signed(*ROOT, signature="00" * 20), "does not match"),  # forged: a made-up signature
    (signed(ROOT[0], "not-the-secret"), "does not match"),
    (signed("mallory", "whatever"), "no user mallory"),
    (signed("", "whatever"), "names no Credential"),  # what a client without credentials sends
    ((("x-mq-client-id", "c@1"), ("x-mq-date-time", DATE),
      ("authorization", "Basic cm9vdDpyb290")), "scheme must be MQv2-HMAC-SHA1"),
    (signed(*ROOT, signature="zz"), "not hex"),
    (signed(*ROOT)[:1] + signed(*ROOT)[2:], "x-mq-date-time"),  # the signed header left out
    (signed(*ROOT, date="2" * 65), "x-mq-date-time"),
], ids=["none", "forged", "wrong-secret", "unknown-user", "empty-credential", "other-scheme",
        "not-hex", "no-date", "long-date"])
def test_unauthenticated_calls_are_refused_before_anything_is_stored(
        harness: BrokerHarness, stub: Any, metadata: Any, why: str) -> None:
    before = _stored(harness, "AuthT")
    failures = sum(harness.broker.access.guard.audit.authentication_failures.values())
    r = _send(stub, metadata, "AuthT")
    assert r.status.code == pb.UNAUTHORIZED and why in r.status.message, r
    assert _stored(harness, "AuthT") == before
    assert sum(harness.broker.access.guard.audit.authentication_failures.values()) == failures + 1
    route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="AuthT")),
                            metadata=metadata, timeout=10)
    assert route.status.code == pb.UNAUTHORIZED and not route.message_queues
    unoffered = stub.GetOffset(spb.GetOffsetRequest(), metadata=metadata, timeout=10)
    assert unoffered.status.code == pb.UNAUTHORIZED


def test_the_right_signature_is_taken_whatever_its_date(harness: BrokerHarness, stub: Any) -> None:
    before = _stored(harness, "OtherT")
    for date in (DATE, "20991231T235959Z"):
        r = _send(stub, signed(*ROOT, date), "OtherT")
        assert r.status.code == pb.OK, r
    assert _stored(harness, "OtherT") == before + 2


def test_a_normal_user_may_do_what_its_rules_allow_only(harness: BrokerHarness, stub: Any) -> None:
    alice = signed(*ALICE)
    assert _send(stub, alice, "AuthT").status.code == pb.OK
    before = _stored(harness, "OtherT")
    for topics in (("OtherT",), ("AuthT", "OtherT")):
        r = _send(stub, alice, *topics)
        assert r.status.code == pb.FORBIDDEN and "no rule allows user alice" in r.status.message, r
    assert _stored(harness, "OtherT") == before
    # Any user reads a route; a consumer's calls need Sub on the topic and on the group.
    route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="OtherT")),
                            metadata=alice, timeout=10)
    assert route.status.code == pb.OK

    def receive(topic: str, group: str) -> list[spb.ReceiveMessageResponse]:
        req = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
            batch_size=1, invisible_duration=duration_pb2.Duration(seconds=10),
            long_polling_timeout=duration_pb2.Duration(seconds=0))
        return list(stub.ReceiveMessage(req, metadata=alice, timeout=10))

    assert receive("AuthT", "OtherG")[-1].status.code == pb.FORBIDDEN
    assert receive("OtherT", "AuthG")[-1].status.code == pb.FORBIDDEN
    got = receive("AuthT", "AuthG")
    assert got[-1].status.code == pb.OK and got[0].message.body == b"x"
    hb = stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER,
                                             group=pb.Resource(name="OtherG")), metadata=alice, timeout=10)
    assert hb.status.code == pb.FORBIDDEN
    assert "OtherG" not in harness.on_loop(lambda: dict(harness.broker.sub_groups.table))  # not created
    assert harness.broker.access.guard.audit.authorization_denials["no_rule"] >= 5


def _settings(group: str) -> spb.TelemetryCommand:
    return spb.TelemetryCommand(settings=pb.Settings(
        client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
            group=pb.Resource(name=group), subscriptions=[pb.SubscriptionEntry(
                topic=pb.Resource(name="AuthT"), expression=pb.FilterExpression(expression="*"))])))


def test_telemetry_is_refused_when_it_opens_and_settings_need_their_group(stub: Any) -> None:
    stream = stub.Telemetry(iter([_settings("AuthG")]), metadata=signed(ALICE[0], "wrong"), timeout=10)
    first = next(stream)
    assert first.status.code == pb.UNAUTHORIZED and "does not match" in first.status.message
    with pytest.raises(grpc.RpcError) as refused:
        next(stream)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    stream = stub.Telemetry(iter([_settings("OtherG"), _settings("AuthG")]), metadata=signed(*ALICE),
                            timeout=10)
    denied, allowed = next(stream), next(stream)
    stream.cancel()
    assert denied.status.code == pb.FORBIDDEN and not denied.HasField("settings")
    assert allowed.status.code == pb.OK and allowed.settings.subscription.receive_batch_size == 32
