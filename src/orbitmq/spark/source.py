"""The ``orbitmq`` Python data source: batch and Structured Streaming, read and write.

``register(spark)`` makes ``spark.read.format("orbitmq")``, ``spark.readStream.format("orbitmq")``,
``df.write.format("orbitmq")`` and ``df.writeStream.format("orbitmq")`` available in that session.
Options are checked when the reader or writer is created, that is when the query starts, with
errors naming the option (:class:`orbitmq.spark.options.OptionError`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource

from orbitmq.spark.options import parse_read_options, parse_write_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = ["OrbitMQDataSource", "register"]


class OrbitMQDataSource(DataSource):
    """Reads and writes OrbitMQ (RocketMQ 4.x) topics; see docs/spark.md for the options."""

    @classmethod
    def name(cls) -> str:
        return "orbitmq"

    def schema(self) -> StructType:
        from orbitmq.spark.schema import read_schema

        return read_schema()

    def reader(self, schema: StructType) -> Any:
        from orbitmq.spark.reader import OrbitMQBatchReader

        return OrbitMQBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> Any:
        from orbitmq.spark.reader import OrbitMQStreamReader

        return OrbitMQStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from orbitmq.spark.writer import make_batch_writer

        return make_batch_writer(parse_write_options(self.options, streaming=False), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from orbitmq.spark.writer import make_stream_writer

        return make_stream_writer(parse_write_options(self.options, streaming=True), schema)


def register(spark: SparkSession) -> None:
    """Register the ``orbitmq`` format with ``spark`` (once per session is enough)."""
    spark.dataSource.register(OrbitMQDataSource)
