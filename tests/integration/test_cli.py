"""The ``orbitmq`` command against real servers on 127.0.0.1.

The admin, send and consume commands run in-process through click's CliRunner against one
EmbeddedCluster for the module (every test uses its own topics and groups). One test runs it all
as real processes: ``orbitmq standalone``, then ``orbitmq send`` and ``orbitmq consume`` as
children, as a person would in two shells.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import click
import pytest
from click.testing import CliRunner, Result

from orbitmq.cli.common import Position, parse_timestamp
from orbitmq.cli.main import cli
from orbitmq.testing import EmbeddedCluster, standalone_process

CHILD_TIMEOUT_S = 60.0


# -- helpers ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("cli-cluster")) as c:
        yield c


class Orbitmq:
    """Runs ``orbitmq`` commands in-process against one name server."""

    def __init__(self, namesrv: str) -> None:
        self.namesrv = namesrv
        self.runner = CliRunner()

    def __call__(self, *args: str, input: str | None = None, ok: bool = True) -> Result:
        result = self.runner.invoke(cli, [*args, "--namesrv", self.namesrv], input=input)
        if ok:
            assert result.exit_code == 0, (args, result.output, result.exception)
        return result

    def consume(self, topic: str, group: str, *extra: str) -> list[str]:
        """Bodies of the consumed messages (text format)."""
        result = self("consume", "--topic", topic, "--group", group, *extra)
        return [body_of(line) for line in result.stdout.splitlines()]


@pytest.fixture
def orbitmq(cluster: EmbeddedCluster) -> Orbitmq:
    return Orbitmq(cluster.namesrv)


def body_of(line: str) -> str:
    assert " body=" in line, line
    return line.split(" body=", 1)[1]


def assert_one_line_error(result: Result) -> str:
    """A failed command: non-zero exit, exactly one line, no traceback."""
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("Error: "), lines
    assert "Traceback" not in result.output
    return lines[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def all_commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from all_commands(command, (*path, name))
        else:
            yield (*path, name)


# -- pure parsing --------------------------------------------------------------------------------
def test_parse_timestamp_forms() -> None:
    assert parse_timestamp("1700000000000") == 1_700_000_000_000
    assert parse_timestamp("now") is Position.LATEST
    assert parse_timestamp("earliest") is Position.EARLIEST
    assert parse_timestamp("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_timestamp("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    with pytest.raises(ValueError, match="not a timestamp"):
        parse_timestamp("yesterday")


# -- help and configuration ----------------------------------------------------------------------
@pytest.mark.parametrize("path", list(all_commands(cli)), ids=lambda p: " ".join(p) or "orbitmq")
def test_help_everywhere(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage: ")


def test_client_commands_take_the_name_server_from_the_environment(cluster: EmbeddedCluster) -> None:
    runner = CliRunner(env={"ORBITMQ_NAMESRV_ADDR": cluster.namesrv})
    result = runner.invoke(cli, ["topic", "list", "--all"])
    assert result.exit_code == 0, result.output
    assert "TBW102" in result.stdout.splitlines()


@pytest.mark.parametrize("var", ["NAMESRV_ADDR", "ORBITMQ_NAMESRV"])
def test_rocketmqs_and_the_deprecated_name_server_variables(cluster: EmbeddedCluster,
                                                            var: str) -> None:
    """One name per setting: ORBITMQ_NAMESRV_ADDR (as the servers and the SDK), RocketMQ's
    NAMESRV_ADDR after it; the CLI's old ORBITMQ_NAMESRV still works, with a warning."""
    result = CliRunner(env={var: cluster.namesrv, "ORBITMQ_NAMESRV_ADDR": None}).invoke(
        cli, ["topic", "list", "--all"])
    assert result.exit_code == 0, result.output
    assert "TBW102" in result.stdout.splitlines()
    assert ("deprecated" in result.stderr) is (var == "ORBITMQ_NAMESRV")


def test_standalone_print_config_is_toml_of_the_effective_settings() -> None:
    result = CliRunner().invoke(cli, ["standalone", "--print-config", "--broker-port", "12345",
                                      "--broker-name", "broker-x"])
    assert result.exit_code == 0, result.output
    config = tomllib.loads(result.stdout)
    assert config["listen_port"] == 12345
    assert config["broker_name"] == "broker-x"
    assert config["auto_create_topic"] is True
    assert "store" in config and "flush_disk_type" in config["store"]


