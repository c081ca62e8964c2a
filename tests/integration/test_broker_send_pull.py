"""Sends (V1, V2, batches over 320 and over code 10) and pulls (tags, offsets, statuses) over TCP."""

from __future__ import annotations

import dataclasses
import errno
import time
from collections.abc import Iterator

import pytest
from test_broker_support import BrokerHarness, broker_config

from orbitmq.broker.processor.pull_processor import pull_response_code
from orbitmq.broker.tables.topic_config_manager import validate_topic
from orbitmq.config import FlushDiskType
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.message import PropertyKey
from orbitmq.protocol.msgid import decode_offset_msg_id
from orbitmq.protocol.stored import iter_stored_messages
from orbitmq.store.status import GetMessageStatus


@pytest.fixture(scope="module")
def h(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHarness]:
    harness = BrokerHarness(broker_config(tmp_path_factory.mktemp("send-pull")))
    yield harness
    harness.close()


def _strings(fields: dict[str, object]) -> bool:
    return all(isinstance(v, str) for v in fields.values())


def test_send_v1_answers_string_fields_and_pull_returns_the_message(h: BrokerHarness) -> None:
    r = h.send_ok("SendV1", b"payload-1", tags="TagA", keys="k1", queue_id=2)
    assert _strings(r.ext_fields)
    assert r.ext_fields["queueId"] == "2" and r.ext_fields["queueOffset"] == "0"
    host, port, offset = decode_offset_msg_id(r.ext_fields["msgId"])
    assert (host, port) == ("127.0.0.1", h.port)
    h.wait_dispatched()
    resp, msgs = h.pull("SendV1", 2, 0)
    assert resp.code == ResponseCode.SUCCESS and _strings(resp.ext_fields)
    assert resp.ext_fields["nextBeginOffset"] == "1"
    assert (resp.ext_fields["minOffset"], resp.ext_fields["maxOffset"]) == ("0", "1")
    assert resp.ext_fields["suggestWhichBrokerId"] == "0"
    [m] = msgs
    assert (m.body, m.tags, m.keys, m.queue_id, m.queue_offset) == (b"payload-1", "TagA", ["k1"], 2, 0)
    assert m.commit_log_offset == offset and m.offset_msg_id == r.ext_fields["msgId"]
    assert m.born_host[0] == "127.0.0.1" and m.store_host == ("127.0.0.1", h.port)


def test_send_v2_short_header_names(h: BrokerHarness) -> None:
    r = h.send_ok("SendV2", b"v2", tags="X", code=RequestCode.SEND_MESSAGE_V2, queue_id=1)
    assert r.ext_fields["queueId"] == "1"
    h.wait_dispatched()
    assert [m.body for m in h.pull_all("SendV2", 1)] == [b"v2"]


@pytest.mark.parametrize("code", [RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_MESSAGE])
def test_batch_is_one_write_with_consecutive_offsets(h: BrokerHarness, code: int) -> None:
    topic = f"Batch{int(code)}"
    entries = [(f"m{i}".encode(), {PropertyKey.TAGS: f"T{i % 2}", PropertyKey.UNIQ_KEY: f"U{i:031d}"})
               for i in range(5)]
    h.send_ok(topic, b"first")
    r = h.send_batch(topic, entries, code=code)
    assert r.code == ResponseCode.SUCCESS, r.remark
    ids = r.ext_fields["msgId"].split(",")
    assert len(ids) == 5 and r.ext_fields["queueOffset"] == "1"
    offsets = [decode_offset_msg_id(i)[2] for i in ids]
    assert offsets == sorted(offsets)
    h.wait_dispatched()
    msgs = h.pull_all(topic, 0)
    assert [m.body for m in msgs] == [b"first"] + [b for b, _ in entries]
    assert [m.queue_offset for m in msgs] == list(range(6))
    assert [m.msg_id for m in msgs[1:]] == [p[PropertyKey.UNIQ_KEY] for _, p in entries]
    assert all(m.body_crc != 0 for m in msgs)  # computed by the broker (the C++ batch sends 0)


def test_queue_id_out_of_range_is_replaced_round_robin(h: BrokerHarness) -> None:
    queues = {h.send_ok("AnyQueue", b"x", queue_id=q).ext_fields["queueId"] for q in (-1, 99, -1, 99)}
    assert queues <= {"0", "1", "2", "3"} and len(queues) > 1


