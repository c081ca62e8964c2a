"""The metadata store seen from outside: EXPORT_ROCKSDB_CONFIG_TO_JSON (355) on a running broker
(a Super user's request when authorization is on), ``orbitmq store export-metadata`` beside a
running broker and after it stopped, and a broker started on the JSON tables of the tree before
the metadata store (tests/data/legacy_tables); no export holds a user's secret, and a broker
started on the users file of the tree before (tests/data/legacy_auth) serves its users."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from pathlib import Path

import orjson
import pytest
from auth_support import ALICE, ROOT, auth_cluster
from click.testing import CliRunner
from test_broker_support import BrokerHarness, broker_config

from orbitmq import Admin, Credentials
from orbitmq.broker.controller import BrokerController
from orbitmq.cli.main import cli
from orbitmq.errors import StoreError
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import CreateTopicRequestHeader
from orbitmq.protocol.topics import TIMER_TOPIC
from orbitmq.store.metadata_db import USERS
from orbitmq.testing import EmbeddedCluster
from orbitmq.transport import RemotingClient

LEGACY = Path(__file__).resolve().parents[1] / "data" / "legacy_tables" / "config"
LEGACY_AUTH = Path(__file__).resolve().parents[1] / "data" / "legacy_auth" / "auth.json"


def _create(h: BrokerHarness, topic: str) -> None:
    fields = CreateTopicRequestHeader(topic, read_queue_nums=2, write_queue_nums=2).to_ext_fields()
    assert h.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, fields).code == ResponseCode.SUCCESS


def _commit(h: BrokerHarness, group: str, topic: str, qid: int, offset: int) -> None:
    r = h.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": group, "topic": topic, "queueId": str(qid), "commitOffset": str(offset)})
    assert r.code == ResponseCode.SUCCESS, r.remark


def _export_cli(store: Path, *tables: str) -> dict:
    args = ["store", "export-metadata", "--store", str(store)]
    for t in tables:
        args += ["--table", t]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_code_355_and_the_cli_print_the_tables(tmp_path: Path) -> None:
    h = BrokerHarness(broker_config(tmp_path))
    try:
        _create(h, "Exported")
        _commit(h, "exp-group", "Exported", 1, 17)
        h.broker.offsets.commit("behind", "Exported", 0, 5)  # written behind: saved by 355 first
        r = h.invoke(RequestCode.EXPORT_ROCKSDB_CONFIG_TO_JSON)
        assert r.code == ResponseCode.SUCCESS, r.remark
        body = orjson.loads(r.body)
        assert set(body) == {"topics", "subscriptionGroups", "consumerOffsets", "delayOffsets"}
        assert body["topics"]["topicConfigTable"]["Exported"]["writeQueueNums"] == 2
        assert body["topics"]["dataVersion"]["counter"] == h.broker.topics.data_version.counter
        assert body["consumerOffsets"]["offsetTable"]["Exported@exp-group"] == {"1": 17}
        assert body["consumerOffsets"]["offsetTable"]["Exported@behind"] == {"0": 5}
        r = h.invoke(RequestCode.EXPORT_ROCKSDB_CONFIG_TO_JSON,
                     {"configType": "topics;consumerOffsets"})
        assert sorted(orjson.loads(r.body)) == ["consumerOffsets", "topics"]
        r = h.invoke(RequestCode.EXPORT_ROCKSDB_CONFIG_TO_JSON, {"configType": "users"})
        assert r.code == ResponseCode.INVALID_PARAMETER and "users" in r.remark
        # The CLI beside the running broker: the same rows.
        printed = _export_cli(tmp_path, "topics", "consumerOffsets")
        assert printed["topics"]["topicConfigTable"] == body["topics"]["topicConfigTable"]
        assert printed["consumerOffsets"] == body["consumerOffsets"]
    finally:
        h.close()
    # After a clean stop (the log checkpointed into the database file): the same again (and
    # the transaction checker's progress, saved at stop).
    after = _export_cli(tmp_path)["consumerOffsets"]["offsetTable"]
    assert {k: v for k, v in after.items() if k.startswith("Exported@")} == \
        body["consumerOffsets"]["offsetTable"]


def test_export_metadata_without_a_store_says_so(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["store", "export-metadata", "--store", str(tmp_path)])
    assert result.exit_code == 1
    assert "no metadata store" in result.output


def test_code_355_is_for_a_super_user_only(tmp_path: Path) -> None:
    with auth_cluster(tmp_path) as cluster:
        broker = cluster.brokers[0].address

        async def ask(credentials: object) -> RemotingCommand:
            client = RemotingClient(credentials=credentials)  # type: ignore[arg-type]
            try:
                return await client.invoke(
                    broker, RemotingCommand.request(RequestCode.EXPORT_ROCKSDB_CONFIG_TO_JSON), 5.0)
            finally:
                await client.close()

        denied = cluster.call(ask(ALICE))
        assert denied.code == ResponseCode.NO_PERMISSION, (denied.code, denied.remark)
        allowed = cluster.call(ask(ROOT))
        assert allowed.code == ResponseCode.SUCCESS, allowed.remark
        assert "AliceOrders" in orjson.loads(allowed.body)["topics"]["topicConfigTable"]
        anonymous = cluster.call(ask(None))
        assert anonymous.code != ResponseCode.SUCCESS


def test_a_broker_starts_on_the_tables_of_the_tree_before(tmp_path: Path) -> None:
    """A real broker on a store whose config/ holds what the broker before the metadata store
    wrote: every topic, group, consumer offset and delay offset is served after the import, and
    a restart does not import the renamed files again."""
    shutil.copytree(LEGACY, tmp_path / "config")
    legacy = {p.name: json.loads(p.read_text()) for p in LEGACY.glob("*.json")}
    h = BrokerHarness(broker_config(tmp_path))
    try:
        for name, tc in legacy["topics.json"]["topicConfigTable"].items():
            if name == TIMER_TOPIC:  # a master's timer takes queue 1 for its recall markers
                tc = {**tc, "readQueueNums": 2, "writeQueueNums": 2}
            assert h.broker.topics.get(name).to_dict() == tc, name
        for name, cfg in legacy["subscriptionGroup.json"]["subscriptionGroupTable"].items():
            assert h.broker.sub_groups.table[name].to_dict() == cfg, name
        for key, queues in legacy["consumerOffset.json"]["offsetTable"].items():
            topic, group = key.split("@")
            for qid, offset in queues.items():
                r = h.invoke(RequestCode.QUERY_CONSUMER_OFFSET, {
                    "consumerGroup": group, "topic": topic, "queueId": qid})
                assert int(r.ext_fields["offset"]) == offset, (key, qid)
        assert sorted(p.name for p in (tmp_path / "config").glob("*.migrated")) == [
            "consumerOffset.json.migrated", "delayOffset.json.migrated",
            "subscriptionGroup.json.migrated", "topics.json.migrated"]
        assert h.invoke(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Legacy-03"}).code == 0
        h.restart()
        assert h.broker.topics.get("Legacy-03") is None  # not imported again
        assert h.broker.topics.get("Legacy-04") is not None
    finally:
        h.close()


def test_the_delay_offsets_of_the_tree_before_are_imported(tmp_path: Path) -> None:
    """Read by the tables' load alone: a running schedule service would clamp them to its
    (empty) queues at once."""
    shutil.copytree(LEGACY, tmp_path / "config")
    want = json.loads((LEGACY / "delayOffset.json").read_text())["offsetTable"]
    broker = BrokerController(broker_config(tmp_path, grpc_listen_port=-1))
    broker.metadata.open()
    try:
        broker.schedule.load()
        assert {str(k): v for k, v in broker.schedule.offsets.items()} == want
        assert (tmp_path / "config" / "delayOffset.json.migrated").exists()
    finally:
        broker.metadata.close()


def test_no_export_holds_a_users_secret(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """The users and their secret keys are in the metadata store: neither code 355 nor the
    CLI's export prints them, and no log line holds a secret."""
    caplog.set_level(logging.DEBUG)
    secrets = [ROOT.secret_key, ALICE.secret_key]
    with auth_cluster(tmp_path) as cluster:
        broker = cluster.brokers[0]
        rows = broker.metadata.count(USERS)  # the users really are in the store exported
        assert rows >= 2

        async def ask(fields: dict[str, str] | None = None) -> RemotingCommand:
            client = RemotingClient(credentials=ROOT)
            try:
                return await client.invoke(broker.address, RemotingCommand.request(
                    RequestCode.EXPORT_ROCKSDB_CONFIG_TO_JSON, fields or {}), 5.0)
            finally:
                await client.close()

        answer = cluster.call(ask())
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert set(orjson.loads(answer.body)) == {"topics", "subscriptionGroups",
                                                  "consumerOffsets", "delayOffsets"}
        for config_type in ("users", "acls"):
            refused = cluster.call(ask({"configType": config_type}))
            assert refused.code == ResponseCode.INVALID_PARAMETER, refused.remark
        printed = CliRunner().invoke(cli, ["store", "export-metadata", "--store",
                                           broker.config.store.store_path])
        assert printed.exit_code == 0, printed.output
        for text in (answer.body.decode(), printed.output, caplog.text):
            for secret in secrets:
                assert secret not in text
        assert ALICE.access_key not in printed.output  # no user at all, not even its name