# -- topics --------------------------------------------------------------------------------------
def test_topic_create_route_list_update_delete(orbitmq: Orbitmq) -> None:
    out = orbitmq("topic", "create", "--topic", "CliTopicA").stdout
    assert "broker-a" in out
    route = json.loads(orbitmq("topic", "route", "--topic", "CliTopicA").stdout)
    [queue_data] = route["queueDatas"]
    assert (queue_data["readQueueNums"], queue_data["writeQueueNums"], queue_data["perm"]) == (8, 8, 6)
    assert "CliTopicA" in orbitmq("topic", "list").stdout.splitlines()

    orbitmq("topic", "update", "--topic", "CliTopicA", "--write-queue-nums", "4", "--perm", "r")
    [queue_data] = json.loads(orbitmq("topic", "route", "--topic", "CliTopicA").stdout)["queueDatas"]
    assert (queue_data["readQueueNums"], queue_data["writeQueueNums"], queue_data["perm"]) == (8, 4, 4)

    orbitmq("topic", "delete", "--topic", "CliTopicA")
    assert "CliTopicA" not in orbitmq("topic", "list").stdout.splitlines()
    line = assert_one_line_error(orbitmq("topic", "route", "--topic", "CliTopicA", ok=False))
    assert "topic not found" in line


def test_lists_hide_system_topics_and_groups_unless_all(orbitmq: Orbitmq) -> None:
    """System, retry and dead letter topics and the brokers' own groups used to bury a user's."""
    orbitmq("send", "--topic", "CliHide", "x")
    assert len(orbitmq.consume("CliHide", "g-hide", "--count", "1", "--timeout", "10")) == 1
    orbitmq("group", "update", "--group", "CID_RMQ_SYS_CLI_PROBE", "--retry-max-times", "3")

    listed = orbitmq("topic", "list")
    shown = listed.stdout.splitlines()
    assert "CliHide" in shown and "TBW102" not in shown
    assert not [t for t in shown if t.startswith(("%RETRY%", "%DLQ%", "RMQ_SYS_", "rmq_sys_"))]
    assert "not shown: --all" in listed.stderr
    every = json.loads(orbitmq("topic", "list", "--all", "--format", "json").stdout)
    assert {"CliHide", "TBW102", "SCHEDULE_TOPIC_XXXX"} <= set(every)
    assert json.loads(orbitmq("topic", "list", "--format", "json").stdout) == shown

    groups = orbitmq("group", "list").stdout.splitlines()
    assert "g-hide" in groups and "CID_RMQ_SYS_CLI_PROBE" not in groups
    assert "CID_RMQ_SYS_CLI_PROBE" in orbitmq("group", "list", "--all").stdout.splitlines()


def test_n_is_short_for_namesrv_on_every_client_command(cluster: EmbeddedCluster) -> None:
    """mqadmin's habit: ``-n HOST:PORT``; no command may use -n for anything else."""
    for path in all_commands(cli):
        command: click.Command = cli
        for name in path:
            assert isinstance(command, click.Group)
            command = command.commands[name]
        for param in command.params:
            if "-n" in param.opts:
                assert "--namesrv" in param.opts, (path, param.opts)
            if param.name in ("namesrv", "cfg_namesrv_addr"):
                assert "-n" in param.opts, path
    result = CliRunner(env={"ORBITMQ_NAMESRV_ADDR": None}).invoke(
        cli, ["topic", "list", "--all", "-n", cluster.namesrv])
    assert result.exit_code == 0, result.output
    assert "TBW102" in result.stdout.splitlines()


def test_topic_create_on_one_broker_address(orbitmq: Orbitmq, cluster: EmbeddedCluster) -> None:
    addr = cluster.brokers[0].server.address
    orbitmq("topic", "create", "--topic", "CliTopicB", "--broker-addr", addr,
            "--read-queue-nums", "2", "--write-queue-nums", "2", "--order")
    [queue_data] = json.loads(orbitmq("topic", "route", "--topic", "CliTopicB").stdout)["queueDatas"]
    assert (queue_data["readQueueNums"], queue_data["writeQueueNums"]) == (2, 2)


