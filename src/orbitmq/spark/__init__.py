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

__all__ = ["register", "OptionError", "DataLossError", "CommitError", "SinkSchemaError",
           "SparkError", "SinkTransactionListener"]

# The connector's errors live in orbitmq.errors (all are OrbitMQError); their names here:
_ERRORS = {
    "SparkError": "SparkError",
    "OptionError": "SparkOptionError",
    "SinkSchemaError": "SparkSchemaError",
    "DataLossError": "SparkDataLossError",
    "CommitError": "SparkCommitError",
}


def register(spark: SparkSession) -> None:
    """Register the ``orbitmq`` format with ``spark``."""
    from orbitmq.spark.source import register as _register

    _register(spark)


def __getattr__(name: str) -> Any:
    if name in _ERRORS:
        import orbitmq.errors

        return getattr(orbitmq.errors, _ERRORS[name])
    if name == "SinkTransactionListener":
        from orbitmq.spark.commit_log import SinkTransactionListener

        return SinkTransactionListener
    raise AttributeError(f"module 'orbitmq.spark' has no attribute {name!r}")
