"""Cluster mode: the same jobs on Spark's ``local-cluster[2,1,1024]`` (two executor JVMs, each with
Python workers of its own), run by a child driver (cluster_driver.py): a batch read and an
exactly-once streaming copy; the same copy with one executor SIGKILLed in the middle of a
micro-batch, after its task sent part of its rows as transaction batches; and a Spark whose Python
lacks OrbitMQ, which fails with one line saying so. Every target is read back with the SDK."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from spark_support import consume_all, new_topic, produce

from orbitmq import Admin
from orbitmq.spark.clients import executor_session
from orbitmq.spark.commit_log import SinkTransactionListener
from orbitmq.spark.options import COMMIT_TOPIC_DEFAULT, parse_read_options
from orbitmq.spark.reader import OrbitMQBatchReader
from orbitmq.spark.schema import read_schema
from orbitmq.spark.ship import MISSING
from orbitmq.spark.writer import FAULT_DIR_ENV, FAULT_ENV

DRIVER = Path(__file__).with_name("cluster_driver.py")
ROWS = 900  # the killed copy: 3 micro-batches of 300 offsets, 4 source queues: 4 tasks a batch
KILL_GROUP = "cluster-kill-sink"
DRIVER_TIMEOUT_S = 480.0  # a local-cluster start alone takes 20-60 s on a loaded 2-core machine
MISSING_HEAD = MISSING.split("(")[0]  # "orbitmq is not installed in this Spark Python "


def bare_python(folder: Path) -> Path:
    """A Python with this venv's packages (pyspark, pyarrow, ...) but without OrbitMQ: a venv whose
    .pth names our site-packages (the .pth files there, the editable OrbitMQ one among them, are
    not processed from it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next((folder / "lib").glob("python3*/site-packages"))
    paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site / "parent_packages.pth").write_text("\n".join(paths) + "\n")
    python = folder / "bin" / "python"
    probe = ("import importlib.util as u, pyspark, pyarrow; "
             "assert u.find_spec('orbitmq') is None, 'orbitmq is importable'")
    subprocess.run([str(python), "-c", probe], check=True, env=_env_without_orbitmq())
    return python