def test_topic_status_shows_offsets_and_last_store_time(orbitmq: Orbitmq) -> None:
    orbitmq("topic", "create", "--topic", "CliStatus", "--read-queue-nums", "2",
            "--write-queue-nums", "2")
    orbitmq("send", "--topic", "CliStatus", "--count", "3", "hello")
    rows = json.loads(orbitmq("topic", "status", "--topic", "CliStatus", "--format", "json").stdout)
    assert [r["queue_id"] for r in rows] == [0, 1]
    assert sum(r["max_offset"] - r["min_offset"] for r in rows) == 3
    assert all(r["last_update_timestamp"] > 0 for r in rows if r["max_offset"] > 0)
    text = orbitmq("topic", "status", "--topic", "CliStatus").stdout
    assert text.splitlines()[0].split() == ["BROKER", "QUEUE", "MIN_OFFSET", "MAX_OFFSET",
                                            "LAST_UPDATE"]
    assert "3 message(s) stored" in text


# -- send and consume ----------------------------------------------------------------------------
def test_send_prints_a_receipt_per_message(orbitmq: Orbitmq) -> None:
    out = orbitmq("send", "--topic", "CliSend", "--tags", "TagA", "--keys", "k1,k2",
                  "--property", "origin=cli", "--count", "2", "payload").stdout
    lines = out.splitlines()
    assert len(lines) == 2
    for line in lines:
        fields = dict(f.split("=", 1) for f in line.split()[1:])
        assert line.startswith("SEND_OK ")
        assert set(fields) == {"msg_id", "offset_msg_id", "queue", "offset"}
        assert fields["queue"].startswith("broker-a:")
    [msg] = [json.loads(line) for line in orbitmq(
        "consume", "--topic", "CliSend", "--group", "g-send", "--count", "1", "--timeout", "10",
        "--format", "json").stdout.splitlines()]
    assert msg["body"] == "payload" and msg["tags"] == "TagA" and msg["keys"] == ["k1", "k2"]
    assert msg["properties"]["origin"] == "cli"


def test_send_lines_from_stdin_sends_one_message_per_line(orbitmq: Orbitmq) -> None:
    out = orbitmq("send", "--topic", "CliStdin", "--lines", "-",
                  input="first\nsecond\n\nthird\n").stdout
    assert len(out.splitlines()) == 3
    bodies = orbitmq.consume("CliStdin", "g-stdin", "--count", "3", "--timeout", "10")
    assert sorted(bodies) == ["first", "second", "third"]


def test_consume_continues_where_the_group_stopped(orbitmq: Orbitmq) -> None:
    orbitmq("send", "--topic", "CliResume", "--lines", "-",
            input="".join(f"m{i}\n" for i in range(6)))
    first = orbitmq.consume("CliResume", "g-resume", "--count", "4", "--timeout", "10")
    assert len(first) == 4
    rest = orbitmq.consume("CliResume", "g-resume", "--count", "2", "--timeout", "10")
    assert sorted(first + rest) == [f"m{i}" for i in range(6)]
    assert orbitmq.consume("CliResume", "g-resume", "--timeout", "1") == []
    # Another group has its own offsets.
    assert len(orbitmq.consume("CliResume", "g-other", "--count", "6", "--timeout", "10")) == 6


def test_consume_filters_by_tag_and_escapes_bodies(orbitmq: Orbitmq) -> None:
    orbitmq("send", "--topic", "CliTags", "--tags", "red", "line one\nline two")
    orbitmq("send", "--topic", "CliTags", "--tags", "blue", "skipped")
    orbitmq("send", "--topic", "CliTags", "--tags", "red", "last")
    bodies = orbitmq.consume("CliTags", "g-tags", "--expression", "red", "--count", "2",
                             "--timeout", "10")
    assert sorted(bodies) == ["last", "line one\\nline two"]


def test_consume_from_last_skips_what_is_already_stored(orbitmq: Orbitmq) -> None:
    orbitmq("send", "--topic", "CliLast", "--count", "3", "old")
    assert orbitmq.consume("CliLast", "g-last", "--from", "last", "--timeout", "1") == []
    orbitmq("send", "--topic", "CliLast", "new")
    assert orbitmq.consume("CliLast", "g-last", "--count", "1", "--timeout", "10") == ["new"]


