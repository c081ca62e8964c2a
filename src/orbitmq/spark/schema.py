"""The fixed read schema and its Arrow twin.

Spark checks every RecordBatch a Python source yields against
``to_arrow_schema(schema, timezone="UTC")`` field by field, nullability and nested field names
included (DATA_SOURCE_RETURN_SCHEMA_MISMATCH otherwise), so batches are built from that very
Arrow schema rather than from a hand-written one.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from orbitmq.spark.decode import Columns

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["read_schema", "arrow_read_schema", "to_record_batch", "READ_COLUMNS"]

READ_COLUMNS = ("topic", "broker_name", "queue_id", "queue_offset", "msg_id", "keys", "tags",
                "body", "properties", "born_timestamp", "store_timestamp", "reconsume_times")


def read_schema() -> StructType:
    """topic, broker_name, queue_id, queue_offset, msg_id, keys, tags (null without a tag), body,
    properties (null unless includeProperties), born/store timestamps, reconsume_times."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType([
        StructField("topic", StringType(), False),
        StructField("broker_name", StringType(), False),
        StructField("queue_id", IntegerType(), False),
        StructField("queue_offset", LongType(), False),
        StructField("msg_id", StringType(), False),
        StructField("keys", ArrayType(StringType(), False), False),
        StructField("tags", StringType(), True),
        StructField("body", BinaryType(), False),
        StructField("properties", MapType(StringType(), StringType(), False), True),
        StructField("born_timestamp", TimestampType(), False),
        StructField("store_timestamp", TimestampType(), False),
        StructField("reconsume_times", IntegerType(), False),
    ])


@functools.cache
def arrow_read_schema() -> pa.Schema:
    """The Arrow schema Spark expects for :func:`read_schema` (cached per process)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(read_schema(), timezone="UTC")


def to_record_batch(cols: Columns) -> pa.RecordBatch:
    """The rows of ``cols`` as one RecordBatch of :func:`arrow_read_schema`."""
    import pyarrow as pa

    schema = arrow_read_schema()
    data: dict[str, Any] = {
        "topic": cols.topic,
        "broker_name": cols.broker_name,
        "queue_id": cols.queue_id,
        "queue_offset": cols.queue_offset,
        "msg_id": cols.msg_id,
        "keys": cols.keys,
        "tags": cols.tags,
        "body": cols.body,
        "properties": cols.properties,
        "born_timestamp": [ms * 1000 for ms in cols.born_ms],
        "store_timestamp": [ms * 1000 for ms in cols.store_ms],
        "reconsume_times": cols.reconsume_times,
    }
    arrays = [pa.array(data[field.name], type=field.type) for field in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
