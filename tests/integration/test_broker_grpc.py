"""The gRPC endpoint at the wire: refusals with the API's codes, range checks, types, routes.

A real broker on a free gRPC port, called with grpcio and the generated stubs (what the official
clients send, including what they would refuse to send themselves).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from test_broker_support import BrokerHarness, broker_config

from orbitmq.assembly import grpc_endpoint
from orbitmq.broker.runtime_config import apply_live
from orbitmq.config import BrokerRole
from orbitmq.grpc._generated import definition_pb2 as pb
from orbitmq.grpc._generated import service_pb2 as spb
from orbitmq.grpc._generated import service_pb2_grpc as spb_grpc
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.codes import ResponseCode

META = (("x-mq-client-id", "test-client@1"),)


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[BrokerHarness]:
    h = BrokerHarness(broker_config(tmp_path / "store", pop_inflight_max=16))
    try:
        yield h
    finally:
        h.close()


@pytest.fixture
def stub(harness: BrokerHarness) -> Iterator[Any]:
    assert grpc_endpoint(harness.broker) is not None
    with grpc.insecure_channel(f"127.0.0.1:{grpc_endpoint(harness.broker).port}") as channel:
        yield spb_grpc.MessagingServiceStub(channel)


def _topic(h: BrokerHarness, name: str, kind: str | None = None) -> str:
    attrs = {"message.type": kind} if kind else None
    h.on_loop(lambda: h.broker.topics.update(TopicConfig(name, 2, 2, attributes=attrs)))
    return name


def _message(topic: str, body: bytes = b"x", mid: str = "01AB", **sys: Any) -> pb.Message:
    sp = pb.SystemProperties(message_id=mid, message_type=sys.pop("message_type", pb.NORMAL), **sys)
    return pb.Message(topic=pb.Resource(name=topic), system_properties=sp, body=body)


def _send(stub: Any, msg: pb.Message) -> spb.SendMessageResponse:
    return stub.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=META, timeout=10)


def test_route_names_the_grpc_endpoint_and_the_topic_types(harness: BrokerHarness, stub: Any) -> None:
    topic = _topic(harness, "RouteT", "FIFO")
    r = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=META, timeout=10)
    assert r.status.code == pb.OK and len(r.message_queues) == 2
    q = r.message_queues[0]
    assert q.broker.endpoints.addresses[0].port == grpc_endpoint(harness.broker).port
    assert list(q.accept_message_types) == [pb.FIFO] and q.permission == pb.READ_WRITE
    missing = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic")),
                              metadata=META, timeout=10)
    assert missing.status.code == pb.TOPIC_NOT_FOUND


def test_calls_without_a_client_id_are_refused(stub: Any) -> None:
    r = stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PRODUCER), timeout=10)
    assert r.status.code == pb.CLIENT_ID_REQUIRED


@pytest.mark.parametrize("msg, code", [
    (_message("Bad Topic!"), pb.ILLEGAL_TOPIC),
    (_message("SendT", body=b""), pb.MESSAGE_BODY_EMPTY),
    (_message("SendT", mid=""), pb.ILLEGAL_MESSAGE_ID),
    (_message("SendT", tag="a|b"), pb.ILLEGAL_MESSAGE_TAG),
    (_message("SendT", keys=["with space"]), pb.ILLEGAL_MESSAGE_KEY),
    (_message("SendT", message_type=pb.FIFO), pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (_message("SendT", message_type=pb.FIFO, message_group="g"), pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (_message("SendT", message_type=pb.DELAY,
              delivery_timestamp=timestamp_pb2.Timestamp(seconds=int(time.time()) + 400 * 86_400)),
     pb.ILLEGAL_DELIVERY_TIME),
    (_message("NoSuchTopic"), pb.TOPIC_NOT_FOUND),
])
def test_sends_are_checked_with_the_apis_codes(harness: BrokerHarness, stub: Any, msg: pb.Message,
                                               code: int) -> None:
    # A MIXED topic takes every type: the delivery time itself is what is refused there.
    _topic(harness, "SendT", "MIXED" if code == pb.ILLEGAL_DELIVERY_TIME else None)
    r = _send(stub, msg)
    assert r.status.code == code, r
    assert r.status.message and "Traceback" not in r.status.message


def test_user_properties_that_name_system_ones_are_refused(harness: BrokerHarness, stub: Any) -> None:
    _topic(harness, "PropT")
    msg = _message("PropT")
    msg.user_properties["UNIQ_KEY"] = "forged"
    assert _send(stub, msg).status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY


def _receive(stub: Any, topic: str, group: str, **kw: Any) -> list[spb.ReceiveMessageResponse]:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        batch_size=kw.pop("batch_size", 32), **kw)
    return list(stub.ReceiveMessage(req, metadata=META, timeout=20))


def test_receive_values_are_range_checked(harness: BrokerHarness, stub: Any) -> None:
    topic = _topic(harness, "RecvT")
    cases = [
        ({"batch_size": 0, "invisible_duration": duration_pb2.Duration(seconds=10)}, pb.BAD_REQUEST),
        ({"invisible_duration": duration_pb2.Duration(seconds=0)}, pb.ILLEGAL_INVISIBLE_TIME),
        ({}, pb.ILLEGAL_INVISIBLE_TIME),  # no time and no auto renewal
        ({"invisible_duration": duration_pb2.Duration(seconds=10),
          "long_polling_timeout": duration_pb2.Duration(seconds=3600)}, pb.ILLEGAL_POLLING_TIME),
        ({"invisible_duration": duration_pb2.Duration(seconds=10),
          "filter_expression": pb.FilterExpression(type=pb.SQL, expression="a >")},
         pb.ILLEGAL_FILTER_EXPRESSION),
    ]
    for kw, code in cases:
        [answer] = _receive(stub, topic, "RecvG", **kw)
        assert answer.status.code == code, (kw, answer)


def test_receive_ack_and_stale_handles(harness: BrokerHarness, stub: Any) -> None:
    topic = _topic(harness, "AckT")
    sent = _send(stub, _message(topic, b"hello", mid="01CAFE"))
    assert sent.status.code == pb.OK and sent.entries[0].message_id == "01CAFE"
    got = _receive(stub, topic, "AckG", invisible_duration=duration_pb2.Duration(seconds=30),
                   long_polling_timeout=duration_pb2.Duration(seconds=5))
    assert got[-1].status.code == pb.OK
    [msg] = [r.message for r in got if r.HasField("message")]
    assert msg.body == b"hello" and msg.system_properties.delivery_attempt == 1
    handle = msg.system_properties.receipt_handle
    changed = stub.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="AckG"), topic=pb.Resource(name=topic), receipt_handle=handle,
        invisible_duration=duration_pb2.Duration(seconds=30)), metadata=META, timeout=10)
    assert changed.status.code == pb.OK and changed.receipt_handle != handle

    def ack(h: str) -> spb.AckMessageResponse:
        return stub.AckMessage(spb.AckMessageRequest(
            group=pb.Resource(name="AckG"), topic=pb.Resource(name=topic),
            entries=[spb.AckMessageEntry(message_id="01CAFE", receipt_handle=h)]), metadata=META, timeout=10)

    assert ack(handle).status.code == pb.INVALID_RECEIPT_HANDLE
    assert ack("garbage").status.code == pb.BAD_REQUEST
    assert ack(changed.receipt_handle).status.code == pb.OK
    assert ack(changed.receipt_handle).status.code == pb.INVALID_RECEIPT_HANDLE  # acked once
    assert harness.broker.pop.state.inflight_count == 0


def test_in_flight_messages_are_bounded(harness: BrokerHarness, stub: Any) -> None:
    topic = _topic(harness, "BoundT")
    for i in range(20):
        assert _send(stub, _message(topic, f"b{i}".encode(), mid=f"01{i:04d}")).status.code == pb.OK
    harness.wait_dispatched()
    first = _receive(stub, topic, "BoundG", invisible_duration=duration_pb2.Duration(seconds=60),
                     long_polling_timeout=duration_pb2.Duration(seconds=1))
    assert len([r for r in first if r.HasField("message")]) == 16  # pop_inflight_max
    more = _receive(stub, topic, "BoundG", invisible_duration=duration_pb2.Duration(seconds=60),
                    long_polling_timeout=duration_pb2.Duration(seconds=1))
    assert more[-1].status.code == pb.MESSAGE_NOT_FOUND


def test_telemetry_answers_settings_with_the_groups_policy(harness: BrokerHarness, stub: Any) -> None:
    settings = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
        group=pb.Resource(name="TeleG"), long_polling_timeout=duration_pb2.Duration(seconds=20)))
    stream = stub.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=META, timeout=10)
    answer = next(stream)
    stream.cancel()
    assert answer.status.code == pb.OK
    assert answer.settings.backoff_policy.max_attempts == 17  # retry_max_times + 1
    assert answer.settings.subscription.receive_batch_size == 32
    assert not answer.settings.subscription.fifo


def test_unoffered_calls_say_so(stub: Any) -> None:
    r = stub.GetOffset(spb.GetOffsetRequest(group=pb.Resource(name="G"), message_queue=pb.MessageQueue(
        topic=pb.Resource(name="T"))), metadata=META, timeout=10)
    assert r.status.code == pb.NOT_IMPLEMENTED and "not offered" in r.status.message


def test_recall_is_refused_as_rocketmq_refuses_it(harness: BrokerHarness, stub: Any) -> None:
    topic = _topic(harness, "RecallGT", "DELAY")
    due = timestamp_pb2.Timestamp()
    due.FromMilliseconds(int(time.time() * 1000) + 60_000)
    sent = _send(stub, _message(topic, mid="0A0B0C", message_type=pb.DELAY, delivery_timestamp=due))
    assert sent.status.code == pb.OK
    handle = sent.entries[0].recall_handle
    assert handle  # a timer message's send answers one

    def recall(name: str, text: str) -> spb.RecallMessageResponse:
        return stub.RecallMessage(spb.RecallMessageRequest(topic=pb.Resource(name=name),
                                                           recall_handle=text),
                                  metadata=META, timeout=10)
    # recall_message_enable is off (RocketMQ's default): NO_PERMISSION's remark, which the
    # proxy answers as INTERNAL_SERVER_ERROR.
    r = recall(topic, handle)
    assert (r.status.code, r.status.message) == (pb.INTERNAL_SERVER_ERROR,
                                                 "recall failed, operation is forbidden")
    live = harness.broker.config
    apply_live(live, dataclasses.replace(live, recall_message_enable=True))  # a runtime setting
    try:
        assert recall("NoSuchRecallT", handle).status.code == pb.TOPIC_NOT_FOUND
        bad = recall(topic, "!!")
        assert (bad.status.code, bad.status.message) == (pb.INTERNAL_SERVER_ERROR,
                                                         "recall handle is invalid")
        ok = recall(topic, handle)
        assert (ok.status.code, ok.message_id) == (pb.OK, "0A0B0C")
    finally:
        apply_live(live, dataclasses.replace(live, recall_message_enable=False))


def test_a_group_5x_clients_receive_for_refuses_4x_pulls(harness: BrokerHarness, stub: Any) -> None:
    topic = _topic(harness, "ModelT")
    _receive(stub, topic, "ModelG", invisible_duration=duration_pb2.Duration(seconds=10),
             long_polling_timeout=duration_pb2.Duration(seconds=0))
    r, _ = harness.pull(topic, 0, 0, group="ModelG")
    assert r.code == ResponseCode.NO_PERMISSION and "one model at a time" in r.remark
    r, _ = harness.pull(topic, 0, 0, group="OtherG")
    assert r.code != ResponseCode.NO_PERMISSION


def test_print_stack_and_verify_commands_get_the_clients_answers(harness: BrokerHarness,
                                                                 stub: Any) -> None:
    requests: queue.Queue[spb.TelemetryCommand | None] = queue.Queue()

    def outgoing() -> Iterator[spb.TelemetryCommand]:
        while (item := requests.get()) is not None:
            yield item

    responses = stub.Telemetry(outgoing(), metadata=META, timeout=30)
    requests.put(spb.TelemetryCommand(settings=pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="StackT")]))))
    assert next(responses).settings.publishing.max_body_size > 0
    endpoint = grpc_endpoint(harness.broker)
    answers: list[Any] = []
    asker = threading.Thread(target=lambda: answers.append(
        harness.call(endpoint.print_stack("test-client@1"))))
    asker.start()
    command = next(responses)
    nonce = command.print_thread_stack_trace_command.nonce
    requests.put(spb.TelemetryCommand(thread_stack_trace=spb.ThreadStackTrace(
        nonce=nonce, thread_stack_trace="main: waiting")))
    asker.join(15)
    assert answers == ["main: waiting"]
    verifier = threading.Thread(target=lambda: answers.append(
        harness.call(endpoint.verify("test-client@1", _message("StackT")))))
    verifier.start()
    command = next(responses)
    assert command.verify_message_command.message.topic.name == "StackT"
    requests.put(spb.TelemetryCommand(verify_message_result=spb.VerifyMessageResult(
        nonce=command.verify_message_command.nonce)))
    verifier.join(15)
    assert len(answers) == 2
    requests.put(None)
    responses.cancel()


def test_forward_to_dead_letter_queue_stores_the_message_and_acks_it(harness: BrokerHarness,
                                                                     stub: Any) -> None:
    topic = _topic(harness, "FwdT")
    assert _send(stub, _message(topic, b"bad", mid="01BAD")).status.code == pb.OK
    got = _receive(stub, topic, "FwdG", invisible_duration=duration_pb2.Duration(seconds=30),
                   long_polling_timeout=duration_pb2.Duration(seconds=5))
    [msg] = [r.message for r in got if r.HasField("message")]
    request = spb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name="FwdG"), topic=pb.Resource(name=topic),
        receipt_handle=msg.system_properties.receipt_handle, message_id="01BAD",
        delivery_attempt=1, max_delivery_attempts=1)
    assert stub.ForwardMessageToDeadLetterQueue(request, metadata=META, timeout=10).status.code == pb.OK
    [dead] = harness.pull_all("%DLQ%FwdG", 0)
    assert bytes(dead.body) == b"bad" and dead.properties["RETRY_TOPIC"] == topic
    again = stub.ForwardMessageToDeadLetterQueue(request, metadata=META, timeout=10)
    assert again.status.code == pb.INVALID_RECEIPT_HANDLE  # it was acked


def test_a_slave_refuses_5x_sends_and_receives(tmp_path: Path) -> None:
    """A slave stores only its master's log: a 5.x send or receive there is refused (FORBIDDEN)
    rather than written beside the replica or handed out from state a promotion would drop."""
    h = BrokerHarness(broker_config(tmp_path / "slave", broker_role=BrokerRole.SLAVE, broker_id=1,
                                    ha_master_address="127.0.0.1:1"))
    try:
        topic = _topic(h, "OnSlave")
        assert grpc_endpoint(h.broker) is not None
        with grpc.insecure_channel(f"127.0.0.1:{grpc_endpoint(h.broker).port}") as channel:
            stub = spb_grpc.MessagingServiceStub(channel)
            sent = _send(stub, _message(topic))
            assert sent.status.code == pb.FORBIDDEN and "slave" in sent.status.message, sent
            [answer] = _receive(stub, topic, "SlaveGroup", auto_renew=True)
            assert answer.status.code == pb.FORBIDDEN and "slave" in answer.status.message, answer
    finally:
        h.close()