def test_tag_filter_returns_only_matching_tags(h: BrokerHarness) -> None:
    tags = ["TagA", "TagB", None, "TagC", "TagA", "TagAB"]
    for i, tag in enumerate(tags):
        h.send_ok("Tagged", f"m{i}".encode(), tags=tag)
    h.wait_dispatched()
    got = h.pull_all("Tagged", 0, expression="TagA || TagC")
    assert [(m.body, m.tags) for m in got] == [(b"m0", "TagA"), (b"m3", "TagC"), (b"m4", "TagA")]
    assert [m.body for m in h.pull_all("Tagged", 0, expression="*")] == [f"m{i}".encode() for i in range(6)]
    assert h.pull_all("Tagged", 0, expression="Nope") == []


def test_same_hash_different_tag_is_filtered_by_string(h: BrokerHarness) -> None:
    # "Aa" and "BB" have the same Java hashCode: the ConsumeQueue check passes both.
    h.send_ok("Collide", b"aa", tags="Aa")
    h.send_ok("Collide", b"bb", tags="BB")
    h.wait_dispatched()
    assert [m.body for m in h.pull_all("Collide", 0, expression="BB")] == [b"bb"]


def test_pull_status_mapping(h: BrokerHarness) -> None:
    for i in range(3):
        h.send_ok("Statuses", f"{i}".encode())
    h.wait_dispatched()
    r, _ = h.pull("Statuses", 0, 3)  # one past the end
    assert r.code == ResponseCode.PULL_NOT_FOUND and r.ext_fields["nextBeginOffset"] == "3"
    r, _ = h.pull("Statuses", 0, 50)  # far past the end
    assert r.code == ResponseCode.PULL_OFFSET_MOVED and r.ext_fields["nextBeginOffset"] == "0"
    r, _ = h.pull("Statuses", 1, 0)  # an empty queue, from 0
    assert r.code == ResponseCode.PULL_NOT_FOUND
    r, _ = h.pull("Statuses", 1, 7)  # an empty queue, elsewhere
    assert r.code == ResponseCode.PULL_OFFSET_MOVED and r.ext_fields["nextBeginOffset"] == "0"
    r, _ = h.pull("Statuses", 0, 0, expression="NoSuchTag")
    assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY and r.ext_fields["nextBeginOffset"] == "3"
    r, msgs = h.pull("Statuses", 0, 1, max_nums=1)
    assert r.code == ResponseCode.SUCCESS and [m.body for m in msgs] == [b"1"]


def test_pull_errors(h: BrokerHarness) -> None:
    r, _ = h.pull("NoSuchTopicHere", 0, 0)
    assert r.code == ResponseCode.TOPIC_NOT_EXIST and r.remark
    h.send_ok("PullErr", b"x")
    r, _ = h.pull("PullErr", 4, 0)
    assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[4] is illegal" in r.remark
    fields = h.pull_fields("PullErr", 0, 0)
    fields["expressionType"] = "SQL92"
    r = h.invoke(RequestCode.PULL_MESSAGE, fields)
    # SQL92 with enable_property_filter off: a code of its own (RocketMQ: SYSTEM_ERROR)
    assert r.code == ResponseCode.FILTER_NOT_SUPPORTED and "SQL92" in r.remark


def test_pull_without_subscription_flag_or_heartbeat(h: BrokerHarness) -> None:
    h.send_ok("NoHeartbeat", b"a", tags="A")
    h.send_ok("NoHeartbeat", b"b", tags="B")
    h.wait_dispatched()
    fields = h.pull_fields("NoHeartbeat", 0, 0, expression="B", group="never-heartbeat")
    fields["sysFlag"] = "0"  # no subscription bit: the request's own expression still applies
    r = h.invoke(RequestCode.PULL_MESSAGE, fields)
    assert r.code == ResponseCode.SUCCESS
    assert [m.body for m in iter_stored_messages(r.body)] == [b"b"]


def test_max_msg_bytes_bounds_a_pulls_answer(h: BrokerHarness) -> None:
    """A pull's maxMsgBytes (RocketMQ 5 clients send it) bounds the bytes of its answer; the
    first message comes whatever its size."""
    for i in range(5):
        h.send_ok("MaxBytes", bytes([i]) * 1000, queue_id=0)
    h.wait_dispatched()
    r, _ = h.pull("MaxBytes", 0, 0)
    sizes = [int.from_bytes(r.body[pos : pos + 4], "big") for pos in
             (0, int.from_bytes(r.body[:4], "big"))]
    for max_bytes, count in ((1, 1), (sizes[0] + sizes[1], 2), (sizes[0] + sizes[1] - 1, 1)):
        fields = h.pull_fields("MaxBytes", 0, 0)
        fields["maxMsgBytes"] = str(max_bytes)
        r = h.invoke(RequestCode.PULL_MESSAGE, fields)
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert [m.body[0] for m in iter_stored_messages(r.body)] == list(range(count)), max_bytes
        assert r.ext_fields["nextBeginOffset"] == str(count)