def test_a_broker_starts_on_the_users_file_of_the_tree_before(tmp_path: Path) -> None:
    """A broker with authentication on, on a store whose config/ holds the auth.json the broker
    before wrote (tests/data/legacy_auth): its users sign requests, its Super user lists them;
    the file is renamed aside and not imported again after a restart."""
    config_dir = tmp_path / "broker-a" / "config"
    config_dir.mkdir(parents=True)
    shutil.copyfile(LEGACY_AUTH, config_dir / "auth.json")
    legacy = json.loads(LEGACY_AUTH.read_text())
    init = json.dumps({"username": ROOT.access_key, "password": ROOT.secret_key})
    admin_of = Credentials("legacy-super", "legacy-super-secret")
    with EmbeddedCluster(tmp_path, authentication_enabled=True, authorization_enabled=True,
                         init_authentication_user=init) as cluster:
        broker = cluster.brokers[0]
        with Admin(cluster.namesrv, credentials=admin_of) as admin:
            names = [u.username for u in admin.list_users(broker=broker.address)]
            assert names == [u["username"] for u in legacy["users"]]
            acl = admin.get_acl("User:legacy-user-2", broker=broker.address)
            assert acl.to_dict() == legacy["acls"][1]
            admin.delete_user("legacy-user-4", broker=broker.address)
        assert not (config_dir / "auth.json").exists()
        assert (config_dir / "auth.json.migrated").exists()
        cluster.call(broker.stop())
        cluster.call(broker.start())
        with Admin(cluster.namesrv, credentials=admin_of) as admin:
            names = [u.username for u in admin.list_users(broker=broker.address)]
        assert "legacy-user-4" not in names and "legacy-user-5" in names


def test_a_bad_users_file_of_the_tree_before_refuses_the_start_naming_it(tmp_path: Path) -> None:
    """A broker (its own, and standalone's, which reads the users before its name server starts)
    does not start on an auth.json it cannot import: starting without the users would lock
    everyone out or re-create the init user; the file stays for the next attempt."""
    bad = tmp_path / "config" / "auth.json"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b'{"users": [{"username": "no password"}]}')
    broker = BrokerController(broker_config(tmp_path, grpc_listen_port=-1))
    with pytest.raises(StoreError, match=str(bad)):
        asyncio.run(broker.start())
    result = CliRunner().invoke(cli, ["standalone", "--store", str(tmp_path), "--namesrv-port",
                                      "0", "--broker-port", "0", "--console-port", "0",
                                      "--grpc-port", "-1"])
    assert result.exit_code == 1, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("Error: cannot start:") and str(bad) in line
    assert bad.exists() and not (tmp_path / "config" / "auth.json.migrated").exists()
