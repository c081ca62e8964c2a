"""The sink's input columns: checked against the DataFrame's schema at query start, then turned
from Arrow record batches into SDK messages on executors.

Columns: ``body`` (binary or string, required), and optionally ``topic`` (string; the ``topic``
option wins over it, as in Kafka's sink), ``keys`` (string or array<string>), ``tags`` (string),
``properties`` (map<string,string>), ``queue_id`` (int: the n-th write queue of the topic, for FIFO
topics) or ``sharding_key`` (string: messages with the same key go to the same queue, in order).

A DataFrame shaped for Kafka's sink works as it is: ``value`` is the body, ``key`` (binary or
string) the one key, ``headers`` (array<struct<key: string, value: binary>>) user properties and
``partition`` the queue; so a job moves from Kafka by changing the format name. Properties named
as the system's (KEYS, TAGS, UNIQ_KEY...: what a DataFrame read with includeProperties holds) are
left out: the sink sets those itself. Other columns are ignored, so a DataFrame read from OrbitMQ
can be written back as it is.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from orbitmq.errors import SparkSchemaError
from orbitmq.protocol.column_batch import BufferColumn, MessageColumns
from orbitmq.protocol.message import Message, PropertyKey
from orbitmq.spark.decode import SYSTEM_PROPERTIES
from orbitmq.spark.options import WriteOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

__all__ = ["SinkSchemaError", "ColumnPlan", "plan_columns", "Outgoing", "to_messages",
           "to_columns", "TopicColumns"]


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
    body_column: str = "body"  # or Kafka's "value"
    keys_column: str = "keys"  # or Kafka's "key" (string or binary: "string" / "binary" kind)
    headers: bool = False  # Kafka's headers, as user properties
    queue_column: str = "queue_id"  # or Kafka's "partition"

    @property
    def selects_queue(self) -> bool:
        return self.queue_id or self.sharding_key


@dataclasses.dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to send, and how to pick its queue (None: the producer's round robin)."""

    message: Message
    queue_id: int | None = None
    sharding_key: str | None = None


def _either(fields: dict[str, Any], ours: str, kafkas: str) -> str | None:
    if ours in fields and kafkas in fields:
        raise SinkSchemaError(kafkas, f"give either {ours!r} or {kafkas!r} (Kafka's name), not both")
    return ours if ours in fields else kafkas if kafkas in fields else None


def _headers_type_ok(t: DataType | None) -> bool:
    from pyspark.sql.types import ArrayType, BinaryType, StringType, StructType

    if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
        return False
    kinds = {f.name: f.dataType for f in t.elementType.fields}
    return (set(kinds) == {"key", "value"} and isinstance(kinds["key"], StringType)
            and isinstance(kinds["value"], BinaryType | StringType))


def plan_columns(schema: StructType, opts: WriteOptions) -> ColumnPlan:
    """Check the input schema.

    Raises:
        SinkSchemaError: naming the first bad or missing column.
    """
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, MapType, StringType

    fields = {f.name: f.dataType for f in schema.fields}
    body_column = _either(fields, "body", "value") or "body"
    body = fields.get(body_column)
    if not isinstance(body, BinaryType | StringType):
        raise SinkSchemaError("body", "required (or Kafka's 'value'), binary or string" +
                              ("" if body is None else f"; got {body.simpleString()}"))

    def check(name: str, ok: bool, expected: str) -> bool:
        if name not in fields:
            return False
        if not ok:
            raise SinkSchemaError(name, f"expected {expected}, got {fields[name].simpleString()}")
        return True

    keys_column = _either(fields, "keys", "key") or "keys"
    keys_type = fields.get(keys_column)
    keys = check(keys_column, isinstance(keys_type, StringType) or (
        keys_column == "key" and isinstance(keys_type, BinaryType)) or (
        keys_column == "keys" and isinstance(keys_type, ArrayType)
        and isinstance(keys_type.elementType, StringType)),
        "string or binary" if keys_column == "key" else "string or array<string>")
    props_type = fields.get("properties")
    queue_column = _either(fields, "queue_id", "partition") or "queue_id"
    plan = ColumnPlan(
        body_is_string=isinstance(body, StringType),
        topic=check("topic", isinstance(fields.get("topic"), StringType), "string"),
        keys=(("array" if isinstance(keys_type, ArrayType) else
               "binary" if isinstance(keys_type, BinaryType) else "string") if keys else None),
        tags=check("tags", isinstance(fields.get("tags"), StringType), "string"),
        properties=check("properties", isinstance(props_type, MapType) and isinstance(
            props_type.keyType, StringType) and isinstance(props_type.valueType, StringType),
            "map<string,string>"),
        queue_id=check(queue_column, isinstance(fields.get(queue_column), IntegerType | LongType),
                       "int or bigint"),
        sharding_key=check("sharding_key", isinstance(fields.get("sharding_key"), StringType),
                           "string"),
        body_column=body_column, keys_column=keys_column, queue_column=queue_column,
        headers=check("headers", _headers_type_ok(fields.get("headers")),
                      "array<struct<key: string, value: binary>> (Kafka's headers)"),
    )
    if opts.topic is None and not plan.topic:
        raise SinkSchemaError("topic", "no 'topic' column and no 'topic' option")
    if plan.queue_id and plan.sharding_key:
        raise SinkSchemaError("sharding_key", f"give either {queue_column} or sharding_key, not both")
    if opts.exactly_once and plan.selects_queue:
        raise SinkSchemaError(queue_column if plan.queue_id else "sharding_key",
                              "exactly-once writes use transactional messages, which cannot "
                              "choose their queue; drop the column or set exactlyOnce=false")
    return plan


