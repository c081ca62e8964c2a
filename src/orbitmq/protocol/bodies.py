"""JSON bodies of the remoting protocol (routes, heartbeats, queue locks, topic configs...).

Every body is a dataclass deriving from JsonBody; one small mechanism maps it to and from JSON
using the field types (str, int, bool, IntEnum, nested bodies, ``list[...]``, ``dict[str|int, ...]``,
``X | None``) and Java's field names (camelCase of the Python name, or a ``json_field("...")``
override). What we write is standard JSON with quoted keys and enum names. What we read may be
what Java's fastjson writes: bare numeric object keys (``{0:"127.0.0.1:10911"}``) are quoted by a
pre-pass that skips string contents, and enums are accepted as names or as the ordinals the C++
client sends. Malformed bodies raise RemoteProtocolError naming the field.

Integer fields carry their range in their type as headers do (``I32``, ``U64``, ``bits(...)``, see
``_lenient``): a body that parses holds only values the broker can store and persist.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Self

import orjson

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol._lenient import (
    I32,
    I64,
    PERM_MASK,
    TOPIC_SYS_FLAG_MASK,
    U32,
    U64,
    IntRange,
    OneOf,
    bad_value,
    bits,
    camel,
    parse_bool,
    parse_int,
    parse_str,
)

__all__ = [
    "JsonBody",
    "json_field",
    "loads_lenient",
    "ConsumeType",
    "MessageModel",
    "ConsumeFromWhere",
    "ExpressionType",
    "Perm",
    "MessageQueue",
    "QueueData",
    "BrokerData",
    "TopicRouteData",
    "SubscriptionData",
    "ConsumerData",
    "ProducerData",
    "HeartbeatData",
    "CheckClientRequestBody",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "UnlockBatchRequestBody",
    "ConsumerListBody",
    "TopicConfig",
    "DataVersion",
    "TopicConfigSerializeWrapper",
    "RegisterBrokerBody",
    "ClusterInfo",
    "TopicList",
]


# ------------------------------------------------------------------------------- enums
class ConsumeType(enum.IntEnum):
    """Java's ConsumeType; values are the ordinals the C++ client sends."""

    CONSUME_ACTIVELY = 0  # pull consumer
    CONSUME_PASSIVELY = 1  # push consumer


class MessageModel(enum.IntEnum):
    BROADCASTING = 0
    CLUSTERING = 1


class ConsumeFromWhere(enum.IntEnum):
    CONSUME_FROM_LAST_OFFSET = 0
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = 1  # deprecated in RocketMQ
    CONSUME_FROM_MIN_OFFSET = 2  # deprecated in RocketMQ
    CONSUME_FROM_MAX_OFFSET = 3  # deprecated in RocketMQ
    CONSUME_FROM_FIRST_OFFSET = 4
    CONSUME_FROM_TIMESTAMP = 5


class ExpressionType(enum.StrEnum):
    """Values of SubscriptionData.expression_type (a plain string on the wire)."""

    TAG = "TAG"
    SQL92 = "SQL92"


class Perm(enum.IntFlag):
    """Java's PermName bits of a topic or queue."""

    INHERIT = 1
    WRITE = 2
    READ = 4
    PRIORITY = 8


PermBits = Annotated[int, bits(PERM_MASK, "PermName bits")]
TopicSysFlagBits = Annotated[int, bits(TOPIC_SYS_FLAG_MASK, "TopicSysFlag bits")]
TopicFilterType = Annotated[str, OneOf(("SINGLE_TAG", "MULTI_TAG"))]


# ------------------------------------------------------------------------------- lenient JSON
# A JSON string (skipped as is) or a bare integer object key after '{' or ',' (quoted).
_BARE_KEY = re.compile(rb'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)', re.DOTALL)


def _quote_key(match: re.Match[bytes]) -> bytes:
    if match.group(1) is None:
        return match.group(0)
    return match.group(1) + b'"' + match.group(2) + b'"' + match.group(3)


