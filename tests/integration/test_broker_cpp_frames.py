"""Requests captured from the official C++ client (tests/data/cpp_*.bin), replayed byte for byte
against a real broker: what the client sends must work, and every response extField must be a JSON
string (the client reads a number as 0)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from test_broker_support import DATA_DIR, BrokerHarness, RawConnection, broker_config

from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.msgid import decode_offset_msg_id
from orbitmq.protocol.stored import iter_stored_messages
from orbitmq.testing.waits import EVENT_WAIT_S


@pytest.fixture(scope="module")
def h(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHarness]:
    harness = BrokerHarness(broker_config(tmp_path_factory.mktemp("cpp")))
    yield harness
    harness.close()


@pytest.fixture
def conn(h: BrokerHarness) -> Iterator[RawConnection]:
    c = RawConnection(h.port)
    yield c
    c.close()


def replay(conn: RawConnection, name: str) -> RemotingCommand:
    conn.send((DATA_DIR / f"cpp_{name}.bin").read_bytes())
    resp = conn.response()
    assert resp is not None, f"{name}: connection closed"
    ext = conn.header_json.get("extFields") or {}
    assert all(isinstance(v, str) for v in ext.values()), (name, ext)
    assert conn.header_json.get("language") and isinstance(conn.header_json.get("code"), int)
    return resp


def test_send_sync_to_a_new_topic_creates_it_from_tbw102(h: BrokerHarness, conn: RawConnection) -> None:
    assert h.broker.topics.get("GoldenNewTopic") is None
    r = replay(conn, "send_sync")
    assert r.code == ResponseCode.SUCCESS, r.remark
    tc = h.broker.topics.get("GoldenNewTopic")
    assert tc is not None and (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (4, 4, 6)
    assert r.ext_fields["queueOffset"] == "0" and r.ext_fields["queueId"] == "0"
    decode_offset_msg_id(r.ext_fields["msgId"])
    [m] = h.pull_all("GoldenNewTopic", 0)
    assert m.uniq_key is not None and len(m.uniq_key) == 32 and m.properties.get("WAIT") == "true"


def test_send_orderly_batch_and_oneway(h: BrokerHarness, conn: RawConnection) -> None:
    r = replay(conn, "send_orderly")
    assert (r.code, r.ext_fields["queueId"]) == (ResponseCode.SUCCESS, "3")
    r = replay(conn, "send_batch")
    assert r.code == ResponseCode.SUCCESS, r.remark
    ids = r.ext_fields["msgId"].split(",")
    batch = h.pull_all("GoldenBatchTopic", 0)
    assert len(batch) == len(ids) > 1
    assert [m.offset_msg_id for m in batch] == ids
    assert all(m.uniq_key for m in batch)
    r = replay(conn, "send_oneway")  # flag 0 on the wire: answered like any request
    assert r.code == ResponseCode.SUCCESS


def test_pull_consumer_frames(h: BrokerHarness, conn: RawConnection) -> None:
    for tag in ("TagA", "TagB", "TagC", "TagA"):
        h.send_ok("GoldenPullTopic", tag.encode(), tags=tag)
    h.wait_dispatched()
    r = replay(conn, "pull")
    assert r.code == ResponseCode.SUCCESS
    assert [m.body for m in iter_stored_messages(r.body)] == [b"TagA", b"TagB", b"TagC", b"TagA"]
    assert r.ext_fields["nextBeginOffset"] == "4"
    r = replay(conn, "pull_tag")  # "TagA || TagB"
    assert [m.body for m in iter_stored_messages(r.body)] == [b"TagA", b"TagB", b"TagA"]


def test_push_consumer_frames(h: BrokerHarness, conn: RawConnection) -> None:
    r = replay(conn, "query_consumer_offset")  # the retry topic, never written: start at 0
    assert (r.code, r.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")
    r = replay(conn, "get_max_offset")
    assert (r.code, r.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")
    h.send_ok("GoldenPushTopic", b"first", tags="TagA")
    h.wait_dispatched()
    r = replay(conn, "push_pull")  # sysFlag 6: suspend + subscription, offset 0
    assert [m.body for m in iter_stored_messages(r.body)] == [b"first"]
    # sysFlag 7 at offset 1 with commitOffset 1: held until a TagA message arrives.
    conn.send((DATA_DIR / "cpp_push_pull_commit.bin").read_bytes())
    deadline = time.monotonic() + EVENT_WAIT_S
    while h.on_loop(lambda: h.broker.pull.long_poll.held_count) != 1:
        assert time.monotonic() < deadline, "the pull was not held"
        time.sleep(0.005)
    assert h.broker.offsets.query("GoldenPushGroup", "GoldenPushTopic", 0) == 1
    h.send_ok("GoldenPushTopic", b"second", tags="TagA")
    r = conn.response()
    assert r is not None and [m.body for m in iter_stored_messages(r.body)] == [b"second"]
    r = replay(conn, "push_pull_retry")  # the retry topic does not exist yet
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    r = replay(conn, "update_consumer_offset")
    assert r.code == ResponseCode.SUCCESS


def test_producer_unregister_frame(h: BrokerHarness, conn: RawConnection) -> None:
    assert replay(conn, "heartbeat_producer").code == ResponseCode.SUCCESS
    assert h.on_loop(lambda: len(h.broker.clients.producer_connections("GoldenProducerGroup"))) == 1
    assert replay(conn, "unregister_producer").code == ResponseCode.SUCCESS
    assert h.on_loop(lambda: h.broker.clients.producer_connections("GoldenProducerGroup")) == []
