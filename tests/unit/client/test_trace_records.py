"""A traced send's Pub record, written on the send's hot path straight as text, is exactly what
TraceDataEncoder writes for the same send (tags and keys "null" when absent); a full buffer drops
and counts; batches carry each traced id and key once."""

from __future__ import annotations

import asyncio
import time

from orbitmq.client.results import SendResult, SendStatus
from orbitmq.client.trace.dispatcher import KEYS_CHARS_MAX, TraceConfig, TraceDispatcher
from orbitmq.client.trace.records import pub_records
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.message import Message
from orbitmq.protocol.trace_codec import (
    TraceMessageType,
    TraceRecord,
    TraceType,
    decode_trace_data,
    encode_record,
)

MSG_ID = "7F00000100002A9F0000000000000001"
OFFSET_ID = "7F00000100002A9F00000000000012AB"


def _dispatcher(**bounds: int) -> TraceDispatcher:
    def no_sender(*_: object) -> object:
        raise AssertionError("not started in these tests")

    return TraceDispatcher("g", "PRODUCER", no_sender, config=TraceConfig(**bounds))  # type: ignore[arg-type]


def _result(status: SendStatus = SendStatus.OK) -> SendResult:
    return SendResult(status, MSG_ID, OFFSET_ID, MessageQueue("Orders", "broker-a", 1), 5)


def test_the_hot_path_text_is_the_encoders() -> None:
    d = _dispatcher()
    for msg, status, kind in [
        (Message("Orders", b"0123456789", tags="created", keys=["k1", "k2"]), SendStatus.OK,
         TraceMessageType.NORMAL),
        (Message("Orders", b"x"), SendStatus.FLUSH_DISK_TIMEOUT, TraceMessageType.NORMAL),
        (Message("Orders", b"x", delay_level=3), SendStatus.OK, TraceMessageType.DELAY),
    ]:
        started = time.time()
        pub_records(d, "producers", [msg], [_result(status)], "127.0.0.1:10911", started)
        text, msg_id, keys = d._buffer.pop()
        [record] = decode_trace_data(text)
        assert text == encode_record(record)
        assert record == TraceRecord(
            TraceType.PUB, timestamp_ms=int(started * 1000), region_id="DefaultRegion",
            group="producers", topic="Orders", msg_id=MSG_ID, tags=msg.tags,
            keys=" ".join(msg.keys) if msg.keys else None, store_host="127.0.0.1:10911",
            body_length=len(msg.body), cost_time_ms=record.cost_time_ms, msg_type=kind,
            offset_msg_id=OFFSET_ID, success=status is SendStatus.OK)
        assert (msg_id, keys) == (MSG_ID, record.keys)


def test_a_message_marked_trace_off_is_not_traced() -> None:
    d = _dispatcher()
    msg = Message.with_system_properties("Orders", b"x", properties={"TRACE_ON": "false"})
    pub_records(d, "p", [msg], [_result()], "h:1", time.time())
    assert not d._buffer and d.stats.appended == 0


def test_a_full_buffer_drops_and_counts() -> None:
    d = _dispatcher(buffer_max=3)
    record = TraceRecord(TraceType.PUB, msg_id=MSG_ID)
    assert [d.append(record) for _ in range(5)] == [True, True, True, False, False]
    assert (d.stats.appended, d.stats.dropped) == (3, 2)


def test_a_batch_takes_each_key_once_and_stops_at_its_bounds() -> None:
    async def run() -> None:
        d = _dispatcher(batch_records_max=3)
        for i in range(4):
            d.append(TraceRecord(TraceType.PUB, msg_id=f"ID{i % 2}", keys="a b"))
        body, count, keys = d._take()
        assert count == 3 and keys == ["ID0", "a", "b", "ID1"]
        assert len(decode_trace_data(body)) == 3 and len(d._buffer) == 1
        big = "k" * (KEYS_CHARS_MAX // 2)
        d2 = _dispatcher()
        for i in range(3):
            d2.append(TraceRecord(TraceType.PUB, msg_id=f"ID{i}", keys=big))
        assert d2._take()[1] == 1  # a second record would pass the keys' bound

    asyncio.run(run())


def test_trace_options_are_checked() -> None:
    import pytest

    from orbitmq.client import AsyncProducer, AsyncPushConsumer
    from orbitmq.errors import ClientError

    with pytest.raises(ClientError, match="customized|topic"):
        AsyncProducer("p", "127.0.0.1:9876", enable_msg_trace=True,
                      customized_trace_topic="bad name")
    with pytest.raises(ClientError, match="enable_msg_trace"):
        AsyncPushConsumer("g", "127.0.0.1:9876", enable_msg_trace="yes")  # type: ignore[arg-type]
    with pytest.raises(ClientError, match="buffer_max"):
        TraceConfig(buffer_max=0)
    assert AsyncProducer("p", "127.0.0.1:9876").trace_stats is None


def test_a_listener_calls_records_are_the_encoders() -> None:
    from orbitmq.client.consumer.consume_types import ConsumeContext, ConsumeResult
    from orbitmq.client.trace.consume import TracedListenerRunner
    from orbitmq.protocol.message import MessageExt
    from orbitmq.protocol.msgid import UniqIdGenerator

    async def failing(messages: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
        raise RuntimeError("boom")

    async def run() -> None:
        d = _dispatcher()
        runner = TracedListenerRunner({"Orders": failing}, 1, ConsumeResult.RECONSUME_LATER,
                                      dispatcher=d, ids=UniqIdGenerator("127.0.0.1"))
        msg = MessageExt("Orders", b"x", msg_id=MSG_ID, reconsume_times=2,
                         properties={"KEYS": "k1 k2"})
        ctx = ConsumeContext(MessageQueue("Orders", "broker-a", 0), "workers")
        assert await runner.run([msg], ctx) is ConsumeResult.RECONSUME_LATER
        texts = [text for text, _, _ in d._buffer]
        before, after = (decode_trace_data(t)[0] for t in texts)
        assert [encode_record(before), encode_record(after)] == texts
        assert (before.type, before.group, before.retry_times, before.keys) == (
            TraceType.SUB_BEFORE, "workers", 2, "k1 k2")
        assert (after.type, after.request_id, after.success, after.context_code) == (
            TraceType.SUB_AFTER, before.request_id, False, 2)  # EXCEPTION
        assert after.timestamp_ms >= before.timestamp_ms and after.group == "workers"

    asyncio.run(run())
