"""Master and slave brokers over real sockets (issue 15): SYNC_MASTER answers, the slave's copy
byte for byte, a slave's refusals and reads, its copy of the master's tables, routes, catch-up
after downtime, a master restarted on its store, and a slave whose log diverged."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from replication_support import (
    Namesrv,
    caught_up,
    commit_log_bytes,
    connected,
    ha_port,
    master_config,
    restart_on_same_ports,
    slave_config,
    wait_for,
)
from test_broker_support import BrokerHarness

from orbitmq.broker.tables.topic_config_manager import TopicConfigManager
from orbitmq.cli.main import cli
from orbitmq.config import BrokerRole
from orbitmq.protocol.bodies import TopicConfig, TopicConfigSerializeWrapper, TopicRouteData
from orbitmq.protocol.codes import OrbitMQRequestCode, RequestCode, ResponseCode
from orbitmq.protocol.headers import (
    CreateTopicRequestHeader,
    EndTransactionRequestHeader,
    GetRouteInfoRequestHeader,
)
from orbitmq.store.metadata_db import MetadataDB, export_tables


@pytest.fixture
def ns() -> Iterator[Namesrv]:
    server = Namesrv()
    yield server
    server.close()


@pytest.fixture
def pair(tmp_path: Path, ns: Namesrv) -> Iterator[tuple[BrokerHarness, BrokerHarness]]:
    master = BrokerHarness(master_config(tmp_path, ns))
    slave = BrokerHarness(slave_config(tmp_path, ns))
    try:
        wait_for(lambda: connected(master), "the slave connects to its master")
        yield master, slave
    finally:
        slave.close()
        master.close()


def _end(r: object, h: BrokerHarness) -> int:
    """The commit log offset just past a sent message (its offset message id holds where it
    starts; the store says how long it is)."""
    offset = int(r.ext_fields["msgId"][16:32], 16)  # type: ignore[attr-defined]
    raw = h.broker.store.get_message_raw(offset)
    assert raw is not None
    return offset + len(raw)


def test_sync_master_answers_send_ok_once_the_slave_holds_the_bytes(
        pair: tuple[BrokerHarness, BrokerHarness]) -> None:
    master, slave = pair
    for i in range(30):
        code = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)[i % 2]
        r = master.send("ReplTopic", f"m{i}".encode() * 50, keys=f"k{i}", tags="t", code=code)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        # Answered SEND_OK: the slave holds the bytes already (not some time later).
        assert slave.broker.store.max_physical_offset() >= _end(r, master)
    batch = master.send_batch("ReplTopic", [(b"b1", {"KEYS": "kb1"}), (b"b2", {"TAGS": "x"})])
    assert batch.code == ResponseCode.SUCCESS
    wait_for(lambda: caught_up(master, slave), "the slave acknowledges the end")
    assert commit_log_bytes(slave) == commit_log_bytes(master)
    for qid in range(4):
        assert ([m.msg_id for m in slave.pull_all("ReplTopic", qid)]
                == [m.msg_id for m in master.pull_all("ReplTopic", qid)])
    status = master.on_loop(master.broker.replication.ha_status)
    assert status["inSyncSlaveNums"] == 1 and status["haConnectionInfo"][0]["diff"] == 0


def test_sync_master_without_a_slave_stores_and_answers_slave_not_available(
        tmp_path: Path) -> None:
    master = BrokerHarness(master_config(tmp_path, None))
    try:
        r = master.send("Alone", b"no slave")
        assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE, (r.code, r.remark)
        assert "no slave is connected" in (r.remark or "")
        assert r.ext_fields["msgId"]  # stored on the master all the same
        assert [m.body for m in master.pull_all("Alone", int(r.ext_fields["queueId"]))] == [
            b"no slave"]
    finally:
        master.close()


def test_a_slave_refuses_writes_and_serves_reads(
        pair: tuple[BrokerHarness, BrokerHarness]) -> None:
    master, slave = pair
    sent = master.send("ReadMe", b"from the master", keys="key-1", queue_id=0)
    assert sent.code == ResponseCode.SUCCESS
    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
        r = slave.send("ReadMe", b"x", code=code)
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in (r.remark or "")
    assert slave.send_batch("ReadMe", [(b"x", {})]).code == ResponseCode.SERVICE_NOT_AVAILABLE
    end = EndTransactionRequestHeader("g", 0, 0, 8, "id", False, "tx").to_ext_fields()
    r = slave.invoke(RequestCode.END_TRANSACTION, end)
    assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE
    # transactions by the batch too (refused before their headers are read)
    r = slave.invoke(OrbitMQRequestCode.SEND_TRANSACTION_BATCH, {"topic": "ReadMe"})
    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in (r.remark or "")
    r = slave.invoke(OrbitMQRequestCode.END_TRANSACTION_BATCH, end)
    assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE
    topic = CreateTopicRequestHeader("NewOnSlave", "TBW102", 4, 4).to_ext_fields()
    r = slave.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, topic)
    assert r.code == ResponseCode.NO_PERMISSION and "master" in (r.remark or "")
    assert slave.invoke(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "ReadMe"}).code == \
        ResponseCode.NO_PERMISSION
    assert slave.broker.store.max_physical_offset() == master.broker.store.max_physical_offset()
    # Reads: pulls, lookups by key and by id.
    msgs = slave.pull_all("ReadMe", 0)
    assert [m.body for m in msgs] == [b"from the master"]
    found = slave.invoke(RequestCode.QUERY_MESSAGE, {
        "topic": "ReadMe", "key": "key-1", "maxNum": "10", "beginTimestamp": "0",
        "endTimestamp": str(2**62)})
    assert found.code == ResponseCode.SUCCESS
    view = slave.invoke(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(msgs[0].commit_log_offset)})
    assert view.code == ResponseCode.SUCCESS
    # A pull's commitOffset is not stored by a slave (the master's table counts).
    r, _ = slave.pull("ReadMe", 0, 0, group="g-slave", commit_offset=1)
    assert r.code == ResponseCode.SUCCESS
    q = slave.invoke(RequestCode.QUERY_CONSUMER_OFFSET,
                     {"consumerGroup": "g-slave", "topic": "ReadMe", "queueId": "0"})
    assert q.code != ResponseCode.SUCCESS or q.ext_fields["offset"] == "0"


def test_a_slave_behind_its_master_never_moves_a_consumer(
        pair: tuple[BrokerHarness, BrokerHarness]) -> None:
    """An offset the slave's queue does not reach is PULL_NOT_FOUND with the offset kept (the
    master may hold it), not OFFSET_MOVED as on a master."""
    master, slave = pair
    assert master.send("Behind", b"one", queue_id=0).code == ResponseCode.SUCCESS
    slave.wait_dispatched()
    on_master, _ = master.pull("Behind", 0, 5)
    assert on_master.code == ResponseCode.PULL_OFFSET_MOVED
    on_slave, _ = slave.pull("Behind", 0, 5)
    assert on_slave.code == ResponseCode.PULL_NOT_FOUND
    assert on_slave.ext_fields["nextBeginOffset"] == "5"


def test_the_slave_copies_the_masters_tables(pair: tuple[BrokerHarness, BrokerHarness]) -> None:
    master, slave = pair
    topic = CreateTopicRequestHeader("Copied", "TBW102", 3, 3).to_ext_fields()
    assert master.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, topic).code == ResponseCode.SUCCESS
    assert master.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": "copied-group", "topic": "Copied", "queueId": "1",
        "commitOffset": "7"}).code == ResponseCode.SUCCESS
    group = json.dumps({"groupName": "copied-group", "retryMaxTimes": 3}).encode()
    assert master.invoke(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, group).code == \
        ResponseCode.SUCCESS
    master.on_loop(lambda: master.broker.schedule.offsets.update({2: 5}))
    wait_for(lambda: slave.broker.topics.get("Copied") is not None, "topics copied")
    wait_for(lambda: slave.broker.offsets.query("copied-group", "Copied", 1) == 7, "offsets copied")
    wait_for(lambda: (g := slave.broker.sub_groups.table.get("copied-group")) is not None
             and g.retry_max_times == 3, "groups copied")
    wait_for(lambda: slave.broker.schedule.offsets.get(2) == 5, "delay offsets copied")
    assert slave.broker.topics.get("Copied").read_queue_nums == 3  # type: ignore[union-attr]
    # The slave keeps its copies in its own metadata store (offsets written behind: saved here).
    assert slave.broker.offsets.persist()
    with MetadataDB(slave.broker.metadata.path, read_only=True) as db:
        stored = export_tables(db)
    assert stored["topics"]["topicConfigTable"]["Copied"]["readQueueNums"] == 3
    assert stored["consumerOffsets"]["offsetTable"]["Copied@copied-group"] == {"1": 7}
    assert stored["subscriptionGroups"]["subscriptionGroupTable"]["copied-group"][
        "retryMaxTimes"] == 3
    assert stored["delayOffsets"]["offsetTable"]["2"] == 5
    assert slave.broker.metadata.path != master.broker.metadata.path


def test_a_slave_copies_a_topic_table_larger_than_a_page(tmp_path: Path, ns: Namesrv) -> None:
    """A table of many pages (split_metadata_size set small: the same code path as 2,000 topics
    a page at 110,000 topics, where the whole table passes the 16 MiB frame) reaches the slave
    whole, a topic deleted and one added after the copy reach it too; an older peer's request
    still gets the whole table, and the CLI's topic list (through the name server) lists all."""
    master = BrokerHarness(master_config(tmp_path, ns, split_metadata_size=5))
    slave = BrokerHarness(slave_config(tmp_path, ns, split_metadata_size=5))

    def made_on_master(change: Callable[[TopicConfigManager], object]) -> dict[str, TopicConfig]:
        # Straight into the master's table: no metadata record, so only the full copy brings
        # it to the slave.
        return master.on_loop(lambda: (change(master.broker.topics),
                                       dict(master.broker.topics.table))[1])

    def copied(want: dict[str, TopicConfig]) -> bool:
        topics = slave.broker.topics
        return topics.data_version == master.broker.topics.data_version and topics.table == want

    try:
        wait_for(lambda: connected(master), "the slave connects to its master")
        want = made_on_master(lambda t: [t.update(TopicConfig(f"Paged{i:03d}", 2, 2))
                                         for i in range(40)])
        assert len(want) > 8 * 5
        pages_before = slave.broker.replication.sync.topic_pages
        wait_for(lambda: copied(want), "the table copied in pages")
        assert slave.broker.replication.sync.topic_pages - pages_before >= len(want) // 5
        want = made_on_master(lambda t: (t.delete("Paged007"), t.update(TopicConfig("A0", 1, 1))))
        wait_for(lambda: copied(want), "the changed table copied again")
        assert "Paged007" not in slave.broker.topics.table
        whole = master.invoke(RequestCode.GET_ALL_TOPIC_CONFIG)  # no fields: an older peer
        assert whole.code == ResponseCode.SUCCESS
        assert TopicConfigSerializeWrapper.from_json(bytes(whole.body)).topic_config_table == want
        assert whole.ext_fields["totalTopicNum"] == str(len(want))
        wait_for(lambda: "Paged039" in CliRunner().invoke(
            cli, ["topic", "list", "--namesrv", ns.address]).output, "the name server's list")
        listed = CliRunner().invoke(cli, ["topic", "list", "--namesrv", ns.address, "--all",
                                          "--format", "json"])
        assert listed.exit_code == 0, listed.output
        assert {f"Paged{i:03d}" for i in range(40)} - {"Paged007"} <= set(json.loads(listed.output))
    finally:
        slave.close()
        master.close()


