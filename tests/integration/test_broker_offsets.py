"""Consumer offsets: query/update semantics, persistence in the metadata store, and survival
across restarts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_broker_support import BrokerHarness, broker_config

from orbitmq.assembly import build_broker
from orbitmq.errors import StoreError
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.store.metadata_db import MetadataDB, export_tables
from orbitmq.testing.waits import EVENT_WAIT_S
from orbitmq.transport import LoopThread


def _query(h: BrokerHarness, group: str, topic: str, qid: int):
    return h.invoke(RequestCode.QUERY_CONSUMER_OFFSET,
                    {"consumerGroup": group, "topic": topic, "queueId": str(qid)})


def _update(h: BrokerHarness, group: str, topic: str, qid: int, offset: int):
    return h.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": group, "topic": topic, "queueId": str(qid), "commitOffset": str(offset)})


def _stored_offsets(store: Path) -> dict[str, dict[str, int]]:
    """The offsets in the metadata store, read beside the running broker."""
    with MetadataDB(str(store / "config" / "metadata.db"), read_only=True) as db:
        table: dict[str, dict[str, int]] = export_tables(db, ["consumerOffsets"])[
            "consumerOffsets"]["offsetTable"]
    return table


def test_offsets_survive_a_restart_and_are_written_atomically(tmp_path: Path) -> None:
    h = BrokerHarness(broker_config(tmp_path))
    try:
        for i in range(10):
            h.send_ok("Offsets", f"{i}".encode(), queue_id=i % 4)
        assert _update(h, "g1", "Offsets", 0, 3).code == ResponseCode.SUCCESS
        assert _update(h, "g1", "Offsets", 1, 2).code == ResponseCode.SUCCESS
        assert _update(h, "g2", "Offsets", 0, 1).code == ResponseCode.SUCCESS
        r = _query(h, "g1", "Offsets", 0)
        assert (r.code, r.ext_fields["offset"]) == (ResponseCode.SUCCESS, "3")
        h.restart()
        assert _query(h, "g1", "Offsets", 0).ext_fields["offset"] == "3"
        assert _query(h, "g1", "Offsets", 1).ext_fields["offset"] == "2"
        assert _query(h, "g2", "Offsets", 0).ext_fields["offset"] == "1"
        table = _stored_offsets(tmp_path)
        assert table["Offsets@g1"] == {"0": 3, "1": 2}
        assert not (tmp_path / "config" / "consumerOffset.json").exists()  # no JSON any more
    finally:
        h.close()


def test_an_answered_offset_commit_is_stored_before_its_answer(tmp_path: Path) -> None:
    h = BrokerHarness(broker_config(tmp_path, flush_consumer_offset_interval_ms=3_600_000))
    try:
        assert _update(h, "answered", "T", 2, 7).code == ResponseCode.SUCCESS
        assert _stored_offsets(tmp_path)["T@answered"] == {"2": 7}  # no periodic round ran
    finally:
        h.close()


def test_offsets_are_flushed_periodically_without_a_stop(tmp_path: Path) -> None:
    h = BrokerHarness(broker_config(tmp_path, flush_consumer_offset_interval_ms=50))
    try:
        # An offset carried by a pull is written behind (RocketMQ's way): the periodic round.
        h.broker.offsets.commit("periodic", "T", 0, 42)
        deadline = time.monotonic() + EVENT_WAIT_S
        while _stored_offsets(tmp_path).get("T@periodic") != {"0": 42}:
            assert time.monotonic() < deadline, "offsets never flushed"
            time.sleep(0.02)
    finally:
        h.close()


def test_query_without_commit(tmp_path: Path) -> None:
    h = BrokerHarness(broker_config(tmp_path))
    try:
        # A queue whose first message is still there: a new group starts from 0.
        h.send_ok("Fresh", b"x")
        h.wait_dispatched()
        r = _query(h, "new-group", "Fresh", 0)
        assert (r.code, r.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")
        # A queue whose head was deleted: QUERY_NOT_FOUND, the client applies ConsumeFromWhere.
        cq = h.broker.store.consume_queue_table[("Fresh", 0)]
        cq.min_offset = 1
        r = _query(h, "new-group", "Fresh", 0)
        assert r.code == ResponseCode.QUERY_NOT_FOUND and r.remark
        assert _update(h, "new-group", "Fresh", 0, -5).code == ResponseCode.INVALID_PARAMETER
    finally:
        h.close()


def test_corrupt_offset_file_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir(parents=True)
    (tmp_path / "config" / "consumerOffset.json").write_text("{not json")
    loop = LoopThread()
    broker = build_broker(broker_config(tmp_path))
    try:
        with pytest.raises(StoreError, match="consumerOffset.json"):
            loop.call(broker.start(), 30)
        assert not broker.store.running  # the store was closed again
    finally:
        loop.stop()