def test_consume_from_a_timestamp(orbitmq: Orbitmq) -> None:
    orbitmq("send", "--topic", "CliSince", "before")
    [old] = [json.loads(line) for line in orbitmq(
        "consume", "--topic", "CliSince", "--group", "g-probe", "--count", "1", "--timeout", "10",
        "--format", "json").stdout.splitlines()]
    since = old["store_timestamp"] + 1
    deadline = time.monotonic() + 5
    while time.time() * 1000 <= since:  # the next message must be stored after `since`
        assert time.monotonic() < deadline
        time.sleep(0.001)
    orbitmq("send", "--topic", "CliSince", "after")
    bodies = orbitmq.consume("CliSince", "g-since", "--from", str(since), "--count", "1",
                             "--timeout", "10")
    assert bodies == ["after"]


# -- groups --------------------------------------------------------------------------------------
def test_group_status_list_and_reset(orbitmq: Orbitmq) -> None:
    orbitmq("topic", "create", "--topic", "CliGroup", "--read-queue-nums", "2",
            "--write-queue-nums", "2")
    orbitmq("send", "--topic", "CliGroup", "--count", "5", "x")
    assert len(orbitmq.consume("CliGroup", "g-status", "--count", "3", "--timeout", "10")) == 3
    assert "g-status" in orbitmq("group", "list").stdout.splitlines()

    status = json.loads(orbitmq("group", "status", "--group", "g-status", "--format",
                                "json").stdout)
    queues = [q for q in status["queues"] if q["topic"] == "CliGroup"]
    assert sum(q["broker_offset"] for q in queues) == 5
    assert sum(q["consumer_offset"] for q in queues) == 3
    assert status["total_lag"] == 2 == sum(q["lag"] for q in queues)
    text = orbitmq("group", "status", "--group", "g-status", "--topic", "CliGroup").stdout
    assert "LAG" in text.splitlines()[0]
    assert text.splitlines()[-1] == "total: broker offset 5, consumer offset 3, lag 2"

    orbitmq("group", "reset-offset", "--group", "g-status", "--topic", "CliGroup",
            "--timestamp", "earliest")
    assert len(orbitmq.consume("CliGroup", "g-status", "--count", "5", "--timeout", "10")) == 5
    orbitmq("group", "reset-offset", "--group", "g-status", "--topic", "CliGroup",
            "--timestamp", "2000-01-01T00:00:00")
    status = json.loads(orbitmq("group", "status", "--group", "g-status", "--topic", "CliGroup",
                                "--format", "json").stdout)
    assert status["total_lag"] == 5
    orbitmq("group", "reset-offset", "--group", "g-status", "--topic", "CliGroup",
            "--timestamp", "now")
    assert orbitmq.consume("CliGroup", "g-status", "--timeout", "1") == []


# -- messages ------------------------------------------------------------------------------------
def test_message_get_and_query(orbitmq: Orbitmq) -> None:
    line = orbitmq("send", "--topic", "CliMsg", "--keys", "order-17", "the body").stdout.strip()
    fields = dict(f.split("=", 1) for f in line.split()[1:])
    by_offset_id = orbitmq("message", "get", fields["offset_msg_id"]).stdout
    assert "the body" in by_offset_id and "order-17" in by_offset_id
    by_id = json.loads(orbitmq("message", "get", "--topic", "CliMsg", "--format", "json",
                               fields["msg_id"]).stdout)
    assert by_id["body"] == "the body" and by_id["offset_msg_id"] == fields["offset_msg_id"]
    found = orbitmq("message", "query", "--topic", "CliMsg", "--key", "order-17").stdout
    assert len(found.splitlines()) == 1 and fields["msg_id"] in found
    assert_one_line_error(orbitmq("message", "query", "--topic", "CliMsg", "--key", "nope",
                                  ok=False))


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("args, expected", [
    (["topic", "status", "--topic", "NoSuchTopic"], "topic not found"),
    (["consume", "--topic", "NoSuchTopic", "--group", "g", "--timeout", "1"], "topic not found"),
    (["group", "reset-offset", "--group", "g", "--topic", "T", "--timestamp", "yesterday"],
     "--timestamp"),
    (["consume", "--topic", "T", "--group", "g", "--from", "someday"], "--from"),
    (["send", "--topic", "bad topic!", "x"], "topic"),
    (["consume", "--topic", "T", "--group", "bad group!", "--timeout", "1"], "group"),
    (["send", "--topic", "T", "--property", "novalue", "x"], "--property"),
    (["send", "--topic", "T", "-"], "nothing to send"),
    (["topic", "create", "--topic", "T", "--perm", "9"], "--perm"),
    (["topic", "create", "--topic", "T", "--cluster", "NoSuchCluster"], "NoSuchCluster"),
    (["group", "status", "--group", "never-seen"], "no committed offsets"),
    (["message", "get", "0123"], "0123"),
])
def test_bad_input_fails_with_one_line(orbitmq: Orbitmq, args: list[str], expected: str) -> None:
    line = assert_one_line_error(orbitmq(*args, input="", ok=False))
    assert expected in line


