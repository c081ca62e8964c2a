"""The examples shown in README run against real servers."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from orbitmq import Admin
from orbitmq.testing import EmbeddedCluster

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_sends_and_reads_back(tmp_path):
    with EmbeddedCluster(tmp_path) as cluster:
        out = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "quickstart.py"), cluster.namesrv],
            capture_output=True, text=True, timeout=60,
        )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("SendStatus.OK")
    assert len(lines) == 2 and "created" in lines[1] and "order-18" in lines[1] and '{"order": 18}' in lines[1]


def test_auto_batch_example_sends_a_thousand(tmp_path):
    with EmbeddedCluster(tmp_path) as cluster:
        out = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "auto_batch.py"), cluster.namesrv],
            capture_output=True, text=True, timeout=60,
        )
    assert out.returncode == 0, out.stderr
    first, *results = out.stdout.splitlines()
    assert first.startswith("1000 messages in ")
    assert len(results) == 2 and all(line.startswith("SendStatus.OK") for line in results)


def test_sql_filter_example_prints_only_the_big_european_orders(tmp_path):
    with EmbeddedCluster(tmp_path, enable_property_filter=True) as cluster:
        out = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "sql_filter.py"), cluster.namesrv],
            capture_output=True, text=True, timeout=60,
        )
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == ["order 1 250 eu", "order 3 120 eu"]


def test_readme_filtering_example_runs_as_written(tmp_path):
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Filtering", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    assert 'namesrv = "127.0.0.1:9876"' in code
    with EmbeddedCluster(tmp_path, enable_property_filter=True) as cluster:
        code = code.replace('namesrv = "127.0.0.1:9876"', f'namesrv = "{cluster.namesrv}"')
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == ["order 1 250 eu", "order 3 120 eu"]


def _readme_block(section: str) -> str:
    """The one python block of README section ``section``, made to use ``namesrv``."""
    readme = (ROOT / "README.md").read_text()
    text = readme.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    assert 'namesrv = "127.0.0.1:9876"' in code
    return code


def _run_against(cluster: EmbeddedCluster, code: str) -> list[str]:
    code = code.replace('namesrv = "127.0.0.1:9876"', f'namesrv = "{cluster.namesrv}"')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_readme_raw_pull_example_prints_the_even_events(tmp_path):
    with EmbeddedCluster(tmp_path) as cluster:
        lines = _run_against(cluster, _readme_block("Pull consumers"))
    assert sorted(lines) == ["event 0", "event 2"]


def test_readme_topic_administration_example_runs_as_written(tmp_path):
    with EmbeddedCluster(tmp_path) as cluster:
        lines = _run_against(cluster, _readme_block("Topic administration"))
        with Admin(cluster.namesrv) as admin:
            deadline = time.monotonic() + 10
            while "AuditEu" not in admin.list_topics():  # registered just after the answer
                assert time.monotonic() < deadline, "AuditEu never reached the name server"
                time.sleep(0.05)
            [eu] = admin.topic_route("AuditEu").queue_datas
    assert lines == ["['broker-a']", "True"]
    assert (eu.broker_name, eu.read_queue_nums, eu.write_queue_nums) == ("broker-a", 1, 1)


def test_the_transactions_doc_decides_later_and_delivers_once():
    text = (ROOT / "docs" / "transactions.md").read_text()
    section = text.split("## Deciding later", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["LocalTransactionState.UNKNOWN", "[b'pay order 42']"]


def test_the_ha_example_reads_every_message_back_from_the_slave(tmp_path):
    """examples/ha/run.py: name server, SYNC_MASTER and SLAVE processes; SEND_OK for each send,
    the master killed, every message read back from the slave."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "ha" / "run.py"), "--messages", "20",
         "--dir", str(tmp_path / "stores")],
        capture_output=True, text=True, timeout=180,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "sent 20 messages, every one answered SEND_OK" in lines
    roles = [line.split()[4] for line in lines if line.startswith("DefaultCluster  broker-ha")]
    assert roles == ["SYNC_MASTER", "SLAVE"]
    assert lines[-2] == "master killed (SIGKILL)"
    assert lines[-1].startswith("read 20 of 20 messages back from the slave 127.0.0.1:")
    assert (tmp_path / "stores" / "slave" / "commitlog").is_dir()