def test_the_route_lists_the_master_and_the_slave(
        pair: tuple[BrokerHarness, BrokerHarness], ns: Namesrv, tmp_path: Path) -> None:
    master, slave = pair
    assert master.send("Routed", b"x").code == ResponseCode.SUCCESS
    fields = GetRouteInfoRequestHeader("Routed").to_ext_fields()
    resp = master.call(master.client.invoke(ns.address, _request(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, fields), 5))
    route = TopicRouteData.from_json(bytes(resp.body))
    assert route.broker_datas[0].broker_addrs == {0: master.addr, 1: slave.addr}
    assert slave.broker.replication.master_addr == master.addr
    assert slave.broker.replication.master_ha_address().endswith(f":{ha_port(master)}")
    # The identity check: a second slave with id 1 at another address is refused.
    with pytest.raises(Exception, match="id 1 is held by"):
        BrokerHarness(slave_config(tmp_path / "twin", ns))


def _request(code: int, fields: dict[str, str]) -> object:
    from orbitmq.protocol.command import RemotingCommand

    return RemotingCommand.request(code, fields)


def test_a_slave_that_was_down_catches_up_and_a_restarted_master_resumes(
        tmp_path: Path, ns: Namesrv) -> None:
    master = BrokerHarness(master_config(tmp_path, ns, broker_role=BrokerRole.ASYNC_MASTER))
    slave = BrokerHarness(slave_config(tmp_path, ns))
    try:
        wait_for(lambda: connected(master), "the slave connects")
        for i in range(50):
            assert master.send("CatchUp", b"before %d" % i).code == ResponseCode.SUCCESS
        wait_for(lambda: caught_up(master, slave), "first copy")
        slave.close()
        for i in range(1500):  # several segments of backlog while the slave is down
            assert master.send("CatchUp", b"down %d " % i * 20).code == ResponseCode.SUCCESS
        slave = BrokerHarness(slave.config)
        wait_for(lambda: caught_up(master, slave), "catch-up after downtime", 60)
        assert commit_log_bytes(slave) == commit_log_bytes(master)
        master = restart_on_same_ports(master)
        wait_for(lambda: connected(master), "the slave reconnects to the restarted master")
        for i in range(20):
            assert master.send("CatchUp", b"after %d" % i).code == ResponseCode.SUCCESS
        wait_for(lambda: caught_up(master, slave), "replication after the master's restart")
        assert commit_log_bytes(slave) == commit_log_bytes(master)
    finally:
        slave.close()
        master.close()


