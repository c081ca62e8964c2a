"""OrbitMQ as a Spark data source (PySpark's Python Data Source API, pyspark >= 4.2).

    from orbitmq.spark import register
    register(spark)
    df = (spark.readStream.format("orbitmq").option("namesrv", "127.0.0.1:9876")
          .option("topic", "OrderTopic").load())

pyspark is imported only inside this package, and only when a function needs it: importing
``orbitmq.spark`` itself stays light. Install with ``pip install "orbitmq[spark]"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register", "OptionError", "DataLossError", "SinkTransactionListener"]


def register(spark: SparkSession) -> None:
    """Register the ``orbitmq`` format with ``spark``."""
    from orbitmq.spark.source import register as _register

    _register(spark)


def __getattr__(name: str) -> Any:
    if name == "OptionError":
        from orbitmq.spark.options import OptionError

        return OptionError
    if name == "DataLossError":
        from orbitmq.spark.fetch import DataLossError

        return DataLossError
    if name == "SinkTransactionListener":
        from orbitmq.spark.commit_log import SinkTransactionListener

        return SinkTransactionListener
    raise AttributeError(f"module 'orbitmq.spark' has no attribute {name!r}")
