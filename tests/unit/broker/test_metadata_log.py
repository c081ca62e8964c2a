"""The metadata log (broker/metadata_log.py): a master's changes appended as records, applied
by a replica in order, idempotently, from where it stopped; a record it cannot apply refused
loudly and skipped. The master and the replica share one store here (the replica reads the very
records the master appended), each with tables of its own."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from orbitmq.broker.durable_save import DurableSave
from orbitmq.broker.metadata_log import (
    APPLIED_KEY,
    MetadataLog,
    MetadataTables,
    RecordKind,
    decode_record,
    encode_record,
)
from orbitmq.broker.role import RoleState
from orbitmq.broker.tables.consumer_offset_manager import ConsumerOffsetManager
from orbitmq.broker.tables.metadata_table import metadata_db_for
from orbitmq.broker.tables.subscription_group_manager import (
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from orbitmq.broker.tables.topic_config_manager import (
    NOT_ALLOWED_SEND_TOPICS,
    SYSTEM_TOPICS,
    TopicConfigManager,
)
from orbitmq.config import TEST_MIN_STORE, BrokerConfig, BrokerRole
from orbitmq.errors import MetadataRecordError
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.topics import METADATA_LOG_TOPIC
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.message_store import MessageStore
from orbitmq.store.metadata_db import VERSIONS


def _config(root: Path) -> BrokerConfig:
    store = dataclasses.replace(TEST_MIN_STORE, store_path=str(root))
    return BrokerConfig(listen_port=0, grpc_listen_port=-1, store=store)


@dataclasses.dataclass
class Side:
    """One broker's tables and metadata log over the shared store."""

    log: MetadataLog
    tables: MetadataTables


def _side(root: Path, store: MessageStore, role: BrokerRole) -> Side:
    config = _config(root)
    db = metadata_db_for(config)
    tables = MetadataTables(TopicConfigManager(config, db=db),
                            SubscriptionGroupManager(config, db=db),
                            ConsumerOffsetManager(str(root), store, db=db))
    tables.topics.load()
    tables.groups.load()
    tables.offsets.load()
    broker_id = 1 if role is BrokerRole.SLAVE else 0
    log = MetadataLog(store, DurableSave(store, []), RoleState(role, broker_id), tables, db,
                      lambda: True, lambda: ("127.0.0.1", 10911))
    log.load()
    return Side(log, tables)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore(_config(tmp_path / "store").store, run_threads=False) as s:
        yield s


def _topic(master: Side, name: str, queues: int) -> None:
    topics = master.tables.topics
    tc = TopicConfig(name, queues, queues)
    topics.update(tc)
    master.log.append(RecordKind.TOPIC_UPDATE, topic=name, config=tc.to_dict(),
                      version=topics.data_version.to_dict())


def _commit(master: Side, group: str, topic: str, queue_id: int, offset: int) -> None:
    master.tables.offsets.commit(group, topic, queue_id, offset)
    master.log.append(RecordKind.OFFSET_COMMIT, group=group, topic=topic, queueId=queue_id,
                      offset=offset)


def _changes(master: Side) -> None:
    """Topics created, updated and deleted, offsets committed twice, a group made and gone."""
    _topic(master, "Orders", 4)
    _topic(master, "Gone", 2)
    _commit(master, "billing", "Orders", 1, 5)
    _commit(master, "billing", "Orders", 1, 9)  # the later commit wins: order kept
    _topic(master, "Orders", 8)  # an update
    groups = master.tables.groups
    for name in ("billing", "temp"):
        groups.update(SubscriptionGroupConfig(name, retry_max_times=3))
        master.log.append(RecordKind.GROUP_UPDATE, group=name,
                          config=groups.table[name].to_dict(),
                          version=groups.data_version.to_dict())
    groups.delete("temp")
    master.log.append(RecordKind.GROUP_DELETE, group="temp", removeOffset=True,
                      version=groups.data_version.to_dict())
    master.tables.topics.delete("Gone")
    master.log.append(RecordKind.TOPIC_DELETE, topic="Gone",
                      version=master.tables.topics.data_version.to_dict())


def _same_tables(a: MetadataTables, b: MetadataTables) -> None:
    assert a.topics.table == b.topics.table
    assert a.topics.data_version == b.topics.data_version
    assert a.groups.table == b.groups.table
    assert a.groups.data_version == b.groups.data_version
    assert a.offsets.snapshot() == b.offsets.snapshot()