def test_pull_many_messages_across_segments(h: BrokerHarness) -> None:
    body = bytes(range(256)) * 16  # 4 KiB: 256 KiB test segments roll every ~60 messages
    for i in range(150):
        h.send_ok("Rolling", body + i.to_bytes(4, "big"), queue_id=i % 2)
    h.wait_dispatched()
    for q in (0, 1):
        got = h.pull_all("Rolling", q)
        assert [int.from_bytes(m.body[-4:], "big") for m in got] == list(range(q, 150, 2))
        assert [m.queue_offset for m in got] == list(range(75))


def test_sync_flush_sends_are_acknowledged_after_fsync(tmp_path_factory: pytest.TempPathFactory) -> None:
    cfg = broker_config(tmp_path_factory.mktemp("sync"))
    cfg = dataclasses.replace(cfg, store=dataclasses.replace(cfg.store, flush_disk_type=FlushDiskType.SYNC_FLUSH))
    h2 = BrokerHarness(cfg)
    try:
        started = time.monotonic()
        for i in range(20):
            h2.send_ok("Durable", f"{i}".encode())
        assert time.monotonic() - started < 10
        assert h2.broker.store.flushed_physical_offset() >= h2.broker.store.max_physical_offset()

        # A sync that fails (EIO) under the group commit: FLUSH_DISK_TIMEOUT, with the position
        # the message was appended at (the durable-save seam's answer to a failed condition).
        commit_log = h2.broker.store.commit_log
        real_flush = commit_log.flush

        def failing_flush() -> int:
            raise OSError(errno.EIO, "disk gone (simulated)")

        commit_log.flush = failing_flush  # type: ignore[method-assign]
        try:
            r = h2.send("Durable", b"late")
        finally:
            commit_log.flush = real_flush  # type: ignore[method-assign]
        if r.code == ResponseCode.SERVICE_NOT_AVAILABLE:
            # The store's periodic flush met the failing sync first: puts are refused from then
            # on, before anything is appended (as loud, and nothing acknowledged either way).
            assert "syncing the commit log failed" in (r.remark or ""), r.remark
        else:
            assert r.code == ResponseCode.FLUSH_DISK_TIMEOUT and r.remark == "flush to disk timed out"
            assert r.ext_fields["queueOffset"] == "20" and r.ext_fields["msgId"]
    finally:
        h2.close()


def test_send_to_a_retry_topic_creates_it_with_the_groups_retry_queues(h: BrokerHarness) -> None:
    r = h.send_ok("%RETRY%SomeGroup", b"again", queue_id=3)
    assert r.ext_fields["queueId"] == "0"  # one retry queue: the out-of-range id is replaced
    tc = h.broker.topics.get("%RETRY%SomeGroup")
    assert tc is not None and (tc.read_queue_nums, tc.write_queue_nums) == (1, 1)


@pytest.mark.parametrize(("status", "offset", "code"), [
    (GetMessageStatus.FOUND, 5, ResponseCode.SUCCESS),
    (GetMessageStatus.NO_MATCHED_MESSAGE, 5, ResponseCode.PULL_RETRY_IMMEDIATELY),
    (GetMessageStatus.MESSAGE_WAS_REMOVING, 5, ResponseCode.PULL_RETRY_IMMEDIATELY),
    (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, ResponseCode.PULL_NOT_FOUND),
    (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 5, ResponseCode.PULL_OFFSET_MOVED),
    (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, ResponseCode.PULL_NOT_FOUND),
    (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 5, ResponseCode.PULL_OFFSET_MOVED),
    (GetMessageStatus.OFFSET_OVERFLOW_ONE, 5, ResponseCode.PULL_NOT_FOUND),
    (GetMessageStatus.OFFSET_FOUND_NULL, 5, ResponseCode.PULL_NOT_FOUND),
    (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 5, ResponseCode.PULL_OFFSET_MOVED),
    (GetMessageStatus.OFFSET_TOO_SMALL, 5, ResponseCode.PULL_OFFSET_MOVED),
])
def test_pull_response_code_table(status: GetMessageStatus, offset: int, code: ResponseCode) -> None:
    assert pull_response_code(status, offset) is code


def test_every_store_status_has_a_pull_answer() -> None:
    assert {pull_response_code(s, 1) for s in GetMessageStatus} <= {
        ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_NOT_FOUND,
        ResponseCode.PULL_OFFSET_MOVED}


@pytest.mark.parametrize(("topic", "ok"), [
    ("Good_Topic-1", True), ("%RETRY%g", True), ("a|b", True), ("x" * 127, True),
    ("", False), ("   ", False), ("x" * 128, False), ("dot.topic", False), ("tab\t", False),
    ("ünïcode", False),
])
def test_topic_name_rules(topic: str, ok: bool) -> None:
    assert (validate_topic(topic) is None) is ok
