"""Transactions by the batch, the pure parts: the headers of the OrbitMQ codes (ranges, names), the
SDK's request and answer codec, the check read back into a TransactionBatch, and the stored
codec's PREPAREDTRANSACTIONOFFSET setter."""

from __future__ import annotations

import pytest

from orbitmq.client.producer.send_codec import encode_message
from orbitmq.client.producer.transaction_batch import (
    build_send_batch_request,
    encode_batch_messages,
    parse_send_batch_response,
    prepare_transaction_batch,
    read_batch_check,
)
from orbitmq.client.producer.transaction_end import HalfMessageRef, end_request
from orbitmq.client.producer.transaction_state import LocalTransactionState
from orbitmq.client.results import SendStatus
from orbitmq.errors import BrokerError, ClientError, RemoteProtocolError
from orbitmq.protocol.batch import decode_batch
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import (
    ORBITMQ_CODE_MAX,
    ORBITMQ_CODE_MIN,
    OrbitMQRequestCode,
    RequestCode,
    ResponseCode,
    bad_request_code,
)
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.extension_headers import (
    TRAN_BATCH,
    TX_BATCH_MESSAGES_MAX,
    CheckTransactionBatchStateRequestHeader,
    EndTransactionBatchRequestHeader,
    SendTransactionBatchRequestHeader,
)
from orbitmq.protocol.message import Message
from orbitmq.protocol.stored import (
    decode_stored_message,
    encode_stored_message,
    encode_wire_batch,
    set_prepared_transaction_offset,
)

MQ = MessageQueue("Orders", "broker-a", 1)
SEND_FIELDS = {"producerGroup": "P", "topic": "T", "queueId": "-1", "bornTimestamp": "1",
               "count": "2"}
END_FIELDS = {"producerGroup": "P", "tranStateTableOffset": "0", "commitLogOffset": "0",
              "commitOrRollback": "8", "transactionId": "TX"}


def test_the_new_codes_are_in_orbitmqs_range_and_answer_invalid_parameter() -> None:
    for code in OrbitMQRequestCode:
        assert ORBITMQ_CODE_MIN <= code <= ORBITMQ_CODE_MAX
        assert code not in set(RequestCode)
        assert bad_request_code(code) is ResponseCode.INVALID_PARAMETER


@pytest.mark.parametrize(("cls", "fields", "words"), [
    (SendTransactionBatchRequestHeader, {**SEND_FIELDS, "count": "0"},
     r"SendTransactionBatchRequestHeader.count: 0 is out of range 1..65536"),
    (SendTransactionBatchRequestHeader, {**SEND_FIELDS, "count": str(TX_BATCH_MESSAGES_MAX + 1)},
     "count"),
    (SendTransactionBatchRequestHeader, {**SEND_FIELDS, "queueId": "2147483648"}, "queueId"),
    (SendTransactionBatchRequestHeader, {**SEND_FIELDS, "bornTimestamp": "-1"}, "bornTimestamp"),
    (SendTransactionBatchRequestHeader, {**SEND_FIELDS, "count": "many"}, "count"),
    (SendTransactionBatchRequestHeader, {k: v for k, v in SEND_FIELDS.items() if k != "topic"},
     "missing required field 'topic'"),
    (EndTransactionBatchRequestHeader, {**END_FIELDS, "commitOrRollback": "3"}, "commitOrRollback"),
    (EndTransactionBatchRequestHeader, {**END_FIELDS, "commitLogOffset": "-1"}, "commitLogOffset"),
    (EndTransactionBatchRequestHeader, {**END_FIELDS, "tranStateTableOffset": "1e40"},
     "tranStateTableOffset"),
    (EndTransactionBatchRequestHeader, {k: v for k, v in END_FIELDS.items() if k != "transactionId"},
     "transactionId"),
    (CheckTransactionBatchStateRequestHeader,
     {"tranStateTableOffset": "0", "commitLogOffset": "0", "transactionId": "T", "checkTimes": "-1"},
     "checkTimes"),
])
def test_out_of_range_batch_header_values_are_refused_naming_the_field(cls: type, fields: dict,
                                                                       words: str) -> None:
    with pytest.raises(RemoteProtocolError, match=words):
        cls.from_ext_fields(fields)


def _prepared(n: int = 3) -> tuple[list[Message], object]:
    messages = [Message("Orders", f"b{i}".encode(), tags="t", keys=[f"k{i}"]) for i in range(n)]
    topic, encoded = encode_batch_messages(messages, [f"ID{i}" for i in range(n)], 1 << 20)
    return messages, prepare_transaction_batch(topic, encoded, "TX1", {"order": "17"}, 1 << 20)


def test_a_batch_request_carries_its_messages_ids_and_own_properties() -> None:
    _, prepared = _prepared()
    cmd = build_send_batch_request(prepared, MQ, "P", born_timestamp_ms=5)
    assert cmd.code == OrbitMQRequestCode.SEND_TRANSACTION_BATCH
    header = SendTransactionBatchRequestHeader.from_ext_fields(cmd.ext_fields)
    assert (header.topic, header.queue_id, header.count, header.born_timestamp) == ("Orders", 1, 3, 5)
    assert header.properties == "order\x0117\x02UNIQ_KEY\x01TX1\x02"
    entries = decode_batch(cmd.body)
    assert [(e.body, e.properties["UNIQ_KEY"], e.properties["KEYS"]) for e in entries] == [
        (f"b{i}".encode(), f"ID{i}", f"k{i}") for i in range(3)]