def test_a_replica_applies_the_masters_records_in_order(tmp_path: Path,
                                                        store: MessageStore) -> None:
    master = _side(tmp_path / "master", store, BrokerRole.SYNC_MASTER)
    replica = _side(tmp_path / "replica", store, BrokerRole.SLAVE)
    _changes(master)
    store.wait_dispatched()
    assert master.log.records_appended == 9
    assert replica.log.catch_up() == 9
    _same_tables(master.tables, replica.tables)
    assert replica.tables.offsets.query("billing", "Orders", 1) == 9
    assert replica.tables.topics.get("Orders") == TopicConfig("Orders", 8, 8)
    assert replica.tables.topics.get("Gone") is None
    assert replica.tables.groups.table.keys() >= {"billing"}
    assert "temp" not in replica.tables.groups.table
    # The master's own records are its tables already: nothing for it to apply.
    assert master.log.catch_up() == 0


def test_applying_again_changes_nothing_and_a_restart_goes_on_where_it_stopped(
        tmp_path: Path, store: MessageStore) -> None:
    master = _side(tmp_path / "master", store, BrokerRole.SYNC_MASTER)
    replica = _side(tmp_path / "replica", store, BrokerRole.SLAVE)
    _changes(master)
    store.wait_dispatched()
    replica.log.catch_up()
    replica.log.applied = 0  # as if the applied offset had not been saved: all again
    assert replica.log.catch_up() == 9
    _same_tables(master.tables, replica.tables)
    rows = {key: value for key, _sub, value in replica.log.db.rows(VERSIONS)}
    assert rows[APPLIED_KEY] == 9
    # A restart of the replica: its tables and the next record to apply come from its store.
    _commit(master, "billing", "Orders", 2, 40)
    store.wait_dispatched()
    again = _side(tmp_path / "replica", store, BrokerRole.SLAVE)  # load() catches up
    assert again.log.applied == 10
    assert again.log.records_applied == 1
    _same_tables(master.tables, again.tables)


def test_a_record_of_an_unknown_kind_is_refused_loudly_and_skipped(
        tmp_path: Path, store: MessageStore, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(MetadataRecordError, match="unknown metadata record kind 'acl.update'"):
        decode_record(b'{"v": 1, "kind": "acl.update", "user": "x"}')
    with pytest.raises(MetadataRecordError, match="version"):
        decode_record(encode_record(RecordKind.TOPIC_DELETE, topic="T").replace(b'"v":1',
                                                                                 b'"v":2'))
    master = _side(tmp_path / "master", store, BrokerRole.SYNC_MASTER)
    replica = _side(tmp_path / "replica", store, BrokerRole.SLAVE)
    store.put([MessageInner(METADATA_LOG_TOPIC, 0, b'{"v": 1, "kind": "acl.update"}')])
    store.put([MessageInner(METADATA_LOG_TOPIC, 0, encode_record(
        RecordKind.OFFSET_COMMIT, group="g", topic="T", queueId=-1, offset=3))])
    _commit(master, "g", "T", 0, 7)
    store.wait_dispatched()
    with caplog.at_level(logging.ERROR):
        assert replica.log.catch_up() == 3
    refusals = [r.getMessage() for r in caplog.records if "refused and skipped" in r.getMessage()]
    assert len(refusals) == 2, refusals
    assert "acl.update" in refusals[0] and "queueId" in refusals[1]
    assert replica.log.records_refused == 2
    assert replica.tables.offsets.snapshot() == {"T@g": {0: 7}}  # the refused one not in part


def test_clients_can_neither_send_to_nor_create_the_metadata_log_topic() -> None:
    assert METADATA_LOG_TOPIC in NOT_ALLOWED_SEND_TOPICS
    assert METADATA_LOG_TOPIC in SYSTEM_TOPICS


def test_a_broker_alone_writes_no_record(tmp_path: Path, store: MessageStore) -> None:
    config = _config(tmp_path)
    db = metadata_db_for(config)
    tables = MetadataTables(TopicConfigManager(config, db=db), SubscriptionGroupManager(config, db=db),
                            ConsumerOffsetManager(str(tmp_path), store, db=db))
    alone = MetadataLog(store, DurableSave(store, []), RoleState(BrokerRole.ASYNC_MASTER, 0),
                        tables, db, lambda: False, lambda: ("127.0.0.1", 1))
    assert alone.append(RecordKind.TOPIC_DELETE, topic="T", version={}) is None
    assert asyncio.run(alone.settled(None)) == (0, None)