def loads_lenient(data: bytes | bytearray | memoryview | str) -> Any:
    """Parses JSON, also accepting fastjson's bare numeric object keys.

    Raises:
        RemoteProtocolError: not JSON even after quoting bare keys.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    raw = data.encode() if isinstance(data, str) else bytes(data)
    try:
        return orjson.loads(_BARE_KEY.sub(_quote_key, raw))
    except orjson.JSONDecodeError as exc:
        raise RemoteProtocolError(f"body is not valid JSON: {exc}") from None


# ------------------------------------------------------------------------------- the mechanism
_Load = Callable[[Any, str], Any]
_Dump = Callable[[Any], Any]


def json_field(name: str, *, aliases: tuple[str, ...] = (), mirror: bool = False,
               **kwargs: Any) -> Any:
    """A dataclass field with an explicit JSON name; ``aliases`` are also read, and with
    ``mirror`` also written (for names that differ between RocketMQ versions)."""
    return dataclasses.field(metadata={"json": name, "aliases": aliases, "mirror": mirror},
                             **kwargs)


def _enum_codec(tp: type[enum.IntEnum]) -> tuple[_Load, _Dump]:
    def load(value: Any, where: str) -> Any:
        if isinstance(value, str):
            member = tp.__members__.get(value.strip())
            if member is not None:
                return member
            try:
                value = int(value)
            except ValueError:
                raise bad_value(where, f"a {tp.__name__} name", value) from None
        if type(value) is int:
            try:
                return tp(value)
            except ValueError:
                pass
        raise bad_value(where, f"a {tp.__name__}", value)

    return load, lambda member: tp(member).name


def _checked(tp: Any) -> tuple[_Load, _Dump]:
    """(load, dump) of an ``Annotated[int | str, IntRange | OneOf]`` field: parsed, then checked."""
    base, *extras = typing.get_args(tp)
    check = next((e for e in extras if isinstance(e, IntRange | OneOf)), None)
    if isinstance(check, IntRange) and base is int:
        int_range = check

        def load_int(value: Any, where: str) -> Any:
            return int_range.check(parse_int(value, where), where)

        return load_int, lambda v: v
    if isinstance(check, OneOf) and base is str:
        one_of = check

        def load_str(value: Any, where: str) -> Any:
            return one_of.check(parse_str(value, where), where)

        return load_str, lambda v: v
    raise TypeError(f"unsupported annotated body field type {tp!r}")


def _codec(tp: Any) -> tuple[_Load, _Dump]:
    """(load, dump) for one field type; TypeError for a type the mechanism does not support
    (an integer without its range is one)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        return _checked(tp)
    if isinstance(tp, types.UnionType) or origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"unsupported union {tp}")
        load_inner, dump_inner = _codec(inner[0])
        return (lambda v, w: None if v is None else load_inner(v, w),
                lambda v: None if v is None else dump_inner(v))
    if origin is list:
        load_item, dump_item = _codec(args[0])

        def load_list(value: Any, where: str) -> list[Any]:
            if not isinstance(value, list):
                raise bad_value(where, "an array", value)
            return [load_item(item, f"{where}[{i}]") for i, item in enumerate(value)]

        return load_list, lambda v: [dump_item(item) for item in v]
    if origin is dict:
        load_key = _codec(args[0])[0] if typing.get_origin(args[0]) is Annotated else parse_str
        load_value, dump_value = _codec(args[1])

        def load_dict(value: Any, where: str) -> dict[Any, Any]:
            if not isinstance(value, dict):
                raise bad_value(where, "an object", value)
            return {load_key(k, f"{where} key"): load_value(v, f"{where}[{k!r}]")
                    for k, v in value.items()}

        return load_dict, lambda v: {str(k): dump_value(item) for k, item in v.items()}
    if isinstance(tp, type) and issubclass(tp, JsonBody):
        return tp._load, lambda v: v.to_dict()
    if isinstance(tp, type) and issubclass(tp, enum.IntEnum):
        return _enum_codec(tp)
    simple: dict[Any, _Load] = {str: parse_str, bool: parse_bool}
    if tp in simple:
        return simple[tp], lambda v: v
    raise TypeError(f"unsupported body field type {tp!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldCodec:
    name: str
    json_names: tuple[str, ...]  # the first is written; all are read, in order
    mirror: bool
    required: bool
    load: _Load
    dump: _Dump


# Per-class codecs, derived once from the class definition and never changed afterwards.
_CODECS: dict[type, tuple[_FieldCodec, ...]] = {}


def _fields_of(cls: type) -> tuple[_FieldCodec, ...]:
    cached = _CODECS.get(cls)
    if cached is None:
        cached = _CODECS[cls] = _derive_codecs(cls)
    return cached


def _derive_codecs(cls: type) -> tuple[_FieldCodec, ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    codecs = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        names = (f.metadata.get("json", camel(f.name)), *f.metadata.get("aliases", ()))
        load, dump = _codec(hints[f.name])
        codecs.append(_FieldCodec(f.name, names, bool(f.metadata.get("mirror")), required,
                                  load, dump))
    return tuple(codecs)


class JsonBody:
    """Base of every JSON body: ``to_json``/``from_json`` and their dict forms."""

    __slots__ = ()

    @classmethod
    def _load(cls, value: Any, where: str) -> Self:
        if not isinstance(value, dict):
            raise bad_value(where, f"a {cls.__name__} object", value)
        kwargs: dict[str, Any] = {}
        for codec in _fields_of(cls):
            raw = next((value[n] for n in codec.json_names if value.get(n) is not None), None)
            if raw is None:
                if codec.required:
                    raise RemoteProtocolError(f"{where}: missing field {codec.json_names[0]!r}")
                continue
            kwargs[codec.name] = codec.load(raw, f"{where}.{codec.json_names[0]}")
        return cls(**kwargs)

    @classmethod
    def from_dict(cls, value: Any) -> Self:
        """Builds the body from parsed JSON.

        Raises:
            RemoteProtocolError: wrong shape, a missing required field, or a bad value.
        """
        return cls._load(value, cls.__name__)

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """Parses a body as Java, Go or the C++ client writes it (see the module docstring)."""
        return cls.from_dict(loads_lenient(data))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data with Java's field names; None fields left out like fastjson."""
        out: dict[str, Any] = {}
        for codec in _fields_of(type(self)):
            value = getattr(self, codec.name)
            if value is None:
                continue
            dumped = codec.dump(value)
            for name in codec.json_names if codec.mirror else codec.json_names[:1]:
                out[name] = dumped
        return out

    def to_json(self) -> bytes:
        """Standard JSON (quoted keys, enum names), ready to be a command body."""
        return orjson.dumps(self.to_dict())


# ------------------------------------------------------------------------------- routes
@dataclasses.dataclass(frozen=True, order=True, slots=True)
class MessageQueue(JsonBody):
    """One queue of a topic on one broker; orders like Java's (topic, broker, queue id)."""

    topic: str
    broker_name: str
    queue_id: U32


@dataclasses.dataclass(slots=True)
class QueueData(JsonBody):
    """A topic's queues on one broker. RocketMQ 4.x names the last field ``topicSynFlag`` and 5.x
    ``topicSysFlag``: both are read and both written."""

    broker_name: str
    read_queue_nums: U32
    write_queue_nums: U32
    perm: PermBits
    topic_sys_flag: TopicSysFlagBits = json_field("topicSysFlag", aliases=("topicSynFlag",),
                                                  mirror=True, default=0)


@dataclasses.dataclass(slots=True)
class BrokerData(JsonBody):
    """A broker group: id 0 is the master, ids above are slaves."""

    cluster: str
    broker_name: str
    broker_addrs: dict[U64, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class TopicRouteData(JsonBody):
    """Answer of GET_ROUTEINFO_BY_TOPIC."""

    queue_datas: list[QueueData] = dataclasses.field(default_factory=list)
    broker_datas: list[BrokerData] = dataclasses.field(default_factory=list)
    order_topic_conf: str | None = None
    filter_server_table: dict[str, list[str]] = dataclasses.field(default_factory=dict)


# ------------------------------------------------------------------------------- heartbeat
@dataclasses.dataclass(slots=True)
class SubscriptionData(JsonBody):
    """One topic subscription of a consumer group; code_set holds the tags' Java hash codes."""

    topic: str
    sub_string: str = "*"
    tags_set: list[str] = dataclasses.field(default_factory=list)
    code_set: list[I32] = dataclasses.field(default_factory=list)
    sub_version: I64 = 0
    class_filter_mode: bool = False
    expression_type: str = ExpressionType.TAG.value


@dataclasses.dataclass(slots=True)
class ConsumerData(JsonBody):
    """A consumer group as one client runs it (the C++ pull consumer sends no subscriptions)."""

    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscription_data_set: list[SubscriptionData] = dataclasses.field(default_factory=list)
    unit_mode: bool = False


@dataclasses.dataclass(slots=True)
class ProducerData(JsonBody):
    group_name: str


@dataclasses.dataclass(slots=True)
class HeartbeatData(JsonBody):
    """Body of HEART_BEAT; client_id looks like ``pid-ip@instance`` from the C++ client."""

    client_id: str = json_field("clientID")
    producer_data_set: list[ProducerData] = dataclasses.field(default_factory=list)
    consumer_data_set: list[ConsumerData] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class CheckClientRequestBody(JsonBody):
    """Body of CHECK_CLIENT_CONFIG: a consumer asks, before it starts, whether the broker can
    filter by its subscription (Java clients send it for non-TAG subscriptions)."""

    client_id: str = ""
    group: str = ""
    subscription_data: SubscriptionData | None = None


# ------------------------------------------------------------------------------- queue locks
@dataclasses.dataclass(slots=True)
class LockBatchRequestBody(JsonBody):
    """Body of LOCK_BATCH_MQ (orderly consumption)."""

    consumer_group: str
    client_id: str
    mq_set: list[MessageQueue] = dataclasses.field(default_factory=list)
    only_this_broker: bool = False


@dataclasses.dataclass(slots=True)
class LockBatchResponseBody(JsonBody):
    lock_ok_mq_set: list[MessageQueue] = json_field("lockOKMQSet", default_factory=list)


@dataclasses.dataclass(slots=True)
class UnlockBatchRequestBody(JsonBody):
    """Body of UNLOCK_BATCH_MQ."""

    consumer_group: str
    client_id: str
    mq_set: list[MessageQueue] = dataclasses.field(default_factory=list)
    only_this_broker: bool = False


@dataclasses.dataclass(slots=True)
class ConsumerListBody(JsonBody):
    """Answer of GET_CONSUMER_LIST_BY_GROUP (Java's GetConsumerListByGroupResponseBody)."""

    consumer_id_list: list[str] = dataclasses.field(default_factory=list)


# ------------------------------------------------------------------------------- topics & cluster
@dataclasses.dataclass(slots=True)
class TopicConfig(JsonBody):
    """A topic as a broker holds it; defaults are Java's."""

    topic_name: str
    read_queue_nums: U32 = 16
    write_queue_nums: U32 = 16
    perm: PermBits = int(Perm.READ | Perm.WRITE)
    topic_filter_type: TopicFilterType = "SINGLE_TAG"
    topic_sys_flag: TopicSysFlagBits = 0
    order: bool = False
    # RocketMQ 5's attributes (protocol/topic_attributes.py): {"message.type": "FIFO"}; None
    # (left out of the JSON, as before attributes existed) when the topic has none.
    attributes: dict[str, str] | None = None


@dataclasses.dataclass(slots=True)
class DataVersion(JsonBody):
    """Version stamp of a broker's tables: a name server skips unchanged registrations."""

    timestamp: I64 = 0
    counter: I64 = 0


@dataclasses.dataclass(slots=True)
class TopicConfigSerializeWrapper(JsonBody):
    """Every topic of a broker (GET_ALL_TOPIC_CONFIG, and inside REGISTER_BROKER)."""

    topic_config_table: dict[str, TopicConfig] = dataclasses.field(default_factory=dict)
    data_version: DataVersion = dataclasses.field(default_factory=DataVersion)


@dataclasses.dataclass(slots=True)
class RegisterBrokerBody(JsonBody):
    """Body of REGISTER_BROKER when not compressed (Java's RegisterBrokerBody)."""

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = dataclasses.field(
        default_factory=TopicConfigSerializeWrapper
    )
    filter_server_list: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class ClusterInfo(JsonBody):
    """Answer of GET_BROKER_CLUSTER_INFO."""

    broker_addr_table: dict[str, BrokerData] = dataclasses.field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class TopicList(JsonBody):
    """Answer of GET_ALL_TOPIC_LIST_FROM_NAMESERVER and GET_TOPICS_BY_CLUSTER."""

    topic_list: list[str] = dataclasses.field(default_factory=list)
    broker_addr: str | None = None
