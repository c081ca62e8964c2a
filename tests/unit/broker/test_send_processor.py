"""SendProcessor (SEND_MESSAGE_V2, SEND_BATCH_MESSAGE) called directly on a real broker: what
a send stores, where, and each refusal's code and remark (the store untouched)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from processor_support import RunningBroker, running_broker, send_request

from orbitmq.protocol.batch import encode_batch
from orbitmq.protocol.bodies import Perm, TopicConfig
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.message import MessageExt, MessageSysFlag, PropertyKey
from orbitmq.protocol.msgid import decode_offset_msg_id

MAX_BODY = 32 * 1024


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from running_broker(tmp_path_factory.mktemp("send"), auto_create_topic=False,
                              store={"max_message_size": MAX_BODY})


def _topic(broker: RunningBroker, name: str, queues: int = 4, perm: int = 6) -> None:
    broker.run(lambda: broker.controller.topics.update(TopicConfig(name, queues, queues, perm)))


def _stored(broker: RunningBroker, msg_id: str) -> MessageExt:
    _, _, offset = decode_offset_msg_id(msg_id)
    msg = broker.run(lambda: broker.controller.store.look_message_by_offset(offset))
    assert msg is not None
    return msg


def _commit_log_end(broker: RunningBroker) -> int:
    return broker.run(broker.controller.store.max_physical_offset)


def test_a_send_is_stored_with_its_properties_and_the_queue_offset_advances(
        broker: RunningBroker) -> None:
    _topic(broker, "SendStored")
    send = broker.processors.send.send_message
    first = broker.answer(send, send_request("SendStored", b"hello", queue_id=2,
                                             properties={"KEYS": "k1 k2", "TAGS": "tagA",
                                                         "UNIQ_KEY": "U-1", "user": "v"}))
    second = broker.answer(send, send_request("SendStored", b"again", queue_id=2))
    assert first.code == ResponseCode.SUCCESS, first.remark
    assert second.code == ResponseCode.SUCCESS, second.remark
    assert (first.ext_fields["queueId"], first.ext_fields["queueOffset"]) == ("2", "0")
    assert (second.ext_fields["queueId"], second.ext_fields["queueOffset"]) == ("2", "1")

    msg = _stored(broker, first.ext_fields["msgId"])
    assert (msg.topic, msg.queue_id, msg.queue_offset, bytes(msg.body)) == ("SendStored", 2, 0,
                                                                          b"hello")
    assert msg.properties[PropertyKey.KEYS] == "k1 k2"
    assert msg.properties[PropertyKey.TAGS] == "tagA"
    assert msg.properties[PropertyKey.UNIQ_KEY] == "U-1"
    assert msg.properties["user"] == "v"
    # The born host is the peer's address; the store host the broker's.
    assert msg.born_host == ("127.0.0.1", int(broker.peer.peer.rpartition(":")[2]))
    assert msg.store_host == broker.controller.store_host
    broker.settle()
    assert broker.run(lambda: broker.controller.store.get_max_offset_in_queue("SendStored", 2)) == 2


def test_a_queue_id_outside_the_write_queues_is_replaced_by_one_inside(broker: RunningBroker) -> None:
    _topic(broker, "SendQueuePick", queues=2)
    resp = broker.answer(broker.processors.send.send_message,
                         send_request("SendQueuePick", queue_id=7))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert resp.ext_fields["queueId"] in ("0", "1")
    assert _stored(broker, resp.ext_fields["msgId"]).queue_id == int(resp.ext_fields["queueId"])


@pytest.mark.parametrize("topic", ["TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
                                   "rmq_sys_wheel_timer"])
def test_topics_only_the_broker_writes_are_refused_no_permission(broker: RunningBroker,
                                                                 topic: str) -> None:
    end = _commit_log_end(broker)
    resp = broker.answer(broker.processors.send.send_message, send_request(topic))
    assert resp.code == ResponseCode.NO_PERMISSION
    assert resp.remark == f"sending message to topic[{topic}] is forbidden"
    assert _commit_log_end(broker) == end


def test_a_body_over_the_size_limit_is_refused_and_one_at_the_limit_stored(
        broker: RunningBroker) -> None:
    _topic(broker, "SendBig")
    end = _commit_log_end(broker)
    send = broker.processors.send.send_message
    refused = broker.answer(send, send_request("SendBig", b"x" * (MAX_BODY + 1)))
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL
    assert refused.remark == f"message body size {MAX_BODY + 1} exceeds the limit {MAX_BODY}"
    assert _commit_log_end(broker) == end
    stored = broker.answer(send, send_request("SendBig", b"x" * MAX_BODY))
    assert stored.code == ResponseCode.SUCCESS, stored.remark


def test_an_unknown_topic_without_auto_creation_is_refused_topic_not_exist(
        broker: RunningBroker) -> None:
    resp = broker.answer(broker.processors.send.send_message, send_request("SendNowhere"))
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    assert resp.remark == "topic[SendNowhere] not exist, apply first please!"
    assert broker.run(lambda: broker.controller.topics.get("SendNowhere")) is None


def test_an_unknown_topic_with_an_illegal_name_is_refused_message_illegal(
        broker: RunningBroker) -> None:
    resp = broker.answer(broker.processors.send.send_message, send_request("bad topic!"))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    assert resp.remark is not None and "illegal" in resp.remark.lower()


def test_a_topic_without_write_permission_is_refused(broker: RunningBroker) -> None:
    _topic(broker, "SendReadOnly", perm=int(Perm.READ))
    resp = broker.answer(broker.processors.send.send_message, send_request("SendReadOnly"))
    assert resp.code == ResponseCode.NO_PERMISSION
    assert resp.remark == "the topic[SendReadOnly] sending message is forbidden"


def test_a_batch_is_one_write_with_consecutive_queue_offsets(broker: RunningBroker) -> None:
    _topic(broker, "SendBatch", queues=1)
    body = encode_batch([(0, b"m0", {"KEYS": "b0"}), (0, b"m1", {}), (0, b"m2", {"TAGS": "t"})])
    resp = broker.answer(broker.processors.send.send_batch_message,
                         send_request("SendBatch", body, batch=True))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    ids = resp.ext_fields["msgId"].split(",")
    assert len(ids) == 3 and resp.ext_fields["queueOffset"] == "0"
    msgs = [_stored(broker, i) for i in ids]
    assert [bytes(m.body) for m in msgs] == [b"m0", b"m1", b"m2"]
    assert [m.queue_offset for m in msgs] == [0, 1, 2]
    assert msgs[0].properties[PropertyKey.KEYS] == "b0"
    assert msgs[2].properties[PropertyKey.TAGS] == "t"


def test_a_batch_holding_a_delayed_message_is_refused(broker: RunningBroker) -> None:
    _topic(broker, "SendBatchDelay", queues=1)
    end = _commit_log_end(broker)
    body = encode_batch([(0, b"m0", {}), (0, b"m1", {"DELAY": "2"})])
    resp = broker.answer(broker.processors.send.send_batch_message,
                         send_request("SendBatchDelay", body, batch=True))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    assert resp.remark == "a batch may not hold delayed, timer or transaction messages"
    assert _commit_log_end(broker) == end


def test_a_malformed_batch_body_is_refused_message_illegal(broker: RunningBroker) -> None:
    _topic(broker, "SendBatchBad", queues=1)
    end = _commit_log_end(broker)
    resp = broker.answer(broker.processors.send.send_batch_message,
                         send_request("SendBatchBad", b"\x00\x00\x00\x40not a batch", batch=True))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    assert resp.remark
    assert _commit_log_end(broker) == end


def test_a_delayed_message_is_parked_in_the_schedule_topic(broker: RunningBroker) -> None:
    _topic(broker, "SendDelayed", queues=2)
    resp = broker.answer(broker.processors.send.send_message,
                         send_request("SendDelayed", b"later", queue_id=1,
                                      properties={"DELAY": "3"}))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    msg = _stored(broker, resp.ext_fields["msgId"])
    assert (msg.topic, msg.queue_id) == ("SCHEDULE_TOPIC_XXXX", 2)  # level 3's queue
    assert msg.properties[PropertyKey.REAL_TOPIC] == "SendDelayed"
    assert msg.properties[PropertyKey.REAL_QID] == "1"
    assert msg.properties[PropertyKey.DELAY] == "3"


def _with_properties_of(size: int) -> RemotingCommand:
    overhead = len(send_request("SendProps", properties={"big": ""}).ext_fields["i"])
    cmd = send_request("SendProps", properties={"big": "x" * (size - overhead)})
    assert len(cmd.ext_fields["i"]) == size
    return cmd


def test_properties_must_leave_room_in_the_stored_length_field(broker: RunningBroker) -> None:
    # 32767 (the stored i16 length) is refused: the stored form may add a separator byte.
    _topic(broker, "SendProps")
    send = broker.processors.send.send_message
    refused = broker.answer(send, _with_properties_of(32767))
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL
    assert refused.remark == "message properties size 32767 exceeds the limit 32767"
    stored = broker.answer(send, _with_properties_of(32766))
    assert stored.code == ResponseCode.SUCCESS, stored.remark
    assert len(_stored(broker, stored.ext_fields["msgId"]).properties["big"]) > 32_700


def test_a_transactional_send_is_stored_as_a_half_message(broker: RunningBroker) -> None:
    _topic(broker, "SendTx")
    resp = broker.answer(broker.processors.send.send_message, send_request(
        "SendTx", b"tx", properties={"UNIQ_KEY": "TX-1", "TRAN_MSG": "true", "PGROUP": "PG"},
        sys_flag=int(MessageSysFlag.TRANSACTION_PREPARED_TYPE)))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert resp.ext_fields["transactionId"] == "TX-1"
    half = _stored(broker, resp.ext_fields["msgId"])
    assert half.topic == "RMQ_SYS_TRANS_HALF_TOPIC"
    assert half.properties[PropertyKey.REAL_TOPIC] == "SendTx"
    assert bytes(half.body) == b"tx"
    broker.settle()
    assert broker.run(lambda: broker.controller.store.get_max_offset_in_queue("SendTx", 0)) == 0
