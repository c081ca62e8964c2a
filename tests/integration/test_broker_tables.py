"""The broker's persisted tables: what could not be written is never accepted, and a table that
cannot be written is logged, retried, and never keeps the other tables from being saved.

Issue 13 found both through a wire fuzzer: an offset commit of 99999999999999999999 was accepted,
after which consumerOffset.json could never be written again and a clean stop failed before it
saved topics and subscription groups (every committed offset lost after a restart); a topic with an
absurd topicSysFlag made topics.json unwritable (new topics lost, never registered). The tables
live in the metadata store now (store/metadata_db.py); the same guarantees hold there.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path

import pytest
from test_broker_support import BrokerHarness, broker_config

from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.headers import CreateTopicRequestHeader
from orbitmq.store.metadata_db import MetadataDB, export_tables


def _commit(h: BrokerHarness, group: str, topic: str, qid: int, offset: str):
    return h.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": group, "topic": topic, "queueId": str(qid), "commitOffset": offset})


def _query(h: BrokerHarness, group: str, topic: str, qid: int) -> str:
    r = h.invoke(RequestCode.QUERY_CONSUMER_OFFSET,
                 {"consumerGroup": group, "topic": topic, "queueId": str(qid)})
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    return r.ext_fields["offset"]


def _create(h: BrokerHarness, topic: str, **fields: str):
    header = CreateTopicRequestHeader(topic, read_queue_nums=2, write_queue_nums=2).to_ext_fields()
    return h.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, {**header, **fields})


def _saved(path: str, table: str) -> dict:
    """One table of the metadata store at ``path`` (the broker's), read beside the broker."""
    with MetadataDB(path, read_only=True) as db:
        exported = export_tables(db, [table])[table]
    return {k: v for k, v in exported.items() if k != "dataVersion"}.popitem()[1]


def _offsets_saved(h: BrokerHarness) -> dict:
    return dict(_saved(h.broker.metadata.path, "consumerOffsets"))


def test_an_offset_beyond_int64_is_refused_and_the_table_stays_writable(tmp_path: Path) -> None:
    h = BrokerHarness(broker_config(tmp_path))
    try:
        for i in range(4):
            h.send_ok("Kept", f"{i}".encode(), queue_id=0)
        assert _commit(h, "g", "Kept", 0, "3").code == ResponseCode.SUCCESS
        r = _commit(h, "g", "Kept", 1, "99999999999999999999")
        assert r.code == ResponseCode.INVALID_PARAMETER and "commitOffset" in r.remark
        for group, topic, why in (("bad@group", "Kept", "group"), ("g", "a/b", "topic"),
                                  ("g" * 200, "Kept", "longer")):
            r = _commit(h, group, topic, 0, "1")
            assert r.code == ResponseCode.INVALID_PARAMETER and why in r.remark, r.remark
        assert _create(h, "NewAfter").code == ResponseCode.SUCCESS
        h.restart()
        assert _query(h, "g", "Kept", 0) == "3"
        assert "NewAfter" in h.broker.topics.table
        table = _offsets_saved(h)
        assert table["Kept@g"] == {"0": 3}
        assert not [k for k in table if k.endswith("@g") and k != "Kept@g"]
    finally:
        h.close()


@pytest.mark.parametrize(("field", "value"), [
    ("topicSysFlag", "4096"), ("topicSysFlag", "99999999999999999999"), ("perm", "255"),
    ("topicFilterType", "EVERYTHING"), ("readQueueNums", "2147483648"),
])
def test_an_absurd_topic_config_is_refused(tmp_path: Path, field: str, value: str) -> None:
    h = BrokerHarness(broker_config(tmp_path))
    try:
        r = _create(h, "Absurd", **{field: value})
        assert r.code == ResponseCode.INVALID_PARAMETER and field in r.remark, r.remark
        assert "Absurd" not in h.broker.topics.table
        h.send_ok("CreatedBySend", b"x")  # the table still takes new topics and saves them
        assert "CreatedBySend" in _saved(h.broker.metadata.path, "topics")
    finally:
        h.close()


def _block_offsets(path: str, blocked: bool) -> None:
    """Make every write of a consumer offset row fail (a trigger that aborts it), or not: a
    failure of one table only, in the real database file."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=5)
    try:
        if blocked:
            for op in ("INSERT", "UPDATE", "DELETE"):
                conn.execute(f"CREATE TRIGGER block_{op.lower()} BEFORE {op} ON consumer_offsets "
                             "BEGIN SELECT RAISE(ABORT, 'blocked by the test'); END")
        else:
            for op in ("insert", "update", "delete"):
                conn.execute(f"DROP TRIGGER block_{op}")
    finally:
        conn.close()


def test_a_table_that_cannot_be_written_does_not_stop_the_others(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The consumer offsets' rows cannot be written (a trigger aborts them): the failure is
    logged as an error and retried, an explicit commit is answered SYSTEM_ERROR (it is held in
    memory, not stored); the topics and the subscription groups are still saved; once the rows
    can be written again the offsets are saved too."""
    caplog.set_level(logging.WARNING, logger="orbitmq.broker")
    h = BrokerHarness(broker_config(tmp_path, flush_consumer_offset_interval_ms=50))
    db_path = h.broker.metadata.path
    try:
        h.send_ok("Before", b"x")
        assert _commit(h, "g", "Before", 0, "1").code == ResponseCode.SUCCESS
        assert _offsets_saved(h).get("Before@g") == {"0": 1}  # stored before the answer
        _block_offsets(db_path, True)
        r = _commit(h, "g", "Before", 0, "5")
        assert r.code == ResponseCode.SYSTEM_ERROR and "not yet saved" in r.remark, r.remark
        assert _query(h, "g", "Before", 0) == "5"  # held in memory
        deadline = time.monotonic() + 10
        while h.broker.offsets.file.failures < 2:  # the periodic round keeps trying
            assert time.monotonic() < deadline, "the offsets were never retried"
            time.sleep(0.02)
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert errors and "consumer offsets" in errors[0].getMessage()
        assert h.invoke(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                        body=b'{"groupName": "LaterGroup"}').code == ResponseCode.SUCCESS
        assert _create(h, "LaterTopic").code == ResponseCode.SUCCESS
        assert "LaterTopic" in _saved(db_path, "topics")  # saved at once, offsets failing
        h.call(h.client.close())
        h.call(h.broker.stop())  # completes, saving what it can
        assert "LaterTopic" in _saved(db_path, "topics")
        assert "LaterGroup" in _saved(db_path, "subscriptionGroups")
        assert _offsets_saved(h)["Before@g"] == {"0": 1}
        assert any("unsaved broker tables" in r.getMessage() for r in caplog.records)
    finally:
        h.loop.stop()
    _block_offsets(db_path, False)
    h = BrokerHarness(broker_config(tmp_path, flush_consumer_offset_interval_ms=50))
    try:
        assert _commit(h, "g", "Before", 0, "7").code == ResponseCode.SUCCESS
        assert _offsets_saved(h).get("Before@g") == {"0": 7}
    finally:
        h.close()
