"""Topic changes that used to be silent (issue 36): creating a topic that exists rewrote its
queues, and lowering the read queue count hid unconsumed messages. Against a real embedded
cluster: the SDK and the CLI (click's CliRunner, as test_cli.py); the console's forms are in
tests/console/test_console_topic_changes.py, ``broker config set``'s target in test_cli_ops.py."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from auth_support import ALICE, ROOT, auth_cluster
from click.testing import CliRunner, Result
from test_cli import assert_one_line_error

from orbitmq import Message, Producer, PullConsumer
from orbitmq.cli.main import cli
from orbitmq.client import Admin
from orbitmq.errors import ClientError, QueuesNotDrainedError, TopicExistsError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.testing import EmbeddedCluster

BROKER = "broker-a"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("topic-changes")) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster: EmbeddedCluster) -> Iterator[Admin]:
    with Admin(cluster.namesrv) as a:
        yield a


def queues_of(cluster: EmbeddedCluster, topic: str) -> tuple[int, int]:
    """(read, write) queue counts in the broker's own table (the route may lag behind)."""
    tc = cluster.brokers[0].topics.get(topic)
    assert tc is not None, topic
    return tc.read_queue_nums, tc.write_queue_nums


def send_to(cluster: EmbeddedCluster, topic: str, counts: dict[int, int]) -> None:
    """``counts[q]`` messages into queue ``q`` of ``topic``."""
    with Producer(f"{topic}-producer", namesrv=cluster.namesrv) as producer:
        for qid, n in counts.items():
            for i in range(n):
                producer.send(Message(topic, f"{qid}-{i}".encode()),
                              lambda mqs, _msg, arg: next(m for m in mqs if m.queue_id == arg),
                              qid)


def commit(cluster: EmbeddedCluster, group: str, topic: str, offsets: dict[int, int]) -> None:
    with PullConsumer(group, namesrv=cluster.namesrv) as consumer:
        for qid, offset in offsets.items():
            consumer.update_offset(MessageQueue(topic, BROKER, qid), offset)
        consumer.persist_offsets()


def run(cluster: EmbeddedCluster, *args: str, ok: bool = True) -> Result:
    result = CliRunner().invoke(cli, [*args, "--namesrv", cluster.namesrv])
    if ok:
        assert result.exit_code == 0, (args, result.output, result.exception)
    return result


# -- creation --------------------------------------------------------------------------------
def test_create_refuses_a_topic_that_exists_and_leaves_it_alone(cluster: EmbeddedCluster,
                                                                admin: Admin) -> None:
    assert admin.create_topic("TcExists", read_queue_nums=4, write_queue_nums=4) == [BROKER]
    with pytest.raises(TopicExistsError) as refused:
        admin.create_topic("TcExists", read_queue_nums=1, write_queue_nums=1)
    assert refused.value.brokers == [BROKER] and "update_topic" in str(refused.value)
    addr = cluster.brokers[0].server.address
    with pytest.raises(TopicExistsError):
        admin.create_topic_on_brokers([addr], "TcExists", read_queue_nums=1, write_queue_nums=1)
    assert queues_of(cluster, "TcExists") == (4, 4)
    # the old create-or-update, asked for by name
    assert admin.create_topic("TcExists", read_queue_nums=2, write_queue_nums=2,
                              exist_ok=True) == [BROKER]
    assert queues_of(cluster, "TcExists") == (2, 2)


def test_cli_create_of_an_auto_created_topic_says_use_update(cluster: EmbeddedCluster) -> None:
    """The RocketMQ 5 example's case: a send created the topic (4 queues), then ``topic create``
    turned it into 8."""
    send_to(cluster, "TcAuto", {0: 1})
    before = queues_of(cluster, "TcAuto")
    line = assert_one_line_error(run(cluster, "topic", "create", "-t", "TcAuto", ok=False))
    assert "TcAuto exists" in line and BROKER in line and "orbitmq topic update" in line
    assert queues_of(cluster, "TcAuto") == before
    out = run(cluster, "topic", "create", "-t", "TcNew", "--read-queue-nums", "2",
              "--write-queue-nums", "2").stdout
    assert "created on broker-a" in out and queues_of(cluster, "TcNew") == (2, 2)


# -- shrinking -------------------------------------------------------------------------------
def test_update_refuses_to_hide_unconsumed_messages_until_drained(cluster: EmbeddedCluster,
                                                                  admin: Admin) -> None:
    topic = "TcShrink"
    admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
    send_to(cluster, topic, {0: 1, 2: 2, 3: 3})
    with pytest.raises(QueuesNotDrainedError) as refused:  # no group yet: all 5 are unread
        admin.update_topic(topic, read_queue_nums=1, write_queue_nums=1)
    assert refused.value.queues == [(BROKER, 2, 2), (BROKER, 3, 3)]
    assert "hide 5 unconsumed" in str(refused.value) and "write queues first" in str(refused.value)
    with pytest.raises(QueuesNotDrainedError, match="fewer than the 4 write queues"):
        admin.update_topic(topic, read_queue_nums=2)
    assert queues_of(cluster, topic) == (4, 4)

    # RocketMQ's procedure: write queues first (nothing hidden), then drain, then read queues.
    assert admin.update_topic(topic, write_queue_nums=1) == [BROKER]
    assert queues_of(cluster, topic) == (4, 1)
    commit(cluster, "tc-fast", topic, {2: 2, 3: 3})
    commit(cluster, "tc-slow", topic, {2: 2, 3: 1})  # the slowest group counts
    with pytest.raises(QueuesNotDrainedError) as refused:
        admin.update_topic(topic, read_queue_nums=1)
    assert refused.value.queues == [(BROKER, 3, 2)]
    commit(cluster, "tc-slow", topic, {3: 3})
    assert admin.update_topic(topic, read_queue_nums=1) == [BROKER]
    assert queues_of(cluster, topic) == (1, 1)


