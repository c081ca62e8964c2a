"""The driver of the cluster-mode tests, run as a child process: its Spark runs
``local-cluster[2,1,1024]`` (a master and two workers in the driver's JVM, each worker starting
one executor JVM of its own, whose Python workers run our code), which a SparkSession of the test
process (``local[2]``) cannot switch to.

Usage: cluster_driver.py NAMESRV WORK SOURCE CLEAN_TARGET KILL_TARGET KILL_GROUP BARE_PYTHON

Steps, each printing one ``result {json}`` line for the test to check:

1. ``read``: a batch read of SOURCE on the executors (count, sorted bodies' digest, and the
   process ids of the Python workers that read, to show they were not the driver's);
2. ``copy``: an exactly-once streaming copy SOURCE -> CLEAN_TARGET (Trigger.AvailableNow, one
   micro-batch), with the fault point disarmed (its ``.once`` file made beforehand);
3. ``kill``: the same copy into KILL_TARGET with producer group KILL_GROUP and the fault point
   armed: the first executor Python worker that has sent part of its task's rows as transaction
   batches in micro-batch 1 or later pauses, and the test SIGKILLs its executor (the JVM and the
   Python worker); Spark runs the task again elsewhere and the query goes on to the end;
4. ``missing``: a new SparkSession (``local[1]``, same JVM) whose Spark Python is BARE_PYTHON,
   an interpreter with pyspark but without orbitmq: a read fails; the error's text is reported.

The executors get OrbitMQ the way a real cluster's would (docs/spark.md, "Running on a cluster"):
``spark.executorEnv.PYTHONPATH`` naming the source tree, and ``PYSPARK_PYTHON`` naming an
interpreter with pyspark and pyarrow. The test starts this script without PYTHONPATH.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

# The driver imports OrbitMQ from the source tree without PYTHONPATH (which Spark's JVM would
# pass on to every Python worker): the executors get it only from spark.executorEnv.PYTHONPATH.
SRC = str(Path(__file__).resolve().parents[2] / "src")
sys.path.insert(0, SRC)

# The clean copy in one micro-batch; the killed one in micro-batches of 300 offsets, the kill in
# batch 1 or later (batch 0 went through).
KILL_BATCH_OFFSETS = 300
FAULT_POINT = "sending"
KILL_FROM_BATCH = 1
# Stray halves of the killed task are checked back by the brokers after this; the test waits
# for them to be settled.
IMMUNITY_S = "15"


def result(step: str, **fields: object) -> None:
    print("result " + json.dumps({"step": step, **fields}, sort_keys=True), flush=True)


def _session(master: str, python: str, ship_src: bool) -> object:
    from pyspark.sql import SparkSession

    from orbitmq.spark import register

    os.environ["PYSPARK_PYTHON"] = python  # what the Python side of a new SparkContext reads
    builder = (SparkSession.builder.master(master).appName("orbitmq-cluster-child")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               # Spark's JVM kept the PYSPARK_PYTHON it started with: the conf wins over it
               .config("spark.pyspark.python", python)
               .config("spark.pyspark.driver.python", python))
    # What a cluster's executors need when orbitmq is not installed there. Set either way: the
    # builder keeps the options of earlier sessions of the process.
    builder = builder.config("spark.executorEnv.PYTHONPATH",
                             SRC if ship_src else str(Path(python).parent))
    for name in ("ORBITMQ_SPARK_FAULT", "ORBITMQ_SPARK_FAULT_DIR"):
        if os.environ.get(name):
            builder = builder.config(f"spark.executorEnv.{name}", os.environ[name])
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _copy(spark, namesrv: str, source: str, target: str, checkpoint: Path,
          batch_offsets: int, group: str | None = None) -> int:
    writer = (spark.readStream.format("orbitmq").option("namesrv", namesrv)
              .option("topic", source).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(batch_offsets)).load()
              .selectExpr("body", "keys").writeStream.format("orbitmq")
              .option("namesrv", namesrv).option("topic", target)
              .option("transactionCheckImmunitySeconds", IMMUNITY_S)
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    if group is not None:
        writer = writer.option("producerGroup", group)
    query = writer.start()
    query.awaitTermination()
    return len(query.recentProgress)


def _read(spark, namesrv: str, source: str) -> None:
    from pyspark.sql.functions import spark_partition_id

    df = (spark.read.format("orbitmq").option("namesrv", namesrv).option("topic", source)
          .load())
    rows = df.select("body").collect()
    digest = hashlib.sha256(b"\n".join(sorted(bytes(r.body) for r in rows))).hexdigest()

    def pids(_rows: object) -> list[int]:
        return [os.getpid()]

    readers = set(df.select(spark_partition_id()).rdd.mapPartitions(pids).collect())
    result("read", count=len(rows), digest=digest, partitions=df.rdd.getNumPartitions(),
           worker_pids=sorted(readers), driver_pid=os.getpid())


def main() -> None:
    namesrv, work, source, clean, killed, group, bare = sys.argv[1:8]
    work_dir = Path(work)
    fault_dir = Path(os.environ["ORBITMQ_SPARK_FAULT_DIR"])
    spark = _session("local-cluster[2,1,1024]", sys.executable, ship_src=True)
    _read(spark, namesrv, source)
    disarmed = fault_dir / f"{FAULT_POINT}.once"
    disarmed.touch()
    result("copy", batches=_copy(spark, namesrv, source, clean, work_dir / "ck-clean", 1 << 30))
    disarmed.unlink()
    result("kill", batches=_copy(spark, namesrv, source, killed, work_dir / "ck-kill",
                                 KILL_BATCH_OFFSETS, group))
    spark.stop()

    spark = _session("local[1]", bare, ship_src=False)
    try:
        spark.read.format("orbitmq").option("namesrv", namesrv).option("topic", source).load() \
            .count()
        result("missing", error=None)
    except Exception as e:  # noqa: BLE001 - the error's text is the result
        result("missing", error=str(e), kind=type(e).__name__)
    spark.stop()


if __name__ == "__main__":
    main()
