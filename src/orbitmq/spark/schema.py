"""The source's schema, the columns a read is asked for, and what reading them needs.

PySpark checks every RecordBatch a Python source yields against
``to_arrow_schema(schema, timezone="UTC")`` field by field, nullability and nested field names
included (DATA_SOURCE_RETURN_SCHEMA_MISMATCH otherwise), so batches are built from that very
Arrow schema rather than from a hand-written one.

Column pruning: PySpark 4.3 tells a Python source neither which columns a query uses (its scan
builder implements filter pushdown only, not SupportsPushDownRequiredColumns) nor anything else
about the query, so ``df.count()`` reads every column. A reader declares the columns it needs with
a user-specified schema instead, ``spark.read.format("orbitmq").schema("queue_offset long")``: any
subset of the source's columns, in any order, with the source's types. The source then decodes
only those (``ReadPlan.want``), and a read of nothing but topic, broker_name, queue_id and
queue_offset without tags or sql pulls no message at all: its rows are the queue offsets, checked
against the queues' bounds.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import TYPE_CHECKING

from orbitmq.errors import SparkSchemaError
from orbitmq.protocol.stored import COLUMN_BODY, COLUMN_KEYS, COLUMN_MSG_ID, COLUMN_TAGS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["read_schema", "ReadPlan", "read_plan", "check_read_schema", "READ_COLUMNS",
           "OFFSET_COLUMNS", "HEADERS"]

READ_COLUMNS = ("topic", "broker_name", "queue_id", "queue_offset", "msg_id", "keys", "tags",
                "body", "properties", "born_timestamp", "store_timestamp", "reconsume_times")
HEADERS = "headers"  # with includeHeaders: Kafka's headers, the user properties
OFFSET_COLUMNS = frozenset({"topic", "broker_name", "queue_id", "queue_offset"})
_WANT = {"body": COLUMN_BODY, "tags": COLUMN_TAGS, "msg_id": COLUMN_MSG_ID, "keys": COLUMN_KEYS}
_NULLABLE = frozenset({"tags", "properties", HEADERS})  # may hold nulls: never declared NOT NULL


def read_schema(include_headers: bool = False) -> StructType:
    """topic, broker_name, queue_id, queue_offset, msg_id, keys, tags (null without a tag), body,
    properties (null unless includeProperties), born/store timestamps, reconsume_times; and with
    ``include_headers`` Kafka's ``headers`` (array of key/value structs)."""
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

    fields = [
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
    ]
    if include_headers:  # Kafka's type: array<struct<key: string, value: binary>>
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField(HEADERS, ArrayType(header), True))
    return StructType(fields)


def _plain(data_type: object) -> str:
    """A type without nullability, to compare a declared column's type with the source's."""
    return str(getattr(data_type, "simpleString", lambda: data_type)())


def check_read_schema(schema: StructType, include_headers: bool) -> None:
    """Check a user-specified schema: each column one of the source's, with its type.

    Raises:
        SparkSchemaError: naming the first column the source cannot fill.
    """
    ours = {f.name: f for f in read_schema(include_headers).fields}
    seen: set[str] = set()
    for field in schema.fields:
        own = ours.get(field.name)
        if own is None:
            extra = "" if include_headers or field.name != HEADERS else "; set includeHeaders=true"
            raise SparkSchemaError(field.name, f"the orbitmq source has no such column{extra} "
                                   f"(columns: {', '.join(ours)})")
        if _plain(field.dataType) != _plain(own.dataType):
            raise SparkSchemaError(field.name, f"the orbitmq source gives "
                                   f"{own.dataType.simpleString()}, not "
                                   f"{field.dataType.simpleString()}")
        if field.name in _NULLABLE and not field.nullable:
            raise SparkSchemaError(field.name, "may be null: declare it nullable")
        if field.name in seen:
            raise SparkSchemaError(field.name, "declared twice")
        seen.add(field.name)


@dataclasses.dataclass(frozen=True)
class ReadPlan:
    """What reading a schema's columns needs.

    Attributes:
        schema: the Arrow schema batches are built for (PySpark's, exactly).
        want: the stored codec's COLUMN_* bits to decode (tags too when filtering by them).
        properties: fill ``properties`` (includeProperties) / headers: fill ``headers``.
        offsets_only: no column needs a message and nothing filters: no pull at all.
    """

    schema: pa.Schema
    want: int
    properties: bool
    headers: bool
    offsets_only: bool


@functools.lru_cache(maxsize=64)
def _plan(schema_json: str, include_properties: bool, tag_filter: bool, sql_filter: bool) -> ReadPlan:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    schema = StructType.fromJson(json.loads(schema_json))
    names = [f.name for f in schema.fields]
    want = COLUMN_TAGS if tag_filter else 0
    for name in names:
        want |= _WANT.get(name, 0)
    return ReadPlan(to_arrow_schema(schema, timezone="UTC"), want,
                    include_properties and "properties" in names, HEADERS in names,
                    not tag_filter and not sql_filter and set(names) <= OFFSET_COLUMNS)


def read_plan(schema: StructType, include_properties: bool, tag_filter: bool,
              sql_filter: bool) -> ReadPlan:
    """The plan of a read of ``schema``'s columns (cached per process: every task asks);
    ``tag_filter``: rows are kept by their tag here, ``sql_filter``: the broker filters."""
    return _plan(schema.json(), include_properties, tag_filter, sql_filter)