def _env_without_orbitmq() -> dict[str, str]:
    """This process's environment without what would hand a child our PYTHONPATH or Python."""
    drop = {"PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _ancestors(pid: int) -> Iterator[int]:
    while pid > 1:
        yield pid
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


@dataclasses.dataclass
class ClusterRun:
    """What the child driver did, and what the test did to it."""

    bodies: list[bytes]
    clean: str
    killed: str
    results: dict[str, dict]
    kill: dict[str, int]
    output: str


def _kill_paused_executor(proc: subprocess.Popen, faults: Path, log: Path) -> dict[str, int]:
    """Wait (bounded) for an executor's Python worker to pause at the fault point, then SIGKILL
    its executor JVM and the worker. Returns the batch and the pids."""
    deadline = time.monotonic() + DRIVER_TIMEOUT_S
    while not (paused := [p for p in faults.iterdir() if p.name.startswith("sending-")]):
        assert proc.poll() is None, f"driver exited before the fault:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"fault not reached:\n{log.read_text()[-4000:]}"
        time.sleep(0.2)
    _point, batch, pid = paused[0].name.split("-")
    worker = int(pid)
    jvm = next(p for p in _ancestors(worker) if "CoarseGrainedExecutorBackend" in _cmdline(p))
    os.kill(jvm, signal.SIGKILL)
    try:
        os.kill(worker, signal.SIGKILL)
    except ProcessLookupError:  # went down with its JVM
        pass
    return {"batch": int(batch), "worker": worker, "jvm": jvm}


@pytest.fixture(scope="module")
def cluster_run(namesrv: str, tmp_path_factory: pytest.TempPathFactory) -> ClusterRun:
    work = tmp_path_factory.mktemp("cluster-mode")
    faults = work / "faults"
    faults.mkdir()
    bare = bare_python(work / "bare")
    source = new_topic(namesrv, "ClusterA", queues=4)
    clean = new_topic(namesrv, "ClusterB", queues=2)
    killed = new_topic(namesrv, "ClusterC", queues=2)
    bodies = [s.body for s in produce(namesrv, source, ROWS, batch=100)]
    env = _env_without_orbitmq()
    env[FAULT_ENV] = "sending@1:once"
    env[FAULT_DIR_ENV] = str(faults)
    log = work / "driver.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(DRIVER), namesrv, str(work), source, clean, killed, KILL_GROUP,
             str(bare)], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
            cwd=work, start_new_session=True)
        try:
            kill = _kill_paused_executor(proc, faults, log)
            code = proc.wait(DRIVER_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
    output = log.read_text()
    assert code == 0, output[-6000:]
    results = {r["step"]: r for r in (json.loads(line.split(" ", 1)[1])
                                       for line in output.splitlines()
                                       if line.startswith("result "))}
    return ClusterRun(bodies, clean, killed, results, kill, output)


def test_batch_read_and_exactly_once_copy_run_on_executor_processes(cluster_run, namesrv):
    read = cluster_run.results["read"]
    assert read["count"] == ROWS
    assert read["digest"] == hashlib.sha256(b"\n".join(sorted(cluster_run.bodies))).hexdigest()
    assert read["driver_pid"] not in read["worker_pids"]
    assert cluster_run.results["copy"]["batches"] >= 1
    got = consume_all(namesrv, cluster_run.clean, expect=ROWS)
    assert sorted(m.body for m in got) == sorted(cluster_run.bodies)


def _pending(namesrv: str, group: str) -> int:
    with Admin(namesrv) as admin:
        return sum(1 for t in admin.list_transactions().transactions
                   if t.producer_group == group)


def test_an_executor_killed_mid_batch_leaves_every_row_exactly_once(cluster_run, namesrv):
    kill = cluster_run.kill
    assert kill["batch"] >= 1, kill  # killed after a committed micro-batch, mid-stream
    assert cluster_run.results["kill"]["batches"] >= ROWS // 300
    got = consume_all(namesrv, cluster_run.killed, expect=ROWS)
    assert sorted(m.body for m in got) == sorted(cluster_run.bodies)
    # The killed task's transaction batches are listed by no marker: the brokers check them back
    # (after the 15 s immunity) and a live producer of the group rolls them back from the markers.
    with executor_session(namesrv) as session:
        listener = SinkTransactionListener(session, COMMIT_TOPIC_DEFAULT)
        session.run(session.tx_producer(KILL_GROUP, listener))
        deadline = time.monotonic() + 120
        while _pending(namesrv, KILL_GROUP):
            assert time.monotonic() < deadline, f"{_pending(namesrv, KILL_GROUP)} still pending"
            time.sleep(0.5)
    again = consume_all(namesrv, cluster_run.killed)
    assert len(again) == ROWS and len({m.msg_id for m in again}) == ROWS


def test_a_spark_python_without_orbitmq_fails_with_one_line(cluster_run):
    missing = cluster_run.results["missing"]
    assert missing["error"] is not None, "a read with a Spark Python lacking orbitmq worked"
    lines = [line for line in missing["error"].splitlines() if MISSING_HEAD in line]
    assert lines, missing["error"][-3000:]
    assert "bare/bin/python" in lines[0] and "PYSPARK_PYTHON" in lines[0]
    assert "ModuleNotFoundError" not in missing["error"], missing["error"][-3000:]


def test_a_reader_unpickled_where_orbitmq_is_missing_says_so_in_one_line(namesrv, tmp_path):
    """The executors' side: a reader shipped to a Python worker without OrbitMQ."""
    from pyspark import cloudpickle

    opts = parse_read_options({"namesrv": namesrv, "topic": "Anything"}, streaming=False)
    blob = tmp_path / "reader.pickle"
    blob.write_bytes(cloudpickle.dumps(OrbitMQBatchReader(opts, read_schema())))
    bare = bare_python(tmp_path / "bare")
    done = subprocess.run(
        [str(bare), "-c", f"import pickle; pickle.loads(open({str(blob)!r}, 'rb').read())"],
        capture_output=True, text=True, env=_env_without_orbitmq(), timeout=60)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"RuntimeError: {MISSING_HEAD}"), done.stderr[-2000:]
    assert "ModuleNotFoundError" not in done.stderr
    assert pickle.loads(blob.read_bytes()).opts == opts  # and where it is there, it loads