def _column(rb: pa.RecordBatch, name: str, present: bool) -> list[Any] | None:
    return rb.column(name).to_pylist() if present else None


def _text(value: bytes | str, column: str) -> str:
    if isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise SinkSchemaError(column, "a value is not UTF-8 text (OrbitMQ keys and properties "
                                      "are text)") from None


def _properties(props: Any, headers: Any) -> dict[str, str]:
    """A row's user properties: its headers, then its properties map (system names dropped)."""
    out: dict[str, str] = {}
    for header in headers or ():
        if header is not None and header["key"] is not None and header["value"] is not None:
            out[header["key"]] = _text(header["value"], "headers")
    for name, value in (props or ()):
        out[name] = value
    return {k: v for k, v in out.items() if k not in SYSTEM_PROPERTIES}


def _keys(key: Any, kind: str | None, column: str) -> list[str] | None:
    if not key:
        return None
    if kind == "array":
        return list(key)
    return [_text(key, column)]


def _message(topic: str, body: bytes, tags: str | None, keys: list[str] | None,
             properties: dict[str, str]) -> Message:
    """``Message.with_system_properties(topic, body, properties=..., tags=..., keys=...)`` without
    its constructor's reserved-name check, which costs more than the rest of a row (the sink's
    properties are user ones with the system's names dropped, plus the SHARDING_KEY it sets on
    purpose, as with_system_properties allows). tests/spark/test_spark_units.py checks it equal."""
    msg = _NEW_MESSAGE(Message)
    msg.__dict__.update(topic=topic, body=body, tags=tags, keys=keys, flag=0,
                        properties=properties, delay_level=0)
    return msg


_NEW_MESSAGE = object.__new__


def _per_row(values: list[Any] | None, default: Any, rows: int) -> list[Any]:
    return values if values is not None else [default] * rows


def to_messages(rb: pa.RecordBatch, plan: ColumnPlan, opts: WriteOptions) -> list[Outgoing]:
    """The rows of one Arrow batch as messages (column by column: a few microseconds a row).

    Raises:
        SinkSchemaError: a row without body or topic, a key or header value that is not text.
    """
    rows = rb.num_rows
    column = rb.column(plan.body_column)
    if column.null_count:
        raise SinkSchemaError(plan.body_column, "a row has a null body")
    bodies = column.to_pylist()
    if plan.body_is_string:
        bodies = [b.encode() for b in bodies]
    topics = _column(rb, "topic", plan.topic and opts.topic is None)
    if topics is not None and not all(topics):
        raise SinkSchemaError("topic", "a row has a null topic and there is no topic option")
    keys = _column(rb, plan.keys_column, plan.keys is not None)
    if keys is not None:
        keys = [_keys(k, plan.keys, plan.keys_column) for k in keys]
    props = _column(rb, "properties", plan.properties)
    headers = _column(rb, "headers", plan.headers)
    shards = _column(rb, "sharding_key", plan.sharding_key)
    if props is not None or headers is not None:
        properties = [_properties(p, h) for p, h in zip(_per_row(props, None, rows),
                                                          _per_row(headers, None, rows),
                                                          strict=True)]
    else:
        properties = [{} for _ in range(rows)]
    if shards is not None:
        for row_properties, shard in zip(properties, shards, strict=True):
            if shard is not None:
                row_properties[PropertyKey.SHARDING_KEY] = shard
    messages = [_message(topic, body, tag, key, props_) for topic, body, tag, key, props_ in zip(
        _per_row(topics, opts.topic, rows), bodies,
        _per_row(_column(rb, "tags", plan.tags), None, rows), _per_row(keys, None, rows),
        properties, strict=True)]
    qids = _column(rb, plan.queue_column, plan.queue_id)
    if qids is None and shards is None:
        return [Outgoing(m) for m in messages]
    return [Outgoing(m, q, sh) for m, q, sh in zip(messages, _per_row(qids, None, rows),
                                                   _per_row(shards, None, rows), strict=True)]


