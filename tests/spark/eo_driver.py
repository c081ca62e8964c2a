"""The driver of the exactly-once crash test, run as a child process (its own SparkSession).

Usage: eo_driver.py NAMESRV SOURCE_TOPIC TARGET_TOPIC CHECKPOINT_DIR

Copies SOURCE to TARGET with a streaming query (400 offsets per micro-batch, Trigger.AvailableNow)
and exits 0 when done. The parent kills it with SIGKILL at fault points chosen through the
ORBITMQ_SPARK_FAULT environment variable (see orbitmq.spark.writer).
"""

from __future__ import annotations

import os
import sys

# Long enough for a restart on a loaded machine (the crash test has no producer of the sink's
# group alive between runs), short enough for its stray halves to be settled within the test.
IMMUNITY_S = "90"


def main() -> None:
    namesrv, source, target, checkpoint = sys.argv[1:5]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from orbitmq.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("orbitmq-eo-child")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    query = (spark.readStream.format("orbitmq").option("namesrv", namesrv).option("topic", source)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "400").load()
             .selectExpr("body", "keys").writeStream.format("orbitmq")
             .option("namesrv", namesrv).option("topic", target)
             .option("transactionCheckImmunitySeconds", IMMUNITY_S)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    print(f"eo-driver done batches={len(query.recentProgress)}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
