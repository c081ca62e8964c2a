"""docs/replication.md runs as written: its three server commands (ports moved to free ones,
stores to a temporary directory), its two programs, its ``cluster list`` table, a master killed
and started again, and its ``store info`` / ``store truncate`` commands on the stopped slave,
which then copies the master's log again. Every printed output the page shows is compared."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from replication_support import wait_for

from orbitmq import Admin
from orbitmq.testing.process import ServerProcess

DOC = Path(__file__).resolve().parents[2] / "docs" / "replication.md"
ORBITMQ = ".venv/bin/orbitmq "


def _blocks(kind: str) -> list[str]:
    """The page's fenced blocks of language ``kind`` ("" for plain ones), in order (fences of
    list items are indented: their lines are taken stripped of the indent)."""
    found: list[str] = []
    lang: str | None = None
    lines: list[str] = []
    for line in DOC.read_text().splitlines():
        text = line.strip()
        if lang is None and text.startswith("```"):
            lang, lines, indent = text[3:], [], len(line) - len(line.lstrip())
        elif lang is not None and text == "```":
            if lang == kind:
                found.append("\n".join(lines) + "\n")
            lang = None
        elif lang is not None:
            lines.append(line[indent:])
    return found


def _free_port(pair: bool = False) -> int:
    """A free port of 127.0.0.1 (with ``pair``, the next one free too: a master's HA port)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not pair or port >= 65535:
            return port
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair")


class Tour:
    """The page's servers, on free ports; ``fix`` rewrites the page's addresses and paths."""

    def __init__(self, tmp: Path) -> None:
        ns, master, slave = _free_port(), _free_port(pair=True), _free_port()
        self.subs = {"127.0.0.1:9876": f"127.0.0.1:{ns}", "--port 9876": f"--port {ns}",
                     "--port 10911": f"--port {master} --grpc-listen-port 0",
                     "--port 10921": f"--port {slave}", "--grpc-listen-port 8091": "--grpc-listen-port 0",
                     "127.0.0.1:10911": f"127.0.0.1:{master}",
                     "127.0.0.1:10921": f"127.0.0.1:{slave}",
                     "./data/ha-master": str(tmp / "ha-master"),
                     "./data/ha-slave": str(tmp / "ha-slave")}
        self.namesrv = f"127.0.0.1:{ns}"
        commands = _blocks("shell")[0].strip().splitlines()
        assert len(commands) == 3 and all(c.startswith(ORBITMQ) for c in commands), commands
        self.commands = [self.fix(c).removeprefix(ORBITMQ).split() for c in commands]
        self.procs: dict[str, ServerProcess] = {}

    def fix(self, text: str) -> str:
        for old, new in self.subs.items():
            text = text.replace(old, new)
        return text

    def start(self, which: str) -> None:
        index = {"namesrv": 0, "master": 1, "slave": 2}[which]
        proc = ServerProcess(self.commands[index])
        self.procs[which] = proc
        proc.wait_ready("namesrv" if which == "namesrv" else "broker", timeout=60)

    def python(self, code: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", self.fix(code)], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()

    def orbitmq(self, *args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "orbitmq.cli.main", *args],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    def members(self) -> dict[int, dict[str, object]]:
        text = self.orbitmq("cluster", "list", "--namesrv", self.namesrv, "--format", "json")
        return {row["broker_id"]: row for row in map(json.loads, text.splitlines())}

    def close(self) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop()


@pytest.fixture
def tour(tmp_path: Path) -> Iterator[Tour]:
    t = Tour(tmp_path)
    try:
        yield t
    finally:
        t.close()


def _in_sync(tour: Tour) -> Callable[[], bool]:
    def check() -> bool:
        rows = tour.members()
        return rows.get(1, {}).get("lag_bytes") == 0 and rows[1].get("state") == "in sync"
    return check


def _shape(text: str) -> str:
    """``text`` with its numbers and paths made alike (the figures differ from run to run)."""
    text = re.sub(r"/\S*ha-slave|\./data/ha-slave", "STORE", text)
    return re.sub(r"\d+(\.\d+)?%?", "N", text)


def test_the_replication_page_runs_as_written(tour: Tour) -> None:
    send, read = _blocks("python")
    plain = _blocks("")
    listed = next(b for b in plain if b.startswith("$ .venv/bin/orbitmq cluster list"))
    read_out = next(b for b in plain if b.startswith("['order-0']"))
    store_out = next(b for b in plain if b.startswith("store: "))
    for which in ("namesrv", "master", "slave"):
        tour.start(which)
    wait_for(_in_sync(tour), "the slave in sync with no lag", 60)

    assert tour.python(send) == ["SendStatus.OK"] * 3
    wait_for(_in_sync(tour), "the slave holds the three messages", 30)
    table = tour.orbitmq("cluster", "list", "--namesrv", tour.namesrv).splitlines()
    documented = listed.splitlines()[1:]
    assert table[0].split() == documented[0].split()
    assert [row.split()[:6] for row in table[1:3]] == [
        tour.fix(row).split()[:6] for row in documented[1:3]]
    assert table[2].split()[5:7] == ["0", "0.0"] and len(table) == 3, table  # no state line

    tour.procs["master"].kill()
    with Admin(tour.namesrv) as admin:
        wait_for(lambda: [sorted(bd.broker_addrs) for bd in
                          admin.topic_route("HaTopic").broker_datas] == [[1]],
                 "the route lists the slave alone")
    assert sorted(tour.python(read)) == read_out.splitlines()

    tour.start("master")  # "with the same command": it recovers and the slave goes on
    wait_for(_in_sync(tour), "the slave replicates from the restarted master", 60)

    tour.procs.pop("slave").stop()
    store_commands = _blocks("shell")[1].strip().splitlines()
    printed = "".join(tour.orbitmq(*tour.fix(c).removeprefix(ORBITMQ).split())
                      for c in store_commands)
    assert _shape(printed).splitlines() == _shape(store_out).splitlines()
    assert printed.splitlines()[-1].endswith("; 3 messages dropped")
    tour.start("slave")  # "Started again, the slave copies the master's log from the cut on."
    wait_for(_in_sync(tour), "the truncated slave copies the master's log again", 60)
    rows = tour.members()
    assert rows[1]["max_offset"] == rows[0]["max_offset"] > 0