def test_a_slave_whose_log_diverged_refuses_until_an_operator_truncates_it(
        tmp_path: Path, ns: Namesrv) -> None:
    master = BrokerHarness(master_config(tmp_path, ns, broker_role=BrokerRole.ASYNC_MASTER))
    slave = BrokerHarness(slave_config(tmp_path, ns))
    try:
        for i in range(20):
            assert master.send("Diverge", b"common %d" % i).code == ResponseCode.SUCCESS
        wait_for(lambda: caught_up(master, slave), "common history")
        common_end = master.broker.store.max_physical_offset()
        slave_cfg = slave.config
        slave.close()
        # Promoted by hand: the slave's store takes writes of its own as a master.
        promoted = BrokerHarness(slave_cfg.__class__(**{
            **{f: getattr(slave_cfg, f) for f in slave_cfg.__dataclass_fields__},
            "broker_role": BrokerRole.ASYNC_MASTER, "broker_id": 0, "namesrv_addr": "",
            "broker_name": "promoted"}))
        for i in range(5):
            assert promoted.send("Diverge", b"promoted %d" % i).code == ResponseCode.SUCCESS
        own_end = promoted.broker.store.max_physical_offset()
        promoted.close()
        for i in range(8):  # meanwhile the master takes other messages at the same offsets
            assert master.send("Diverge", b"master only %d" % i).code == ResponseCode.SUCCESS
        slave = BrokerHarness(slave_cfg)  # demoted: a slave again
        refused = wait_for(lambda: slave.broker.replication.client.refused, "the refusal")
        assert "holds bytes its master" in refused and "orbitmq store truncate" in refused
        info = slave.on_loop(slave.broker.replication.runtime_info)
        assert info["haRefused"] == refused
        assert slave.broker.store.max_physical_offset() == own_end  # nothing mixed in
        slave.close()
        store_flags = ["--store", slave_cfg.store.store_path, "--mapped-file-size-commitlog",
                       str(slave_cfg.store.mapped_file_size_commitlog),
                       "--mapped-file-size-consume-queue",
                       str(slave_cfg.store.mapped_file_size_consume_queue),
                       "--max-hash-slot-num", str(slave_cfg.store.max_hash_slot_num),
                       "--max-index-num", str(slave_cfg.store.max_index_num)]
        out = CliRunner().invoke(cli, ["store", "truncate", "--offset", str(common_end), "--yes",
                                       "--format", "json", *store_flags])
        assert out.exit_code == 0, out.output
        report = json.loads(out.output)
        assert report["cut"] == common_end and report["messages_dropped"] == 5
        slave = BrokerHarness(slave_cfg)
        wait_for(lambda: caught_up(master, slave), "replication after the truncation")
        assert commit_log_bytes(slave) == commit_log_bytes(master)
    finally:
        slave.close()
        master.close()


