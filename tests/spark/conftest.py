"""One SparkSession (local[2]) and one embedded OrbitMQ cluster for the whole Spark test run.

A Spark start costs ~10 s and a first Python streaming query ~8 s more, so every test shares the
session and the servers and uses topics of its own. Without pyspark the tests are skipped on a
developer's machine and fail loudly under CI (CI must run them: `make install` installs it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

try:
    import pyspark  # noqa: F401
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI"):
        raise RuntimeError(
            "pyspark is not installed but CI is set: the Spark tests must run. "
            "Install the spark extra: pip install -e '.[test,lint,spark]' (make install does)."
        ) from None
    pytest.skip("pyspark not installed (pip install -e '.[spark]')", allow_module_level=True)

from orbitmq.testing.embedded import EmbeddedCluster

# The brokers check unresolved transactions every 2 s (first after 6 s), so the exactly-once
# tests see stray half messages settled within their bounded waits; the source's sql option
# needs the broker's SQL92 filtering.
BROKER_OVERRIDES: dict[str, Any] = {"transaction_check_interval_ms": 2000,
                                    "enable_property_filter": True}


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("spark-cluster"), **BROKER_OVERRIDES) as c:
        yield c


@pytest.fixture(scope="session")
def namesrv(cluster: EmbeddedCluster) -> str:
    return cluster.namesrv


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from orbitmq.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("orbitmq-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .config("spark.sql.streaming.checkpointLocation",
                str(tmp_path_factory.mktemp("spark-checkpoints")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
