"""Verdicts outside RocketMQ's set, sent whole to a real broker: every request that carries one
(END_TRANSACTION from a producer and as a check's answer, END_TRANSACTION_BATCH, gRPC
EndTransaction) is refused with a specific code and a remark naming the field, before anything
is looked up, and the half message it named stays pending (a valid verdict then ends it).

Issue 36: END_TRANSACTION with commitOrRollback 4 (inside the transaction bits, not a verdict)
reached the handler and came back as an internal error.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from test_broker_support import BrokerHarness, broker_config
from wire_fuzz_support import RawClient, Request

from orbitmq.assembly import grpc_endpoint
from orbitmq.grpc._generated import definition_pb2 as pb
from orbitmq.grpc._generated import service_pb2 as spb
from orbitmq.grpc._generated import service_pb2_grpc as spb_grpc
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.codes import OrbitMQRequestCode, RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.extension_headers import EndTransactionBatchRequestHeader
from orbitmq.protocol.headers import EndTransactionRequestHeader
from orbitmq.protocol.message import PropertyKey
from orbitmq.protocol.msgid import decode_offset_msg_id

META = (("x-mq-client-id", "verdict-test@1"),)
BAD_VERDICTS = [4, 1, 9, 13, 16, -8, 2**31]
ANSWER_WAIT_S = 10.0
REMARK = "commitOrRollback: {} is not a transaction verdict: 0 (unknown), 8 (commit) or 12 (rollback)"


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHarness]:
    h = BrokerHarness(broker_config(tmp_path_factory.mktemp("verdicts") / "store"))
    try:
        yield h
    finally:
        h.close()


def _half(h: BrokerHarness, topic: str) -> tuple[int, int, str]:
    """A half message of group ``tx-verdicts``: (commit log offset, half queue offset, msg id)."""
    sent = h.send_ok(topic, b"half", props={PropertyKey.TRAN_MSG: "true",
                                            PropertyKey.PGROUP: "tx-verdicts"})
    msg_id = sent.ext_fields["msgId"]
    return decode_offset_msg_id(msg_id)[2], int(sent.ext_fields["queueOffset"]), msg_id


def _raw(h: BrokerHarness, code: int, fields: dict[str, Any], binary: bool) -> RemotingCommand:
    """One request with hand-made extFields (JSON numbers too), JSON or binary header."""

    async def go() -> RemotingCommand | None:
        client = await RawClient().connect(h.addr)
        try:
            return await client.request(Request("broker", code, fields), ANSWER_WAIT_S,
                                        binary=binary)
        finally:
            await client.close()

    resp = h.call(go())
    assert resp is not None, f"no answer to {code}"
    return resp


def _requests(half: tuple[int, int, str]) -> list[tuple[str, int, dict[str, str]]]:
    offset, queue_offset, msg_id = half
    single = EndTransactionRequestHeader("tx-verdicts", queue_offset, offset, 8, msg_id,
                                         False, msg_id).to_ext_fields()
    check = EndTransactionRequestHeader("tx-verdicts", queue_offset, offset, 8, msg_id,
                                        True, msg_id).to_ext_fields()
    batch = EndTransactionBatchRequestHeader("tx-verdicts", queue_offset, offset, 8,
                                             msg_id).to_ext_fields()
    return [("EndTransactionRequestHeader", RequestCode.END_TRANSACTION, single),
            ("EndTransactionRequestHeader", RequestCode.END_TRANSACTION, check),
            ("EndTransactionBatchRequestHeader", OrbitMQRequestCode.END_TRANSACTION_BATCH, batch)]


@pytest.mark.parametrize("binary", [False, True], ids=["json-header", "binary-header"])
def test_remoting_verdicts_outside_the_set_are_refused_and_end_nothing(harness: BrokerHarness,
                                                                      binary: bool) -> None:
    topic = f"TxVerdicts{int(binary)}"
    harness.on_loop(lambda: harness.broker.topics.update(TopicConfig(topic, 1, 1)))
    half = _half(harness, topic)
    for header, code, fields in _requests(half):
        for value in BAD_VERDICTS:
            for raw in (str(value), value):
                resp = _raw(harness, code, {**fields, "commitOrRollback": raw}, binary)
                assert resp.code == ResponseCode.INVALID_PARAMETER, (code, raw, resp.remark)
                assert f"{header}.{REMARK.format(value)}" in resp.remark, resp.remark
    # Nothing was settled: the half message is still pending and a commit ends it.
    _header, code, fields = _requests(half)[0]
    committed = _raw(harness, code, fields, binary)
    assert (committed.code, committed.remark) == (ResponseCode.SUCCESS, None)
    again = _raw(harness, code, {**fields, "commitOrRollback": "12"}, binary)
    assert again.code == ResponseCode.TRANSACTION_FAILED  # committed before, by the valid one


# -- gRPC -------------------------------------------------------------------------------------
@pytest.fixture
def stub(harness: BrokerHarness) -> Iterator[Any]:
    assert grpc_endpoint(harness.broker) is not None
    with grpc.insecure_channel(f"127.0.0.1:{grpc_endpoint(harness.broker).port}") as channel:
        yield spb_grpc.MessagingServiceStub(channel)


def test_grpc_resolutions_and_sources_outside_the_enum_are_refused(harness: BrokerHarness,
                                                                  stub: Any) -> None:
    topic = "TxVerdictsGrpc"
    harness.on_loop(lambda: harness.broker.topics.update(
        TopicConfig(topic, 2, 2, attributes={"message.type": "TRANSACTION"})))
    sp = pb.SystemProperties(message_id="01VERDICT", message_type=pb.TRANSACTION)
    sent = stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
        topic=pb.Resource(name=topic), system_properties=sp, body=b"half")]), metadata=META,
        timeout=10)
    assert sent.status.code == pb.OK, sent.status
    tx_id = sent.entries[0].transaction_id

    def end(resolution: int, source: int = pb.SOURCE_CLIENT) -> spb.EndTransactionResponse:
        return stub.EndTransaction(spb.EndTransactionRequest(
            topic=pb.Resource(name=topic), message_id="01VERDICT", transaction_id=tx_id,
            resolution=resolution, source=source), metadata=META, timeout=10)

    for resolution in (pb.TRANSACTION_RESOLUTION_UNSPECIFIED, 3, 8, 12, -1, 2**31 - 1):
        answer = end(resolution)
        assert answer.status.code == pb.BAD_REQUEST, (resolution, answer.status)
        assert answer.status.message == (f"EndTransactionRequest.resolution: {resolution} is not "
                                         "COMMIT (1) or ROLLBACK (2)")
    for source in (3, -1, 99):
        answer = end(pb.COMMIT, source)
        assert answer.status.code == pb.BAD_REQUEST, (source, answer.status)
        assert answer.status.message.startswith(f"EndTransactionRequest.source: {source} is not")
    assert end(pb.COMMIT, pb.SOURCE_SERVER_CHECK).status.code == pb.OK  # still pending till now
    assert end(pb.ROLLBACK).status.code == pb.INVALID_TRANSACTION_ID  # ended before