def test_async_master_lag_shows_in_cluster_list_and_the_slave_converges(
        tmp_path: Path, ns: Namesrv) -> None:
    master = BrokerHarness(master_config(tmp_path, ns, broker_role=BrokerRole.ASYNC_MASTER))
    slave = BrokerHarness(slave_config(tmp_path, ns))
    try:
        client = slave.broker.replication.client
        wait_for(lambda: connected(master) and client.connected, "the slave connects")
        slave.on_loop(lambda: client.link.transport.pause_reading())  # a slave that falls behind
        for _ in range(300):
            assert master.send("Lagging", b"x" * 500).code == ResponseCode.SUCCESS
        time.sleep(0.1)  # the oldest unreplicated message ages (lag in seconds > 0)
        out = CliRunner().invoke(cli, ["cluster", "list", "--namesrv", ns.address,
                                       "--format", "json"])
        assert out.exit_code == 0, out.output
        rows = {r["broker_id"]: r for r in map(json.loads, out.output.splitlines())}
        assert rows[0]["role"] == "ASYNC_MASTER" and rows[1]["role"] == "SLAVE"
        assert rows[1]["addr"] == slave.addr and rows[1]["lag_bytes"] > 100_000
        assert rows[1]["lag_seconds"] >= 0.1 and "behind" in rows[1]["state"]
        text = CliRunner().invoke(cli, ["cluster", "list", "--namesrv", ns.address])
        assert "LAG_BYTES" in text.output and "SLAVE" in text.output
        slave.on_loop(lambda: client.link.transport.resume_reading())
        wait_for(lambda: caught_up(master, slave), "the slave converges")
        out = CliRunner().invoke(cli, ["cluster", "list", "--namesrv", ns.address,
                                       "--format", "json"])
        rows = {r["broker_id"]: r for r in map(json.loads, out.output.splitlines())}
        assert rows[1]["lag_bytes"] == 0 and rows[1]["state"] == "in sync"
    finally:
        slave.close()
        master.close()