@pytest.mark.parametrize("args", [
    ["topic", "list"],
    ["send", "--topic", "T", "x"],
    ["consume", "--topic", "T", "--group", "g", "--timeout", "1"],
])
def test_unreachable_name_server_fails_with_one_line(args: list[str]) -> None:
    result = Orbitmq(f"127.0.0.1:{free_port()}")(*args, ok=False)
    assert "cannot connect" in assert_one_line_error(result)


def test_malformed_name_server_address_fails_with_one_line() -> None:
    line = assert_one_line_error(Orbitmq("no-port")("topic", "list", ok=False))
    assert "--namesrv" in line


# -- real processes ------------------------------------------------------------------------------
def _lines_of(stream: IO[str], out: queue.Queue[str | None]) -> None:
    for line in stream:
        out.put(line.rstrip("\n"))
    out.put(None)


def _orbitmq_child(*args: str, namesrv: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", *args],
        input=input, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
        env={**os.environ, "ORBITMQ_NAMESRV_ADDR": namesrv},
    )


def test_send_and_consume_processes_against_standalone(tmp_path: Path) -> None:
    with standalone_process(str(tmp_path / "store")) as server:
        namesrv = server.wait_ready("namesrv", "broker")["namesrv"]
        bodies = [f"message-{i}" for i in range(5)]

        sent = _orbitmq_child("send", "--topic", "ProcTopic", "--lines", "-", namesrv=namesrv,
                              input="\n".join(bodies) + "\n")
        assert sent.returncode == 0, sent.stderr
        assert [line.split()[0] for line in sent.stdout.splitlines()] == ["SEND_OK"] * 5

        first = _orbitmq_child("consume", "--topic", "ProcTopic", "--group", "proc-group",
                               "--count", "3", "--timeout", "20", namesrv=namesrv)
        assert first.returncode == 0, first.stderr
        got = [body_of(line) for line in first.stdout.splitlines()]
        assert len(got) == 3

        # Without limits the consumer runs until Ctrl-C, which must commit what it printed
        # and exit 130, not 0: a script must tell an interrupted run from a finished one.
        with subprocess.Popen(
            [sys.executable, "-m", "orbitmq.cli.main", "consume", "--topic", "ProcTopic",
             "--group", "proc-group"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "ORBITMQ_NAMESRV_ADDR": namesrv, "PYTHONUNBUFFERED": "1"},
        ) as child:
            assert child.stdout is not None and child.stderr is not None
            try:
                lines: queue.Queue[str | None] = queue.Queue()
                reader = threading.Thread(target=_lines_of, args=(child.stdout, lines), daemon=True)
                reader.start()
                for _ in range(2):
                    line = lines.get(timeout=CHILD_TIMEOUT_S)
                    assert line is not None, child.stderr.read()
                    got.append(body_of(line))
                child.send_signal(signal.SIGINT)
                assert child.wait(CHILD_TIMEOUT_S) == 130  # as a shell reports Ctrl-C
                reader.join(CHILD_TIMEOUT_S)  # it ends at EOF, before the pipe gets closed
                assert lines.get_nowait() is None  # nothing printed after the two lines
                stderr = child.stderr.read()
                assert "consumed 2 message(s)" in stderr and "Traceback" not in stderr
            finally:
                if child.poll() is None:
                    child.kill()
                    child.wait(10)
        assert sorted(got) == bodies

        again = _orbitmq_child("consume", "--topic", "ProcTopic", "--group", "proc-group",
                               "--timeout", "1", namesrv=namesrv)
        assert again.returncode == 0, again.stderr
        assert again.stdout == ""
