"""The ``orbitmq`` Python data source: batch and Structured Streaming, read and write.

``register(spark)`` makes ``spark.read.format("orbitmq")``, ``spark.readStream.format("orbitmq")``,
``df.write.format("orbitmq")`` and ``df.writeStream.format("orbitmq")`` available in that session.
Options are checked when the reader or writer is created, that is when the query starts, with
errors naming the option (:class:`orbitmq.spark.options.OptionError`).

The class travels to Spark's Python processes by value and imports OrbitMQ only inside its
methods, so that a Spark Python without OrbitMQ fails with one line saying so (ship.py).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource

from orbitmq.spark.ship import require_orbitmq, send_by_value

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = ["OrbitMQDataSource", "register"]


class OrbitMQDataSource(DataSource):
    """Reads and writes OrbitMQ (RocketMQ 4.x) topics; see docs/spark.md for the options.

    ``parallelism`` is the default parallelism of the session the class was registered with
    (:func:`register` sets it on a subclass): the source's planning runs in a Python process
    that has no SparkContext to ask."""

    parallelism: int | None = None

    @classmethod
    def name(cls) -> str:
        return "orbitmq"

    def schema(self) -> StructType:
        require_orbitmq()
        from orbitmq.spark.options import include_headers
        from orbitmq.spark.schema import read_schema

        return read_schema(include_headers(self.options))

    def reader(self, schema: StructType) -> Any:
        require_orbitmq()
        from orbitmq.spark.options import parse_read_options
        from orbitmq.spark.reader import OrbitMQBatchReader
        from orbitmq.spark.schema import check_read_schema

        opts = parse_read_options(self.options, streaming=False)
        check_read_schema(schema, opts.include_headers)
        return OrbitMQBatchReader(opts, schema, self.parallelism)

    def streamReader(self, schema: StructType) -> Any:
        require_orbitmq()
        from orbitmq.spark.options import parse_read_options
        from orbitmq.spark.reader import OrbitMQStreamReader
        from orbitmq.spark.schema import check_read_schema

        opts = parse_read_options(self.options, streaming=True)
        check_read_schema(schema, opts.include_headers)
        return OrbitMQStreamReader(opts, schema, self.parallelism)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        require_orbitmq()
        from orbitmq.spark.options import parse_write_options
        from orbitmq.spark.writer import make_batch_writer

        return make_batch_writer(parse_write_options(self.options, streaming=False), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        require_orbitmq()
        from orbitmq.spark.options import parse_write_options
        from orbitmq.spark.writer import make_stream_writer

        return make_stream_writer(parse_write_options(self.options, streaming=True), schema)


def register(spark: SparkSession) -> None:
    """Register the ``orbitmq`` format with ``spark`` (once per session is enough)."""
    send_by_value(sys.modules[__name__])
    source = type(OrbitMQDataSource.__name__, (OrbitMQDataSource,),
                  {"__module__": __name__, "parallelism": default_parallelism(spark)})
    spark.dataSource.register(source)


def default_parallelism(spark: SparkSession) -> int | None:
    """``spark``'s default parallelism; None where the session has no SparkContext (Spark
    Connect) and sets no ``spark.default.parallelism``.

    Raises:
        SparkError: ``spark.default.parallelism`` is set but not a positive integer.
    """
    try:
        return spark.sparkContext.defaultParallelism
    except NotImplementedError:  # Spark Connect's PySparkNotImplementedError
        conf = spark.conf.get("spark.default.parallelism", None)
    if conf is None:
        return None
    try:
        value = int(conf)
    except ValueError:
        value = 0
    if value < 1:
        from orbitmq.errors import SparkError

        raise SparkError(f"orbitmq: spark.default.parallelism is {conf!r}, not a positive integer")
    return value