def test_a_slave_started_before_its_master_finds_it_without_waiting_a_whole_period(
        tmp_path: Path, ns: Namesrv) -> None:
    """A slave whose registration is answered without a master address (it started first, or
    its master is gone) registers again soon. It used to wait register_broker_interval_ms
    (30 s by default; 60 s here, the most allowed) before it learned where to replicate from."""
    slow = {"register_broker_interval_ms": 60_000}
    slave = BrokerHarness(slave_config(tmp_path, ns, **slow))
    master = BrokerHarness(master_config(tmp_path, ns, **slow))
    try:
        wait_for(lambda: connected(master), "the slave finds its master", 40)
        r = master.send("Early", b"replicated")
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    finally:
        slave.close()
        master.close()


def test_lookups_by_key_read_from_the_slave_once_the_master_is_gone(
        tmp_path: Path, ns: Namesrv) -> None:
    """Admin.query_messages (``orbitmq message query``) asks a broker set's slave when its
    master is not in the route. It used to ask masters only: nothing found after a master died."""
    from orbitmq import Admin

    master: BrokerHarness | None = BrokerHarness(master_config(tmp_path, ns))
    slave = BrokerHarness(slave_config(tmp_path, ns))
    try:
        assert master is not None
        wait_for(lambda: connected(master), "the slave connects")
        sent = master.send("Lookup", b"find me", keys="order-9")
        assert sent.code == ResponseCode.SUCCESS
        wait_for(lambda: caught_up(master, slave), "the slave holds the message")
        wait_for(lambda: slave.broker.topics.get("Lookup") is not None, "the topic copied")
        master.close()
        master = None
        with Admin(ns.address) as admin:
            wait_for(lambda: list(admin.topic_route("Lookup").broker_datas[0].broker_addrs) == [1],
                     "the route lists the slave alone")
            found = admin.query_messages("Lookup", "order-9")
        assert [(m.body, m.keys) for m in found] == [(b"find me", ["order-9"])]
    finally:
        slave.close()
        if master is not None:
            master.close()


def test_a_slave_of_an_empty_master_is_in_sync(pair: tuple[BrokerHarness, BrokerHarness],
                                               ns: Namesrv) -> None:
    """Nothing to stream is nothing to lack: it used to show "behind" (with 0 bytes of lag) and
    count no in-sync slave until the master took its first message."""
    master, _slave = pair
    wait_for(lambda: master.on_loop(master.broker.replication.ha_status)["inSyncSlaveNums"] == 1,
             "the slave counted in sync")
    out = CliRunner().invoke(cli, ["cluster", "list", "--namesrv", ns.address, "--format", "json"])
    rows = {r["broker_id"]: r for r in map(json.loads, out.output.splitlines())}
    assert (rows[1]["lag_bytes"], rows[1]["state"]) == (0, "in sync")


