"""docs/rocketmq5.md's examples run as written (examples/rocketmq5_client.py and
examples/rocketmq5_priority.py, official client)."""

from __future__ import annotations

import subprocess

import pytest
from rmq5_support import REPO, RMQ5_PYTHON, Cluster

pytestmark = pytest.mark.rmq5

EXAMPLE = REPO / "examples" / "rocketmq5_client.py"
PRIORITY_EXAMPLE = REPO / "examples" / "rocketmq5_priority.py"


def test_the_docs_show_the_example_and_it_runs(cluster: Cluster, tmp_path) -> None:
    doc = (REPO / "docs" / "rocketmq5.md").read_text()
    body = EXAMPLE.read_text()
    start = body.index("import sys")
    assert body[start:] in doc, "docs/rocketmq5.md must show examples/rocketmq5_client.py as it is"
    cluster.topic("Orders")
    cluster.topic("Reminders", "DELAY")
    out = subprocess.run([str(RMQ5_PYTHON), str(EXAMPLE), cluster.endpoint], capture_output=True,
                         text=True, timeout=120, env={"HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == [
        "sent order True", "sent reminder True", "received ['order 17 created', 'pay order 17']"]


def test_the_priority_example_is_shown_and_runs(cluster: Cluster, tmp_path) -> None:
    doc = (REPO / "docs" / "rocketmq5.md").read_text()
    body = PRIORITY_EXAMPLE.read_text()
    assert body[body.index("import sys"):] in doc, \
        "docs/rocketmq5.md must show examples/rocketmq5_priority.py as it is"
    cluster.topic("Tasks", "PRIORITY", queues=10)
    out = subprocess.run([str(RMQ5_PYTHON), str(PRIORITY_EXAMPLE), cluster.endpoint],
                         capture_output=True, text=True, timeout=120, env={"HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == ["first: urgent task", "received 101"]
