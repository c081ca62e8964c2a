"""Readers and writers revived in a reused Spark Python worker freeze the worker's heap once
(ship.freeze_heap), so that PySpark's full collection after every task scans only what tasks
made; anywhere else nothing is frozen. Reviving one also sets the worker's malloc thresholds."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from orbitmq.spark.options import parse_read_options
from orbitmq.spark.reader import OrbitMQBatchReader
from orbitmq.spark.schema import read_schema

REVIVE = textwrap.dedent("""
    import gc, pickle, sys
    blob = open(sys.argv[1], "rb").read()
    pickle.loads(blob)
    first = gc.get_freeze_count()
    full = gc.get_stats()[2]["collections"]
    for _ in range(3):
        pickle.loads(blob)
    print(first, gc.get_stats()[2]["collections"] - full)
""")


def _revive(blob: str, **env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != "SPARK_REUSE_WORKER"}
    return subprocess.run([sys.executable, "-c", REVIVE, blob], capture_output=True, text=True,
                          check=True, env={**environ, **env}, timeout=60).stdout.split()


def test_a_reused_worker_freezes_its_heap_once_and_nothing_else_does(tmp_path):
    from pyspark import cloudpickle

    opts = parse_read_options({"namesrv": "127.0.0.1:9876", "topic": "T"}, streaming=False)
    blob = tmp_path / "reader.pickle"
    blob.write_bytes(cloudpickle.dumps(OrbitMQBatchReader(opts, read_schema())))
    frozen, collections = _revive(str(blob), SPARK_REUSE_WORKER="1")
    assert int(frozen) > 10_000  # pyarrow, pyspark, OrbitMQ's modules
    assert collections == "0"  # later tasks: no second full collection
    assert _revive(str(blob))[0] == "0"  # not a reused Spark worker: nothing frozen


BIG_BUFFERS = textwrap.dedent("""
    import pickle, resource, sys
    if sys.argv[2] == "revived":
        pickle.loads(open(sys.argv[1], "rb").read())
    def answers(n):  # as a read: an 8 MiB pull answer, its body column, both freed
        for _ in range(n):
            answer = bytearray(8 << 20)
            column = bytes(answer)
            del answer, column
    answers(2)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    answers(20)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def test_a_revived_reader_keeps_the_workers_megabyte_buffers_in_its_heap(tmp_path):
    """Reviving a reader sets the worker's malloc thresholds (orbitmq.malloc_tuning): pull
    answers and body columns of megabytes are reused from the heap, not mapped and faulted in
    anew each time."""
    if not sys.platform.startswith("linux"):
        pytest.skip("glibc malloc")
    from pyspark import cloudpickle

    opts = parse_read_options({"namesrv": "127.0.0.1:9876", "topic": "T"}, streaming=False)
    blob = tmp_path / "reader.pickle"
    blob.write_bytes(cloudpickle.dumps(OrbitMQBatchReader(opts, read_schema())))
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}

    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", BIG_BUFFERS, str(blob), mode],
                             capture_output=True, text=True, check=True, env=environ, timeout=60)
        return int(out.stdout)

    pages_per_round = (16 << 20) // 4096
    assert faults("plain") > 10 * pages_per_round  # glibc maps such buffers anew each time
    assert faults("revived") < pages_per_round
