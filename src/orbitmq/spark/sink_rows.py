"""The sink's input columns: checked against the DataFrame's schema at query start, then turned
from Arrow record batches into SDK messages on executors.

Columns: ``body`` (binary or string, required), and optionally ``topic`` (string; the ``topic``
option wins over it, as in Kafka's sink), ``keys`` (string or array<string>), ``tags`` (string),
``properties`` (map<string,string>), ``queue_id`` (int: the n-th write queue of the topic, for FIFO
topics) or ``sharding_key`` (string: messages with the same key go to the same queue, in order).
Other columns are ignored, so a DataFrame read from OrbitMQ can be written back as it is.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from orbitmq.errors import SparkSchemaError
from orbitmq.protocol.message import Message, PropertyKey
from orbitmq.spark.options import WriteOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["SinkSchemaError", "ColumnPlan", "plan_columns", "Outgoing", "to_messages"]


SinkSchemaError = SparkSchemaError  # the name the connector's users know


@dataclasses.dataclass(frozen=True)
class ColumnPlan:
    """Which optional columns the input has (the kinds checked once, on the driver)."""

    body_is_string: bool
    topic: bool = False
    keys: str | None = None  # "string" or "array"
    tags: bool = False
    properties: bool = False
    queue_id: bool = False
    sharding_key: bool = False

    @property
    def selects_queue(self) -> bool:
        return self.queue_id or self.sharding_key


@dataclasses.dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to send, and how to pick its queue (None: the producer's round robin)."""

    message: Message
    queue_id: int | None = None
    sharding_key: str | None = None


def plan_columns(schema: StructType, opts: WriteOptions) -> ColumnPlan:
    """Check the input schema.

    Raises:
        SinkSchemaError: naming the first bad or missing column.
    """
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, MapType, StringType

    fields = {f.name: f.dataType for f in schema.fields}
    body = fields.get("body")
    if not isinstance(body, BinaryType | StringType):
        raise SinkSchemaError("body", "required, binary or string" +
                              ("" if body is None else f"; got {body.simpleString()}"))

    def check(name: str, ok: bool, expected: str) -> bool:
        if name not in fields:
            return False
        if not ok:
            raise SinkSchemaError(name, f"expected {expected}, got {fields[name].simpleString()}")
        return True

    keys_type = fields.get("keys")
    keys = check("keys", isinstance(keys_type, StringType) or (
        isinstance(keys_type, ArrayType) and isinstance(keys_type.elementType, StringType)),
        "string or array<string>")
    props_type = fields.get("properties")
    plan = ColumnPlan(
        body_is_string=isinstance(body, StringType),
        topic=check("topic", isinstance(fields.get("topic"), StringType), "string"),
        keys=("string" if isinstance(keys_type, StringType) else "array") if keys else None,
        tags=check("tags", isinstance(fields.get("tags"), StringType), "string"),
        properties=check("properties", isinstance(props_type, MapType) and isinstance(
            props_type.keyType, StringType) and isinstance(props_type.valueType, StringType),
            "map<string,string>"),
        queue_id=check("queue_id", isinstance(fields.get("queue_id"), IntegerType | LongType),
                       "int or bigint"),
        sharding_key=check("sharding_key", isinstance(fields.get("sharding_key"), StringType),
                           "string"),
    )
    if opts.topic is None and not plan.topic:
        raise SinkSchemaError("topic", "no 'topic' column and no 'topic' option")
    if plan.queue_id and plan.sharding_key:
        raise SinkSchemaError("sharding_key", "give either queue_id or sharding_key, not both")
    if opts.exactly_once and plan.selects_queue:
        raise SinkSchemaError("queue_id" if plan.queue_id else "sharding_key",
                              "exactly-once writes use transactional messages, which cannot "
                              "choose their queue; drop the column or set exactlyOnce=false")
    return plan


def _column(rb: pa.RecordBatch, name: str, present: bool) -> list[Any] | None:
    return rb.column(name).to_pylist() if present else None


def to_messages(rb: pa.RecordBatch, plan: ColumnPlan, opts: WriteOptions) -> list[Outgoing]:
    """The rows of one Arrow batch as messages.

    Raises:
        SinkSchemaError: a row without body or topic.
    """
    bodies = rb.column("body").to_pylist()
    topics = _column(rb, "topic", plan.topic and opts.topic is None)
    keys = _column(rb, "keys", plan.keys is not None)
    tags = _column(rb, "tags", plan.tags)
    props = _column(rb, "properties", plan.properties)
    qids = _column(rb, "queue_id", plan.queue_id)
    shards = _column(rb, "sharding_key", plan.sharding_key)
    out = []
    for i, body in enumerate(bodies):
        if body is None:
            raise SinkSchemaError("body", "a row has a null body")
        topic = topics[i] if topics is not None else opts.topic
        if not topic:
            raise SinkSchemaError("topic", "a row has a null topic and there is no topic option")
        properties = dict(props[i]) if props is not None and props[i] else {}
        shard = shards[i] if shards is not None else None
        if shard is not None:
            properties[PropertyKey.SHARDING_KEY] = shard
        key = keys[i] if keys is not None else None
        msg = Message(topic, body.encode() if isinstance(body, str) else body,
                      tags=tags[i] if tags is not None else None,
                      keys=([key] if isinstance(key, str) else list(key)) if key else None,
                      properties=properties)
        out.append(Outgoing(msg, qids[i] if qids is not None else None, shard))
    return out