def test_batch_answers_become_batch_receipts_and_refusals_errors() -> None:
    _, prepared = _prepared()
    ok = RemotingCommand(0, ext_fields={"msgId": "7F0000010000274E0000000000000010",
                                        "queueId": "1", "queueOffset": "9", "transactionId": "TX1"})
    sent = parse_send_batch_response(ok, prepared, MQ)
    assert (sent.local_state, sent.status, sent.batch_size, sent.queue_offset) == (
        LocalTransactionState.UNKNOWN, SendStatus.OK, 3, 9)
    ref = HalfMessageRef.of(sent)
    assert (ref.batch_size, ref.commit_log_offset, ref.transaction_id) == (3, 16, "TX1")
    end = end_request("P", LocalTransactionState.COMMIT, ref, oneway=False)
    assert end.code == OrbitMQRequestCode.END_TRANSACTION_BATCH
    parsed = EndTransactionBatchRequestHeader.from_ext_fields(end.ext_fields)
    assert (parsed.commit_or_rollback, parsed.tran_state_table_offset, parsed.commit_log_offset,
            parsed.transaction_id) == (8, 9, 16, "TX1")
    single = end_request("P", LocalTransactionState.ROLLBACK,
                         HalfMessageRef("b", "T", 16, 9, "M", "M", "h:1"))
    assert single.code == RequestCode.END_TRANSACTION
    with pytest.raises(BrokerError) as refused:
        parse_send_batch_response(RemotingCommand(13, remark="bad"), prepared, MQ)
    assert refused.value.code == 13 and not refused.value.retriable


@pytest.mark.parametrize(("messages", "props", "words"), [
    ([], {}, "at least one message"),
    ([Message("A", b"x"), Message("B", b"y")], {}, "one topic"),
    ([Message("A", b"x", delay_level=2)], {}, "delayed"),
    ([Message("A", b"x" * 600)], {}, "exceeds the maximum 512"),
    ([Message("A", b"x")], {"TRAN_BATCH": "9"}, "reserved"),
])
def test_bad_batches_are_refused_before_anything_is_sent(messages: list[Message], props: dict,
                                                         words: str) -> None:
    with pytest.raises(ClientError, match=words):
        topic, encoded = encode_batch_messages(messages, [f"I{i}" for i in range(len(messages))],
                                               512)
        prepare_transaction_batch(topic, encoded, "TX", props, 512)


def test_a_check_is_read_back_as_the_batch_its_listener_sees() -> None:
    _, prepared = _prepared()
    half = encode_stored_message(
        topic="Orders", body=prepared.body, queue_id=1, queue_offset=4, physical_offset=100,
        properties={"UNIQ_KEY": "TX1", "order": "17", "PGROUP": "P", TRAN_BATCH: "3",
                    "REAL_TOPIC": "Orders", "REAL_QID": "1", "TRANSACTION_CHECK_TIMES": "2",
                    "TRAN_MSG": "true"})
    fields = CheckTransactionBatchStateRequestHeader(4, 100, "TX1", check_times=2).to_ext_fields()
    header, batch, group = read_batch_check(RemotingCommand(
        OrbitMQRequestCode.CHECK_TRANSACTION_BATCH_STATE, ext_fields=fields, body=half))
    assert (header.commit_log_offset, group, batch.transaction_id, batch.topic) == (100, "P", "TX1",
                                                                                    "Orders")
    assert (batch.properties, batch.check_times, batch.msg_ids) == ({"order": "17"}, 2,
                                                                    ["ID0", "ID1", "ID2"])
    assert [m.body for m in batch.messages] == [b"b0", b"b1", b"b2"]
    with pytest.raises(RemoteProtocolError):
        read_batch_check(RemotingCommand(9103, ext_fields=fields, body=half[:-5]))


def test_committed_messages_name_the_half_message_they_come_from() -> None:
    _, prepared = _prepared()
    encoded = encode_wire_batch("Orders", 1, prepared.body, 8, 7, ("127.0.0.1", 5),
                                ("10.0.0.1", 10911), 0, 1 << 20, 1 << 22)
    assert encoded is not None
    set_prepared_transaction_offset(encoded, 123_456_789)
    for rel in encoded.rel_positions:
        msg = decode_stored_message(encoded.blob, rel)
        assert (msg.prepared_transaction_offset, msg.sys_flag & 12) == (123_456_789, 8)
    # IPv6 hosts move the field (a longer header); a position outside the blob is refused
    six = encode_wire_batch("Orders", 1, prepared.body, 8, 7, ("::1", 5), ("fe80::1", 10911), 0,
                            1 << 20, 1 << 22)
    assert six is not None
    set_prepared_transaction_offset(six, 42)
    assert {decode_stored_message(six.blob, rel).prepared_transaction_offset
            for rel in six.rel_positions} == {42}
    for outside in (-1, len(six.blob) - 20, len(six.blob)):
        six.rel_positions = [outside]
        with pytest.raises(ValueError, match="outside the blob"):
            set_prepared_transaction_offset(six, 1)
    one = encode_message(Message("Orders", b"x"), "ID")
    assert one[0] == "ID"