def test_an_embedded_broker_restarts_on_its_port_when_the_next_port_is_taken(
        tmp_path: Path) -> None:
    """A master listens on an HA port, by default its own port + 1; restarting a test broker on
    its port failed (address in use) whenever that next port was taken, as an outgoing
    connection's port often is (tests restarting brokers were flaky). The test harness puts
    the HA port on a free one, like every other port."""
    import dataclasses
    import socket

    from orbitmq.testing import EmbeddedCluster

    with EmbeddedCluster(tmp_path) as cluster:
        port = int(cluster.brokers[0].address.rpartition(":")[2])
        config = dataclasses.replace(cluster.broker_config(0), listen_port=port)
        cluster.stop_broker(0)
        with socket.socket() as taken:
            try:
                taken.bind(("127.0.0.1", port + 1))
                taken.listen()
            except OSError:
                pass  # taken already: the same case
            cluster.start_broker(0, config)
        assert cluster.brokers[0].address.endswith(f":{port}")


@pytest.mark.parametrize("role", [BrokerRole.SYNC_MASTER, BrokerRole.ASYNC_MASTER])
def test_a_slave_applies_the_masters_metadata_records_as_it_dispatches_them(
        tmp_path: Path, ns: Namesrv, role: BrokerRole) -> None:
    """With the full copy pushed out (every 10 min), a topic, an offset and a group reach the
    slave through the metadata log (broker/metadata_log.py): once answered under SYNC_MASTER
    the record is on the slave; ASYNC_MASTER answers at once and the slave follows."""
    master = BrokerHarness(master_config(tmp_path, ns, broker_role=role))
    slave = BrokerHarness(slave_config(tmp_path, ns, slave_sync_interval_ms=600_000))
    try:
        wait_for(lambda: connected(master), "the slave connects to its master")
        wait_for(lambda: slave.broker.replication.sync.rounds >= 1,
                 "the slave's first full copy (0.5 s after its start) is over", 10)
        topic = CreateTopicRequestHeader("Logged", "TBW102", 2, 2).to_ext_fields()
        assert master.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, topic).code == \
            ResponseCode.SUCCESS
        assert master.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": "logged-group", "topic": "Logged", "queueId": "1",
            "commitOffset": "11"}).code == ResponseCode.SUCCESS
        group = json.dumps({"groupName": "logged-group", "retryMaxTimes": 5}).encode()
        assert master.invoke(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, group).code \
            == ResponseCode.SUCCESS
        wait_for(lambda: slave.broker.topics.get("Logged") is not None, "topic applied", 10)
        wait_for(lambda: slave.broker.offsets.query("logged-group", "Logged", 1) == 11,
                 "offset applied", 10)
        wait_for(lambda: (g := slave.broker.sub_groups.table.get("logged-group")) is not None
                 and g.retry_max_times == 5, "group applied", 10)
        wait_for(lambda: slave.broker.metadata_log.records_applied == 3, "three records", 10)
        assert slave.broker.topics.data_version == master.broker.topics.data_version
        assert slave.broker.metadata_log.records_refused == 0
        assert master.invoke(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Logged"}).code == \
            ResponseCode.SUCCESS
        wait_for(lambda: slave.broker.topics.get("Logged") is None, "delete applied", 10)
    finally:
        slave.close()
        master.close()


def test_a_sync_master_without_its_slave_says_a_change_is_not_on_a_slave(
        tmp_path: Path, ns: Namesrv) -> None:
    """The change's record waits for the slave as a send does: with none connected the answer
    is SLAVE_NOT_AVAILABLE, the remark saying the change stands on the master (and it does)."""
    master = BrokerHarness(master_config(tmp_path, ns))
    try:
        topic = CreateTopicRequestHeader("Alone", "TBW102", 1, 1).to_ext_fields()
        answer = master.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, topic)
        assert answer.code == ResponseCode.SLAVE_NOT_AVAILABLE, (answer.code, answer.remark)
        assert "made on the master" in (answer.remark or "")
        assert master.broker.topics.get("Alone") is not None
        offset = master.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": "alone", "topic": "Alone", "queueId": "0", "commitOffset": "3"})
        assert offset.code == ResponseCode.SLAVE_NOT_AVAILABLE
        assert master.broker.offsets.query("alone", "Alone", 0) == 3
    finally:
        master.close()
