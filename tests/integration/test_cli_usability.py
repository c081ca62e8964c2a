"""The ``orbitmq`` command as users run it: real child processes (``python -m orbitmq.cli.main``)
against in-process servers on 127.0.0.1. Sending files and standard input as one message, bodies
printed escaped one way, SQL92 filters, a closed pipe, Ctrl-C while waiting for a route,
``--log-level`` anywhere, reserved property names, and read-only database commands."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orbitmq import Admin, Message, Producer
from orbitmq.testing import EmbeddedCluster

CHILD_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("cli-use"), enable_property_filter=True) as c:
        yield c


def orbitmq(*args: str, namesrv: str, input: bytes | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", *args], input=input, capture_output=True,
        timeout=CHILD_TIMEOUT_S, cwd=cwd, env={**os.environ, "ORBITMQ_NAMESRV_ADDR": namesrv})


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, (result.args, result.stdout, result.stderr)
    return result.stdout.decode()


def one_line_error(result: subprocess.CompletedProcess[bytes], status: int = 1) -> str:
    err = result.stderr.decode()
    lines = [line for line in err.splitlines() if line.strip()]
    assert result.returncode == status, (result.args, result.stdout, err)
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in err, err
    return lines[0]


def consume_json(namesrv: str, topic: str, group: str, *extra: str) -> list[dict[str, object]]:
    out = ok(orbitmq("consume", "--topic", topic, "--group", group, "--timeout", "3",
                     "--format", "json", *extra, namesrv=namesrv))
    return [json.loads(line) for line in out.splitlines()]


def committed_offsets(namesrv: str, group: str, topic: str) -> int:
    with Admin(namesrv) as admin:
        try:
            status = admin.group_status(group, topic)
        except Exception:  # no offsets at all
            return 0
    return sum(q.consumer_offset for q in status.queues)


# -- send ---------------------------------------------------------------------------------------
BINARY = b"line one\nline two\r\n\x00\xff\xfe tail \\xff"


def test_send_file_sends_its_bytes_as_one_message(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    path = tmp_path / "payload.bin"
    path.write_bytes(BINARY)
    ok(orbitmq("send", "--topic", "CliFile", "--file", str(path), namesrv=cluster.namesrv))
    [msg] = consume_json(cluster.namesrv, "CliFile", "g-file", "--count", "1")
    assert base64.b64decode(str(msg["body_base64"])) == BINARY and "body" not in msg
    text = ok(orbitmq("consume", "--topic", "CliFile", "--group", "g-file-text", "--count", "1",
                      "--timeout", "3", namesrv=cluster.namesrv))
    body = text.split(" body=", 1)[1].rstrip("\n")
    # One way to read each escape: \xff is the byte, \\xff the four characters of the body.
    assert body == "line one\\nline two\\r\\n\\x00\\xff\\xfe tail \\\\xff"


def test_send_dash_reads_standard_input_as_one_message(cluster: EmbeddedCluster) -> None:
    """``send -`` used to split its input at newline bytes, one message per line."""
    ok(orbitmq("send", "--topic", "CliStdinOne", "-", input=BINARY, namesrv=cluster.namesrv))
    msgs = consume_json(cluster.namesrv, "CliStdinOne", "g-stdin-one")
    assert [base64.b64decode(str(m["body_base64"])) for m in msgs] == [BINARY]


def test_send_lines_sends_one_message_per_line(cluster: EmbeddedCluster) -> None:
    out = ok(orbitmq("send", "--topic", "CliLines", "--lines", "-", input=b"first\nsecond\n\nthird\n",
                     namesrv=cluster.namesrv))
    assert len(out.splitlines()) == 3
    msgs = consume_json(cluster.namesrv, "CliLines", "g-lines", "--count", "3")
    assert sorted(str(m["body"]) for m in msgs) == ["first", "second", "third"]


def test_send_needs_exactly_one_source_and_a_body(cluster: EmbeddedCluster) -> None:
    usage = orbitmq("send", "--topic", "CliNone", namesrv=cluster.namesrv)
    assert usage.returncode == 2 and b"Error: give the body as BODY" in usage.stderr
    assert "empty body" in one_line_error(
        orbitmq("send", "--topic", "CliNone", "-", input=b"", namesrv=cluster.namesrv))


def test_reserved_property_names_are_refused(cluster: EmbeddedCluster) -> None:
    """``--property UNIQ_KEY=abc`` used to replace the message id."""
    line = one_line_error(orbitmq("send", "--topic", "CliReserved", "--property", "UNIQ_KEY=abc",
                                  "x", namesrv=cluster.namesrv))
    assert "'UNIQ_KEY' is reserved" in line


# -- SQL92 filters --------------------------------------------------------------------------------
def test_consume_sql_prints_exactly_the_matching_messages(cluster: EmbeddedCluster) -> None:
    topic = "CliSql"
    with Producer("cli-sql-producer", namesrv=cluster.namesrv) as producer:
        for i in range(12):
            props = {"a": str(i)} if i != 11 else {}
            producer.send(Message(topic, f"m{i}".encode(), properties=props))
    msgs = consume_json(cluster.namesrv, topic, "g-sql", "--sql", "a > 5")
    assert sorted(str(m["body"]) for m in msgs) == sorted(f"m{i}" for i in range(6, 11))


def test_consume_with_sql_given_as_tags_fails_and_moves_no_offset(cluster: EmbeddedCluster) -> None:
    """``consume -e "a > 5"`` used to print nothing and commit offsets past every message."""
    topic, group = "CliSqlAsTags", "g-sql-as-tags"
    ok(orbitmq("send", "--topic", topic, "--property", "a=9", "x", namesrv=cluster.namesrv))
    line = one_line_error(orbitmq("consume", "--topic", topic, "--group", group, "-e", "a > 5",
                                  "--timeout", "2", namesrv=cluster.namesrv), 2)
    assert "--sql" in line
    line = one_line_error(orbitmq("consume", "--topic", topic, "--group", group, "--sql", "a >",
                                  "--timeout", "2", namesrv=cluster.namesrv), 2)
    assert "--sql" in line and "character 4" in line
    assert committed_offsets(cluster.namesrv, group, topic) == 0
    assert [m["body"] for m in consume_json(cluster.namesrv, topic, group)] == ["x"]


def test_consume_sql_on_a_broker_without_filtering_fails_and_commits_nothing(
        tmp_path: Path) -> None:
    with EmbeddedCluster(tmp_path) as off:
        ok(orbitmq("send", "--topic", "CliSqlOff", "--property", "a=9", "x", namesrv=off.namesrv))
        line = one_line_error(orbitmq("consume", "--topic", "CliSqlOff", "--group", "g-off",
                                      "--from", "last", "--sql", "a > 5", "--timeout", "2",
                                      namesrv=off.namesrv))
        assert "FILTER_NOT_SUPPORTED" in line and "enable_property_filter" in line
        with Admin(off.namesrv) as admin:
            assert "g-off" not in admin.list_groups() or not admin.group_status("g-off").queues


# -- the terminal ---------------------------------------------------------------------------------
def test_a_closed_pipe_ends_quietly_with_status_zero(cluster: EmbeddedCluster) -> None:
    """``orbitmq topic list | head -1`` used to end with "Error: [Errno 32] Broken pipe"."""
    child = subprocess.Popen([sys.executable, "-m", "orbitmq.cli.main", "topic", "list", "--all"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, "ORBITMQ_NAMESRV_ADDR": cluster.namesrv})
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # the reader is gone before the first line is written
    try:
        assert child.wait(CHILD_TIMEOUT_S) == 0
        assert child.stderr.read() == b""
    finally:
        child.stderr.close()
        if child.poll() is None:
            child.kill()
            child.wait(10)


def test_ctrl_c_during_the_route_wait_ends_at_once(cluster: EmbeddedCluster) -> None:
    """The route wait used to ignore Ctrl-C and end in "topic not found" anyway."""
    child = subprocess.Popen(
        [sys.executable, "-m", "orbitmq.cli.main", "consume", "--topic", "NoSuchTopicYet",
         "--group", "g-ctrl-c", "--log-level", "INFO"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "ORBITMQ_NAMESRV_ADDR": cluster.namesrv, "PYTHONUNBUFFERED": "1"})
    assert child.stdout is not None and child.stderr is not None
    seen: list[str] = []
    waiting = threading.Event()

    def read() -> None:
        assert child.stderr is not None
        for line in child.stderr:
            seen.append(line)
            if "waiting up to" in line:
                waiting.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert waiting.wait(CHILD_TIMEOUT_S), "".join(seen)
        child.send_signal(signal.SIGINT)
        assert child.wait(CHILD_TIMEOUT_S) == 130, "".join(seen)  # as a shell reports Ctrl-C
        reader.join(CHILD_TIMEOUT_S)
        err = "".join(seen)
        assert "consumed 0 message(s)" in err and "topic not found" not in err
    finally:
        child.stdout.close()
        if child.poll() is None:
            child.kill()
            child.wait(10)
        child.stderr.close()


def test_log_level_is_accepted_after_the_subcommand(cluster: EmbeddedCluster) -> None:
    """It used to be accepted only before the subcommand ("No such option")."""
    assert "TBW102" in ok(orbitmq("topic", "list", "--all", "--log-level", "DEBUG",
                                  namesrv=cluster.namesrv)).splitlines()
    nobody = "127.0.0.1:1"  # refuses connections: the SDK logs a WARNING before failing
    quiet = orbitmq("topic", "list", namesrv=nobody)
    loud = orbitmq("topic", "list", "--log-level", "WARNING", namesrv=nobody)
    assert b"WARNING" not in quiet.stderr and b"WARNING" in loud.stderr
    assert loud.returncode == quiet.returncode == 1


# -- databases ------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [
    ["outbox", "status"], ["outbox", "retry", "--all"], ["consumelog", "list"],
    ["consumelog", "retry", "1"],
])
def test_read_only_database_commands_create_no_file(cluster: EmbeddedCluster, tmp_path: Path,
                                                    args: list[str]) -> None:
    """``outbox status --db sqlite:///typo.db`` used to create the file, then fail "no such
    table"."""
    line = one_line_error(orbitmq(*args, "--db", "sqlite:///typo.db", namesrv=cluster.namesrv,
                                  cwd=tmp_path))
    assert "no database file typo.db" in line
    assert list(tmp_path.iterdir()) == []


def test_a_database_without_the_table_is_named_in_one_line(cluster: EmbeddedCluster,
                                                           tmp_path: Path) -> None:
    import sqlite3

    sqlite3.connect(tmp_path / "other.db").close()
    line = one_line_error(orbitmq("outbox", "status", "--db", "sqlite:///other.db",
                                  namesrv=cluster.namesrv, cwd=tmp_path))
    assert "no table orbitmq_outbox" in line and "outbox init" in line