# -- columns: the rows of a batch as the SDK's column encoder reads them --------------------------
TopicColumns = tuple[str, MessageColumns]


def _buffers(array: pa.Array) -> BufferColumn:
    """An Arrow binary or string array read in place (large ones cast to 32-bit offsets)."""
    import pyarrow as pa

    if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
        array = array.cast(pa.string() if pa.types.is_large_string(array.type) else pa.binary())
    validity, offsets, data = array.buffers()[:3]
    return BufferColumn(offsets, data if data is not None else b"",
                        validity if array.null_count else None, array.offset, len(array))


def _keys_column(rb: pa.RecordBatch, plan: ColumnPlan) -> BufferColumn | None:
    """Per row the KEYS text: an array's keys joined by spaces, Kafka's binary key as text."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if plan.keys is None:
        return None
    column = rb.column(plan.keys_column)
    if plan.keys == "array":
        if column.flatten().null_count:
            raise SinkSchemaError(plan.keys_column, "an array of keys holds a null")
        # one list type for the kernel (Spark marks elements "not null", or gives large lists)
        column = pc.binary_join(column.cast(pa.list_(pa.string())), " ")
    elif plan.keys == "binary":
        try:
            column = column.cast(pa.string())
        except pa.ArrowInvalid:
            raise SinkSchemaError(plan.keys_column, "a value is not UTF-8 text (OrbitMQ keys and "
                                                    "properties are text)") from None
    return _buffers(column)


def _row_properties(rb: pa.RecordBatch, plan: ColumnPlan) -> list[Any] | None:
    """Per row the user properties (headers, then the properties map), or None for none."""
    if not plan.properties and not plan.headers:
        return None
    rows = rb.num_rows
    props = _column(rb, "properties", plan.properties)
    headers = _column(rb, "headers", plan.headers)
    return [_properties(p, h) or None for p, h in zip(_per_row(props, None, rows),
                                                      _per_row(headers, None, rows), strict=True)]


def _one_topic(rb: pa.RecordBatch, plan: ColumnPlan) -> MessageColumns:
    body = rb.column(plan.body_column)
    if body.null_count:
        raise SinkSchemaError(plan.body_column, "a row has a null body")
    return MessageColumns(bodies=_buffers(body), keys=_keys_column(rb, plan),
                          tags=_buffers(rb.column("tags")) if plan.tags else None,
                          properties=_row_properties(rb, plan))


def to_columns(rb: pa.RecordBatch, plan: ColumnPlan, opts: WriteOptions) -> list[TopicColumns]:
    """The rows of one Arrow batch without a queue choice as (topic, columns), one per topic in
    order of first appearance: Arrow buffers handed to the SDK's column encoder as they are, no
    Python object per row (but for property maps and headers, which are per-row dicts).

    Raises:
        SinkSchemaError: a row without body or topic, a key or header value that is not text.
    """
    import pyarrow.compute as pc

    assert not plan.selects_queue, "rows with a queue choice go out one by one (to_messages)"
    if rb.num_rows == 0:
        return []
    if opts.topic is not None or not plan.topic:
        assert opts.topic is not None
        return [(opts.topic, _one_topic(rb, plan))]
    topics = rb.column("topic")
    if topics.null_count or not pc.all(pc.greater(pc.utf8_length(topics), 0)).as_py():
        raise SinkSchemaError("topic", "a row has a null topic and there is no topic option")
    names = topics.unique().to_pylist()
    if len(names) == 1:
        return [(names[0], _one_topic(rb, plan))]
    return [(name, _one_topic(rb.filter(pc.equal(topics, name)), plan)) for name in names]
