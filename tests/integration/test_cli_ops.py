"""The operations commands (mqadmin parity, issue 17) against an embedded cluster: text and
``--format json`` output, one-line errors with a non-zero exit."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result
from test_cli import assert_one_line_error

from orbitmq import Message, Producer, PullConsumer
from orbitmq.cli.main import cli
from orbitmq.client import Admin
from orbitmq.testing import EmbeddedCluster

TOPIC, GROUP, SENT = "CliOpsTopic", "cli-ops-group", 5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("cli-ops")) as c:
        with Admin(c.namesrv) as admin:
            admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
        with Producer("cli-ops-producer", namesrv=c.namesrv) as producer:
            for i in range(SENT):
                producer.send(Message(TOPIC, f"body-{i}".encode(), tags="T", keys=[f"k{i}"]))
        with PullConsumer(GROUP, namesrv=c.namesrv) as consumer:
            mq = consumer.fetch_queues(TOPIC)[0]
            got = consumer.pull(mq, 0, max_nums=3).messages
            consumer.update_offset(mq, got[-1].queue_offset + 1)
            consumer.persist_offsets()
        yield c


def run(cluster: EmbeddedCluster, *args: str, ok: bool = True) -> Result:
    result = CliRunner().invoke(cli, [*args, "--namesrv", cluster.namesrv])
    if ok:
        assert result.exit_code == 0, (args, result.output, result.exception)
    return result


def jsons(result: Result) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def test_cluster_list_and_topics(cluster: EmbeddedCluster) -> None:
    text = run(cluster, "cluster", "list").stdout
    assert "DefaultCluster" in text and "broker-a" in text and "IN_TPS" in text
    [row] = jsons(run(cluster, "cluster", "list", "--format", "json"))
    assert row["broker"] == "broker-a" and row["broker_id"] == 0 and row["in_today"] >= SENT
    assert TOPIC in run(cluster, "cluster", "topics", "-c", "DefaultCluster").stdout.split()
    assert "NoSuch" in assert_one_line_error(run(cluster, "cluster", "topics", "-c", "NoSuch",
                                                  ok=False))


def test_broker_status_and_config(cluster: EmbeddedCluster) -> None:
    status = run(cluster, "broker", "status").stdout
    assert "putTps" in status and "msgPutTotalTodayNow" in status
    [doc] = jsons(run(cluster, "broker", "status", "--broker", "broker-a", "--format", "json"))
    assert int(doc["status"]["msgPutTotalTodayNow"]) >= SENT
    got = run(cluster, "broker", "config", "get", "-k", "deleteWhen").stdout
    assert "deleteWhen=04" in got
    # A change names its brokers (mqadmin's -b / -c): no silent "every broker" (issue 36).
    line = assert_one_line_error(run(cluster, "broker", "config", "set", "-k", "deleteWhen",
                                     "-v", "03;04", ok=False))
    assert "--broker" in line and "--cluster" in line
    [doc] = jsons(run(cluster, "broker", "config", "get", "-k", "deleteWhen", "--format", "json"))
    assert doc["config"] == {"deleteWhen": "04"}
    run(cluster, "broker", "config", "set", "-c", "DefaultCluster", "-k", "deleteWhen",
        "-v", "03;04")
    [doc] = jsons(run(cluster, "broker", "config", "get", "-k", "deleteWhen", "--format", "json"))
    assert doc["config"] == {"deleteWhen": "03;04"}
    line = assert_one_line_error(run(cluster, "broker", "config", "set", "-b", "broker-a",
                                     "-k", "listenPort", "-v", "1", ok=False))
    assert "INVALID_PARAMETER" in line and "restart" in line
    line = assert_one_line_error(run(cluster, "broker", "--port", "1", "status", ok=False))
    assert "--port" in line or "--listen-port" in line
    rows = run(cluster, "broker", "consume-stats").stdout
    assert GROUP in rows and TOPIC in rows


def test_group_connection_delete_clone_and_time_span(cluster: EmbeddedCluster) -> None:
    line = assert_one_line_error(run(cluster, "group", "connection", "-g", GROUP, ok=False))
    assert "no client" in line
    run(cluster, "group", "update", "-g", GROUP, "--retry-max-times", "5")
    [cfg] = jsons(run(cluster, "group", "config", "-g", GROUP, "--format", "json"))
    assert cfg["broker"] == "broker-a" and cfg["config"]["retryMaxTimes"] == 5
    assert "retryMaxTimes=5" in run(cluster, "group", "config", "-g", GROUP).stdout
    run(cluster, "group", "clone-offset", "--src", GROUP, "--dest", "cli-ops-clone")
    status = jsons(run(cluster, "group", "status", "-g", "cli-ops-clone", "--format", "json"))
    assert status[0]["queues"][0]["consumer_offset"] == 3
    [doc] = jsons(run(cluster, "group", "delete", "-g", "cli-ops-clone", "--format", "json"))
    assert doc["brokers"] == ["broker-a"]
    assert_one_line_error(run(cluster, "group", "status", "-g", "cli-ops-clone", ok=False))
    assert "no committed offsets" in assert_one_line_error(
        run(cluster, "group", "clone-offset", "--src", "nobody", "--dest", "x", ok=False))
    spans = jsons(run(cluster, "group", "time-span", "-g", GROUP, "-t", TOPIC, "--format", "json"))
    assert spans[0]["min_timestamp"] <= spans[0]["consume_timestamp"] <= spans[0]["max_timestamp"]


def test_producer_and_consumer_commands(cluster: EmbeddedCluster) -> None:
    with Producer("cli-live-producer", namesrv=cluster.namesrv) as producer:
        producer.send(Message("CliLiveTopic", b"live"))
        [conn] = jsons(run(cluster, "producer", "connection", "-g", "cli-live-producer",
                           "--format", "json"))
        assert conn["client_id"] == producer.client_id and conn["language"] == "PYTHON"
    assert "no producer" in assert_one_line_error(
        run(cluster, "producer", "connection", "-g", "nobody", ok=False))
    assert "no client" in assert_one_line_error(
        run(cluster, "consumer", "status", "-g", GROUP, ok=False))


def test_stats_all_and_topic_commands(cluster: EmbeddedCluster) -> None:
    rows = jsons(run(cluster, "stats", "all", "-t", TOPIC, "--format", "json"))
    mine = next(r for r in rows if r["group"] == GROUP)
    assert (mine["in_24h"], mine["out_24h"], mine["accumulation"]) == (SENT, 3, 2)
    assert "NO_CONSUMER" not in run(cluster, "stats", "all", "-t", TOPIC).stdout
    assert run(cluster, "topic", "cluster-list", "-t", TOPIC).stdout.split() == ["DefaultCluster"]
    assert GROUP in run(cluster, "topic", "consumer-groups", "-t", TOPIC).stdout.split()
    [view] = jsons(run(cluster, "topic", "queue-entries", "-t", TOPIC, "-b", "broker-a",
                       "-q", "0", "--format", "json"))
    assert view["max_index"] == SENT
    assert [e["index"] for e in view["entries"]][:3] == [0, 1, 2]


def test_message_print_and_query_by_offset(cluster: EmbeddedCluster) -> None:
    lines = run(cluster, "message", "print", "-t", TOPIC, "-b", "broker-a", "-q", "0",
                "-o", "1", "--limit", "2").stdout.splitlines()
    assert [line.split(" body=")[1] for line in lines] == ["body-1", "body-2"]
    printed = jsons(run(cluster, "message", "print", "-t", TOPIC, "--format", "json"))
    assert [m["body"] for m in printed][:SENT] == [f"body-{i}" for i in range(SENT)]
    [msg] = jsons(run(cluster, "message", "query", "-t", TOPIC, "--offset", "4", "-b", "broker-a",
                      "-q", "0", "--format", "json"))
    assert msg["body"] == "body-4" and msg["queue_offset"] == 4
    assert "not found" in assert_one_line_error(run(
        cluster, "message", "query", "-t", TOPIC, "--offset", "99", "-b", "broker-a", "-q", "0",
        ok=False))
    assert_one_line_error(run(cluster, "message", "query", "-t", TOPIC, ok=False))
