"""The broker's tables in the metadata store (tables/metadata_table.py): a change costs the same
at any table size, every kind of change reaches the store, explicit offset commits of one loop
round share a transaction, and the JSON tables of the tree before the store are imported once.

The cost is counted (SQL statements, transactions and rows written per change), never timed:
the machine is shared, and counts say what is constant."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import threading
from pathlib import Path

from orbitmq.broker.tables.consumer_offset_manager import ConsumerOffsetManager
from orbitmq.broker.tables.metadata_table import MIGRATED_SUFFIX, metadata_db_for
from orbitmq.broker.tables.subscription_group_manager import (
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from orbitmq.broker.tables.topic_config_manager import TopicConfigManager
from orbitmq.config import TEST_MIN_STORE, BrokerConfig, FlushDiskType
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.store.metadata_db import (
    CONSUMER_OFFSETS,
    SUBSCRIPTION_GROUPS,
    TOPICS,
    MetadataDB,
    export_tables,
)

LEGACY = Path(__file__).resolve().parents[2] / "data" / "legacy_tables" / "config"


def _config(root: Path, **settings: object) -> BrokerConfig:
    store = dataclasses.replace(TEST_MIN_STORE, store_path=str(root / "store"))
    return BrokerConfig(listen_port=0, grpc_listen_port=-1, store=store, topics_max=10_000,
                        **settings)  # type: ignore[arg-type]


@dataclasses.dataclass
class _Cost:
    statements: int
    transactions: int
    rows: int


def _cost_of(db: MetadataDB, change: object) -> _Cost:
    """What one change wrote: statements, transactions, and the rows SQLite changed."""
    conn = db._connection()
    before = (db.statements, db.transactions, conn.total_changes)
    assert callable(change)
    change()
    return _Cost(db.statements - before[0], db.transactions - before[1],
                 conn.total_changes - before[2])


def test_a_topic_create_costs_the_same_at_100_and_at_5000_topics(tmp_path: Path) -> None:
    topics = TopicConfigManager(_config(tmp_path))
    topics.load()
    db = topics.db
    for i in range(100):
        topics.update(TopicConfig(f"T{i:05d}", 8, 8))
    at_100 = _cost_of(db, lambda: topics.update(TopicConfig("Probe100", 8, 8)))
    for i in range(100, 5000):
        topics.update(TopicConfig(f"T{i:05d}", 8, 8))
    at_5000 = _cost_of(db, lambda: topics.update(TopicConfig("Probe5000", 8, 8)))
    assert at_100 == at_5000 == _Cost(statements=4, transactions=1, rows=2)  # topic + version
    assert db.count(TOPICS) == 5002 + 1  # and TBW102
    delete = _cost_of(db, lambda: topics.delete("T00042"))
    assert delete == _Cost(statements=4, transactions=1, rows=2)
    db.close()
    again = TopicConfigManager(_config(tmp_path))
    again.load()
    assert again.table == topics.table
    assert again.data_version == topics.data_version
    again.db.close()


def test_a_group_change_and_an_offset_commit_cost_the_same_at_any_size(tmp_path: Path) -> None:
    config = _config(tmp_path, groups_max=10_000)
    db = metadata_db_for(config)
    groups = SubscriptionGroupManager(config, db=db)
    offsets = ConsumerOffsetManager(config.store.store_path, store=None, db=db)  # type: ignore[arg-type]
    groups.load()
    offsets.load()
    costs = []
    for size in (100, 3000):
        while len(groups.table) < size:
            n = len(groups.table)
            groups.update(SubscriptionGroupConfig(f"g{n:05d}"))
            offsets.commit(f"g{n:05d}", "T", 0, n)
        offsets.persist()
        costs.append((_cost_of(db, lambda: groups.update(SubscriptionGroupConfig("probe"))),
                      _cost_of(db, lambda s=size: (offsets.commit("probe", "T", 1, s),
                                                   offsets.persist()))))
    assert costs[0] == costs[1]
    assert costs[0][1] == _Cost(statements=3, transactions=1, rows=1)
    db.close()


def test_explicit_commits_of_one_loop_round_share_one_transaction(tmp_path: Path) -> None:
    config = _config(tmp_path)
    offsets = ConsumerOffsetManager(config.store.store_path, store=None)  # type: ignore[arg-type]
    offsets.load()
    db = offsets.db

    async def burst() -> list[bool]:
        return list(await asyncio.gather(*(offsets.commit_saved("g", "T", q, 10 + q)
                                           for q in range(50))))

    before = db.transactions
    assert asyncio.run(burst()) == [True] * 50
    assert db.transactions - before == 1
    assert {(k, q): v for k, q, v in db.rows(CONSUMER_OFFSETS)} == {
        ("T@g", q): 10 + q for q in range(50)}
    db.close()


def test_commits_that_arrive_while_a_save_runs_share_the_next_save(tmp_path: Path) -> None:
    """One save at a time (one worker thread, whatever the commit rate): the commits of later
    rounds wait for the running save and are written together by the next."""
    config = _config(tmp_path)
    offsets = ConsumerOffsetManager(config.store.store_path, store=None)  # type: ignore[arg-type]
    offsets.load()
    db = offsets.db
    write = db.write
    running = [0, 0]  # now, most at once
    release = threading.Event()

    def slow_write(rows):  # type: ignore[no-untyped-def]
        running[0] += 1
        running[1] = max(running)
        try:
            release.wait(5)
            return write(rows)
        finally:
            running[0] -= 1

    db.write = slow_write  # type: ignore[method-assign]

    async def rounds() -> list[bool]:
        first = asyncio.ensure_future(offsets.commit_saved("g", "T", 0, 1))
        await asyncio.sleep(0.05)  # the first save is running (held by the event)
        later = [asyncio.ensure_future(offsets.commit_saved("g", "T", q, q)) for q in range(1, 6)]
        for q in range(6, 10):  # more rounds while it runs
            await asyncio.sleep(0.01)
            later.append(asyncio.ensure_future(offsets.commit_saved("g", "T", q, q)))
        release.set()
        return list(await asyncio.gather(first, *later))

    before = db.transactions
    assert asyncio.run(rounds()) == [True] * 10
    assert running[1] == 1
    assert db.transactions - before == 2  # the first commit's, then all the others'
    db.close()


def test_removals_delete_their_rows(tmp_path: Path) -> None:
    config = _config(tmp_path)
    db = metadata_db_for(config)
    offsets = ConsumerOffsetManager(config.store.store_path, store=None, db=db)  # type: ignore[arg-type]
    groups = SubscriptionGroupManager(config, db=db)
    offsets.load()
    groups.load()
    for g in ("a", "b"):
        groups.update(SubscriptionGroupConfig(g))
        for t in ("T1", "T2"):
            offsets.commit(g, t, 0, 1)
            offsets.commit(g, t, 3, 4)
    offsets.persist()
    offsets.remove_topic("T1")
    offsets.remove_group("b")
    groups.delete("b")
    offsets.persist()
    assert [(k, q) for k, q, _ in db.rows(CONSUMER_OFFSETS)] == [("T2@a", 0), ("T2@a", 3)]
    assert [k for k, _, _ in db.rows(SUBSCRIPTION_GROUPS)] == ["a"]
    db.close()


def test_a_slaves_copy_of_its_masters_tables_writes_what_differs(tmp_path: Path) -> None:
    config = _config(tmp_path)
    topics = TopicConfigManager(config)
    topics.load()
    for name in ("A", "B", "C"):
        topics.update(TopicConfig(name, 4, 4))
    master = topics.wrapper()
    master.topic_config_table = dict(master.topic_config_table)
    master.topic_config_table["B"] = TopicConfig("B", 8, 8)
    del master.topic_config_table["C"]
    master.data_version.counter += 10
    cost = _cost_of(topics.db, lambda: topics.replace_from_master(master))
    assert cost.rows == 3  # B updated, C deleted, the version
    topics.db.close()
    again = TopicConfigManager(config)
    again.load()
    assert again.table == master.topic_config_table
    assert again.data_version.counter == master.data_version.counter
    again.db.close()


def test_sync_flush_makes_the_metadata_store_fsync_each_commit(tmp_path: Path) -> None:
    config = _config(tmp_path)
    sync = dataclasses.replace(config, store=dataclasses.replace(
        config.store, flush_disk_type=FlushDiskType.SYNC_FLUSH))
    assert not metadata_db_for(config).sync_full
    assert metadata_db_for(sync).sync_full


def test_the_json_tables_of_the_tree_before_are_imported_once(tmp_path: Path) -> None:
    """tests/data/legacy_tables/config holds what the broker before the metadata store wrote
    (make_fixture.py there): every row is imported, the files are renamed aside, and a second
    start does not import them again (a topic deleted after the import stays deleted)."""
    config = _config(tmp_path)
    config_dir = Path(config.store.store_path) / "config"
    shutil.copytree(LEGACY, config_dir)
    legacy = {p.name: json.loads(p.read_text()) for p in LEGACY.glob("*.json")}
    db = metadata_db_for(config)
    topics = TopicConfigManager(config, db=db)
    groups = SubscriptionGroupManager(config, db=db)
    offsets = ConsumerOffsetManager(config.store.store_path, store=None, db=db)  # type: ignore[arg-type]
    for table in (topics, groups, offsets):
        table.load()
    exported = export_tables(db)
    assert exported["topics"]["topicConfigTable"] == legacy["topics.json"]["topicConfigTable"]
    assert exported["topics"]["dataVersion"] == legacy["topics.json"]["dataVersion"]
    assert (exported["subscriptionGroups"]["subscriptionGroupTable"]
            == legacy["subscriptionGroup.json"]["subscriptionGroupTable"])
    assert exported["consumerOffsets"]["offsetTable"] == legacy["consumerOffset.json"]["offsetTable"]
    assert topics.get("LegacyFifo").attributes == {"message.type": "FIFO"}  # type: ignore[union-attr]
    assert offsets.query("legacy-orderly", "LegacyFifo", 1) == 2**40
    for name in ("topics.json", "subscriptionGroup.json", "consumerOffset.json"):
        assert not (config_dir / name).exists()
        assert (config_dir / (name + MIGRATED_SUFFIX)).exists()
    topics.delete("Legacy-00")
    db.close()
    db = metadata_db_for(config)
    again = TopicConfigManager(config, db=db)
    again.load()
    assert "Legacy-00" not in again.table and "Legacy-01" in again.table
    db.close()