def test_cli_update_names_the_queues_and_force_overrides(cluster: EmbeddedCluster,
                                                         admin: Admin) -> None:
    topic = "TcShrinkCli"
    admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    send_to(cluster, topic, {1: 3})
    line = assert_one_line_error(run(cluster, "topic", "update", "-t", topic,
                                     "--read-queue-nums", "1", "--write-queue-nums", "1",
                                     ok=False))
    assert "broker-a queue 1: 3" in line and "force" in line
    assert queues_of(cluster, topic) == (2, 2)
    out = run(cluster, "topic", "update", "-t", topic, "--read-queue-nums", "1",
              "--write-queue-nums", "1", "--force").stdout
    assert "updated" in out and "broker-a" in out
    assert queues_of(cluster, topic) == (1, 1)
    # growing needs no check, and what is not given stays
    run(cluster, "topic", "update", "-t", topic, "--read-queue-nums", "3")
    assert queues_of(cluster, topic) == (3, 1)
    assert "nothing to change" in run(cluster, "topic", "update", "-t", topic, ok=False).output


# -- changes that reach more than one broker ---------------------------------------------------
def test_changes_name_their_cluster_when_there_are_several(tmp_path: Path) -> None:
    """Two clusters behind one name server: a topic, group or broker setting change without a
    cluster used to land on every broker of both."""
    with EmbeddedCluster(tmp_path) as two:
        two.start_broker(1, dataclasses.replace(two.broker_config(1),
                                                broker_cluster_name="OtherCluster"))
        with Admin(two.namesrv) as admin:
            deadline = time.monotonic() + 10
            while len(admin.cluster_info().cluster_addr_table) < 2:
                assert time.monotonic() < deadline, "broker-b never registered"
                time.sleep(0.05)
            with pytest.raises(ClientError, match=r"2 clusters \(DefaultCluster, OtherCluster\)"):
                admin.create_topic("TcTwo")
            assert admin.create_topic("TcTwo", cluster="OtherCluster") == ["broker-b"]
            assert two.brokers[0].topics.get("TcTwo") is None
            with pytest.raises(ClientError, match="name the one to change"):
                admin.update_group("tc-two-group", retry_max_times=3)
            assert admin.update_group("tc-two-group", cluster="DefaultCluster",
                                      retry_max_times=3) == [BROKER]
            with pytest.raises(ClientError, match="name the one to change"):
                admin.delete_group("tc-two-group")

        line = assert_one_line_error(run(two, "topic", "create", "-t", "TcTwoCli", ok=False))
        assert "--cluster" in line and "OtherCluster" in line
        run(two, "topic", "create", "-t", "TcTwoCli", "-c", "DefaultCluster")
        assert two.brokers[1].topics.get("TcTwoCli") is None
        line = assert_one_line_error(run(two, "group", "update", "-g", "tc-two-cli",
                                         "--retry-max-times", "2", ok=False))
        assert "--cluster" in line
        run(two, "group", "update", "-g", "tc-two-cli", "--retry-max-times", "2", "-c",
            "OtherCluster")
        run(two, "broker", "config", "set", "-c", "OtherCluster", "-k", "deleteWhen", "-v", "05")
        config = {b: run(two, "broker", "config", "get", "-b", b, "-k", "deleteWhen").stdout
                  for b in ("broker-a", "broker-b")}
        assert "deleteWhen=04" in config["broker-a"] and "deleteWhen=05" in config["broker-b"]


def test_a_user_who_may_create_but_not_read_topics_is_refused_an_existing_one(
        tmp_path: Path) -> None:
    """The brokers refuse such a user the question "have you this topic?"; the route answers."""
    with auth_cluster(tmp_path, with_alice=False) as secure:
        with Admin(secure.namesrv, credentials=ROOT) as root:
            root.create_user(ALICE.access_key, ALICE.secret_key)
            root.create_acl("User:alice", ["Topic:tc-alice*"], "Create")
        with Admin(secure.namesrv, credentials=ALICE) as alice:
            assert alice.create_topic("tc-alice-1", read_queue_nums=2,
                                      write_queue_nums=2) == [BROKER]
            deadline = time.monotonic() + 10
            while "tc-alice-1" not in alice.list_topics():  # brokers tell the name server later
                assert time.monotonic() < deadline, "no route for tc-alice-1"
                time.sleep(0.05)
            with pytest.raises(TopicExistsError):
                alice.create_topic("tc-alice-1", read_queue_nums=1, write_queue_nums=1)
        assert queues_of(secure, "tc-alice-1") == (2, 2)
