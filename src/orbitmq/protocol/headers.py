"""Typed request/response headers: the ``extFields`` of a RemotingCommand as dataclasses.

One small mechanism serves every header: the wire name of a field is its camelCase name (or the
``wire("...")`` override where RocketMQ spells it otherwise, e.g. ``clientID``), its type (``int``,
``str``, ``bool``, optionally ``| None``) says how to parse it, and a field without a default is
required. Parsing is lenient the way real clients need: numbers may come as strings or JSON numbers
(the C++ client sends ``queueId`` as a number), booleans as ``"true"``/``"True"``/``"1"``/``1``, and an
empty string counts as absent for a number, a boolean or an optional string (the C++ client sends
the group that does not apply as ``""``). Writing always produces strings Java parses: integers in
decimal, booleans as ``"true"``/``"false"``, ``None`` fields left out.

Field names and which ones are required follow RocketMQ 4.x's header classes (``@CFNotNull``).
Every integer field states its range in its type (see ``_lenient``): ``I32``/``I64`` for Java's
``Integer``/``Long``, ``U32``/``U64`` where a negative value means nothing (queue ids, counts,
offsets), narrower ranges where -1 is a real value, and ``bits(...)`` for flag words. A value out
of range is refused where it is parsed, with a RemoteProtocolError naming the field; the server
answers it with the request family's code (``codes.bad_request_code``).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self

from orbitmq.protocol._fast_headers import pull_fast, send_v2_fast
from orbitmq.protocol._header_codec import _decode, _encode, _spec
from orbitmq.protocol._lenient import (
    I32,
    I32_MAX,
    I64,
    I64_MAX,
    PERM_MASK,
    PULL_SYS_FLAG_MASK,
    SEND_SYS_FLAG_MASK,
    TOPIC_SYS_FLAG_MASK,
    TRANSACTION_TYPE_MASK,
    U32,
    U64,
    OneOf,
    bits,
    int_choices,
    int_range,
)
from orbitmq.protocol.topics import DEFAULT_TOPIC

__all__ = [
    "Header",
    "wire",
    "PullSysFlag",
    "SendMessageRequestHeader",
    "SendMessageResponseHeader",
    "RecallMessageRequestHeader",
    "RecallMessageResponseHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "UpdateConsumerOffsetRequestHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "SearchOffsetByTimestampRequestHeader",
    "SearchOffsetByTimestampResponseHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "ViewMessageRequestHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    "GetRouteInfoRequestHeader",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "UnregisterBrokerRequestHeader",
    "UnregisterClientRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "NotifyConsumerIdsChangedRequestHeader",
    "CreateTopicRequestHeader",
    "DeleteTopicRequestHeader",
    "DeleteTopicFromNamesrvRequestHeader",
    "ConsumerSendMsgBackRequestHeader",
    "EndTransactionRequestHeader",
    "CheckTransactionStateRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "GetAllTopicConfigRequestHeader",
    "GetAllTopicConfigResponseHeader",
    "GetConsumeStatsRequestHeader",
    "ResetOffsetRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetTopicsByClusterRequestHeader",
    "QueryTopicConsumeByWhoRequestHeader",
    "GetConsumerStatusRequestHeader",
    "GetConsumerRunningInfoRequestHeader",
    "ConsumeMessageDirectlyResultRequestHeader",
    "DeleteSubscriptionGroupRequestHeader",
    "SEND_SYS_FLAG_MASK",
    "PULL_SYS_FLAG_MASK",
    "PERM_MASK",
    "TOPIC_SYS_FLAG_MASK",
    "TRANSACTION_TYPE_MASK",
    "TRANSACTION_VERDICTS",
    "TransactionVerdict",
]

SendSysFlag = Annotated[int, bits(SEND_SYS_FLAG_MASK, "MessageSysFlag bits")]
PullSysFlagBits = Annotated[int, bits(PULL_SYS_FLAG_MASK, "PullSysFlag bits")]
PermBits = Annotated[int, bits(PERM_MASK, "PermName bits")]
TopicSysFlag = Annotated[int, bits(TOPIC_SYS_FLAG_MASK, "TopicSysFlag bits")]
# A verdict is one of three values, not a flag word: a mask (0xC) would also pass 4, the sys
# flag's "prepared" type, which ends nothing.
TRANSACTION_VERDICTS = (0, 8, 12)  # MessageSysFlag's TRANSACTION_NOT/COMMIT/ROLLBACK_TYPE
TransactionVerdict = Annotated[int, int_choices(
    TRANSACTION_VERDICTS, "a transaction verdict: 0 (unknown), 8 (commit) or 12 (rollback)")]
# -1 is what clients send for "none": a pull's commitOffset without a stored offset, a default
# maxReconsumeTimes.
OffsetOrNone = Annotated[int, int_range(-1, I64_MAX, "-1 or a non-negative int64")]
TimesOrDefault = Annotated[int, int_range(-1, I32_MAX, "-1 or a non-negative int32")]
PositiveI32 = Annotated[int, int_range(1, I32_MAX, "a positive int32")]
TopicFilterType = Annotated[str, OneOf(("SINGLE_TAG", "MULTI_TAG"))]

def wire(name: str, **kwargs: Any) -> Any:
    """A dataclass field whose wire name is ``name`` instead of its derived camelCase name."""
    return dataclasses.field(metadata={"wire": name}, **kwargs)


class PullSysFlag(enum.IntFlag):
    """Bits of PullMessageRequestHeader.sys_flag."""

    COMMIT_OFFSET = 1  # commit_offset carries the consumer's offset to store
    SUSPEND = 2  # hold the request (long polling) when nothing is there yet
    SUBSCRIPTION = 4  # the request carries its subscription expression
    CLASS_FILTER = 8
    LITE_PULL = 16


class Header:
    """Base of every header dataclass: extFields in, extFields out."""

    __slots__ = ()

    @classmethod
    def from_ext_fields(cls, fields: Mapping[str, object]) -> Self:
        """Parses a command's extFields (unknown keys, like the C++ client's ACL fields, ignored).

        Raises:
            RemoteProtocolError: a required field is missing (the message names it) or a value
                does not parse as its type.
        """
        return typing.cast(Self, _decode(cls, fields, None))

    def to_ext_fields(self) -> dict[str, str]:
        """The extFields of this header: camelCase wire names, string values, None left out."""
        return _encode(self, None)

    @classmethod
    def wire_names(cls) -> dict[str, str]:
        """Python field name -> wire name, for tools and tests."""
        return {spec.name: spec.wire for spec in _spec(cls)}


# ------------------------------------------------------------------------------- send
@dataclasses.dataclass(slots=True)
class SendMessageRequestHeader(Header):
    """SEND_MESSAGE (10) with these names; SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320)
    carry the same fields under the one-letter names of ``V2_NAMES``."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: U32
    queue_id: I32  # negative: the broker picks a queue
    sys_flag: SendSysFlag
    born_timestamp: U64
    flag: I32
    properties: str | None = None
    reconsume_times: U32 = 0
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: TimesOrDefault | None = None
    broker_name: str | None = None

    V2_NAMES: ClassVar[Mapping[str, str]] = types.MappingProxyType({
        "producer_group": "a", "topic": "b", "default_topic": "c", "default_topic_queue_nums": "d",
        "queue_id": "e", "sys_flag": "f", "born_timestamp": "g", "flag": "h", "properties": "i",
        "reconsume_times": "j", "unit_mode": "k", "max_reconsume_times": "l", "batch": "m",
        "broker_name": "n",
    })

    @classmethod
    def from_v2_ext_fields(cls, fields: Mapping[str, object]) -> SendMessageRequestHeader:
        """Parses the short a..n names of SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE."""
        if cls is SendMessageRequestHeader and type(fields) is dict:
            fast = send_v2_fast(cls, fields)
            if fast is not None:
                return fast
        return typing.cast(SendMessageRequestHeader, _decode(cls, fields, cls.V2_NAMES))

    def to_v2_ext_fields(self) -> dict[str, str]:
        """The extFields under the short a..n names (smaller headers, what Java sends)."""
        return _encode(self, self.V2_NAMES)

    @classmethod
    def from_any_ext_fields(cls, fields: Mapping[str, object]) -> SendMessageRequestHeader:
        """Either naming, judged by the fields themselves: the C++ client sends V1 names under
        code 10 even for batches, Java sends V2 names under 310 and 320."""
        if "a" in fields and "producerGroup" not in fields:
            return cls.from_v2_ext_fields(fields)
        return cls.from_ext_fields(fields)


@dataclasses.dataclass(slots=True)
class SendMessageResponseHeader(Header):
    """Answer to a send; msg_id is the offset message id of the (first) stored message.
    ``master_epoch`` (OrbitMQ, controller mode): the epoch of the master that answered."""

    msg_id: str
    queue_id: I32
    queue_offset: I64
    transaction_id: str | None = None
    master_epoch: PositiveI32 | None = None
    recall_handle: str | None = None  # RocketMQ 5.3: a timer message's (protocol/recall_handle.py)


@dataclasses.dataclass(slots=True)
class RecallMessageRequestHeader(Header):
    """RECALL_MESSAGE (370, RocketMQ 5.3): the topic and the handle a timer message's send
    answered; ``brokerName`` is what a RocketMQ proxy adds (its RPC header), unused here."""

    topic: str
    recall_handle: str
    producer_group: str | None = None
    broker_name: str | None = None


@dataclasses.dataclass(slots=True)
class RecallMessageResponseHeader(Header):
    """Answer to RECALL_MESSAGE: the recalled message's id."""

    msg_id: str


# ------------------------------------------------------------------------------- pull & offsets
@dataclasses.dataclass(slots=True)
class PullMessageRequestHeader(Header):
    """PULL_MESSAGE (11); sys_flag bits in PullSysFlag, suspend timeout for long polling."""

    consumer_group: str
    topic: str
    queue_id: U32
    queue_offset: I64  # below the queue's minimum (even negative): answered OFFSET_MOVED
    max_msg_nums: PositiveI32
    sys_flag: PullSysFlagBits
    commit_offset: OffsetOrNone
    suspend_timeout_millis: U64
    subscription: str | None = None
    sub_version: I64 = 0
    expression_type: str | None = None
    max_msg_bytes: PositiveI32 | None = None


    @classmethod
    def from_ext_fields(cls, fields: Mapping[str, object]) -> Self:
        """As Header.from_ext_fields, with a fast path for what clients send (every value text)."""
        if cls is PullMessageRequestHeader and type(fields) is dict:
            fast = pull_fast(cls, fields)
            if fast is not None:
                return fast
        return typing.cast(Self, _decode(cls, fields, None))


@dataclasses.dataclass(slots=True)
class PullMessageResponseHeader(Header):
    """Answer to a pull; the body is the stored messages as they lie in the CommitLog."""

    suggest_which_broker_id: U64
    next_begin_offset: I64
    min_offset: I64
    max_offset: I64


@dataclasses.dataclass(slots=True)
class QueryConsumerOffsetRequestHeader(Header):
    """QUERY_CONSUMER_OFFSET (14): a group's committed offset in one queue."""

    consumer_group: str
    topic: str
    queue_id: U32


@dataclasses.dataclass(slots=True)
class QueryConsumerOffsetResponseHeader(Header):
    offset: I64


@dataclasses.dataclass(slots=True)
class UpdateConsumerOffsetRequestHeader(Header):
    """UPDATE_CONSUMER_OFFSET (15), often sent oneway."""

    consumer_group: str
    topic: str
    queue_id: U32
    commit_offset: U64


@dataclasses.dataclass(slots=True)
class GetMaxOffsetRequestHeader(Header):
    """GET_MAX_OFFSET (30): one past the last message of a queue."""

    topic: str
    queue_id: U32


@dataclasses.dataclass(slots=True)
class GetMaxOffsetResponseHeader(Header):
    offset: I64


@dataclasses.dataclass(slots=True)
class GetMinOffsetRequestHeader(Header):
    """GET_MIN_OFFSET (31): the first message still stored in a queue."""

    topic: str
    queue_id: U32


@dataclasses.dataclass(slots=True)
class GetMinOffsetResponseHeader(Header):
    offset: I64


@dataclasses.dataclass(slots=True)
class SearchOffsetByTimestampRequestHeader(Header):
    """SEARCH_OFFSET_BY_TIMESTAMP (29); Java's SearchOffsetRequestHeader."""

    topic: str
    queue_id: U32
    timestamp: I64


@dataclasses.dataclass(slots=True)
class SearchOffsetByTimestampResponseHeader(Header):
    offset: I64


@dataclasses.dataclass(slots=True)
class GetEarliestMsgStoretimeRequestHeader(Header):
    """GET_EARLIEST_MSG_STORETIME (32)."""

    topic: str
    queue_id: U32


@dataclasses.dataclass(slots=True)
class GetEarliestMsgStoretimeResponseHeader(Header):
    timestamp: I64


# ------------------------------------------------------------------------------- messages
@dataclasses.dataclass(slots=True)
class ViewMessageRequestHeader(Header):
    """VIEW_MESSAGE_BY_ID (33): offset is the CommitLog offset decoded from an offset msg id."""

    offset: U64
    topic: str | None = None


@dataclasses.dataclass(slots=True)
class QueryMessageRequestHeader(Header):
    """QUERY_MESSAGE (12): messages of a topic by key within a time range."""

    topic: str
    key: str
    max_num: PositiveI32
    begin_timestamp: I64
    end_timestamp: I64


@dataclasses.dataclass(slots=True)
class QueryMessageResponseHeader(Header):
    index_last_update_timestamp: I64
    index_last_update_phyoffset: I64


# ------------------------------------------------------------------------------- name server
@dataclasses.dataclass(slots=True)
class GetRouteInfoRequestHeader(Header):
    """GET_ROUTEINFO_BY_TOPIC (105)."""

    topic: str
    accept_standard_json_only: bool | None = None


@dataclasses.dataclass(slots=True)
class RegisterBrokerRequestHeader(Header):
    """REGISTER_BROKER (103); the body carries the broker's topic configs."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: U64
    compressed: bool = False
    body_crc32: I32 = 0
    master_epoch: PositiveI32 | None = None  # OrbitMQ controller mode: a master's epoch


@dataclasses.dataclass(slots=True)
class RegisterBrokerResponseHeader(Header):
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclasses.dataclass(slots=True)
class UnregisterBrokerRequestHeader(Header):
    """UNREGISTER_BROKER (104)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: U64


@dataclasses.dataclass(slots=True)
class DeleteTopicFromNamesrvRequestHeader(Header):
    """DELETE_TOPIC_IN_NAMESRV (216): RocketMQ's ``topic`` and ``clusterName``. An OrbitMQ broker
    unregistering one topic of its own adds its identity (``brokerName`` ...: only that broker's
    queues of the topic go) and, last of a round, the data version move (see
    registration_headers.RegisterTopicRequestHeader)."""

    topic: str
    cluster_name: str | None = None
    broker_name: str | None = None
    broker_addr: str | None = None
    broker_id: U64 | None = None
    base_version_timestamp: U64 | None = None
    base_version_counter: U64 | None = None
    version_timestamp: U64 | None = None
    version_counter: U64 | None = None


# ------------------------------------------------------------------------------- clients
@dataclasses.dataclass(slots=True)
class UnregisterClientRequestHeader(Header):
    """UNREGISTER_CLIENT (35); the C++ client sends the unused group as ``""``."""

    client_id: str = wire("clientID")
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclasses.dataclass(slots=True)
class GetConsumerListByGroupRequestHeader(Header):
    """GET_CONSUMER_LIST_BY_GROUP (38)."""

    consumer_group: str


@dataclasses.dataclass(slots=True)
class NotifyConsumerIdsChangedRequestHeader(Header):
    """NOTIFY_CONSUMER_IDS_CHANGED (40), broker -> consumer, oneway."""

    consumer_group: str


@dataclasses.dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader(Header):
    """CONSUMER_SEND_MSG_BACK (36): offset is the failed message's CommitLog offset."""

    offset: U64
    group: str
    delay_level: I32  # 0: the broker's choice (3 + reconsume times), negative: straight to the DLQ
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: TimesOrDefault | None = None


@dataclasses.dataclass(slots=True)
class EndTransactionRequestHeader(Header):
    """END_TRANSACTION (37), oneway; commit_or_rollback 0 unknown, 8 commit, 12 rollback."""

    producer_group: str
    tran_state_table_offset: U64
    commit_log_offset: U64
    commit_or_rollback: TransactionVerdict
    msg_id: str
    from_transaction_check: bool = False
    transaction_id: str | None = None


@dataclasses.dataclass(slots=True)
class CheckTransactionStateRequestHeader(Header):
    """CHECK_TRANSACTION_STATE (39), broker -> producer; the body is the half message."""

    tran_state_table_offset: U64
    commit_log_offset: U64
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


@dataclasses.dataclass(slots=True)
class ResetOffsetRequestHeader(Header):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) and RESET_CONSUMER_CLIENT_OFFSET (220)."""

    topic: str
    group: str
    timestamp: I64
    is_force: bool = False


@dataclasses.dataclass(slots=True)
class GetConsumerStatusRequestHeader(Header):
    """GET_CONSUMER_STATUS_FROM_CLIENT (221)."""

    topic: str
    group: str
    client_addr: str | None = None


@dataclasses.dataclass(slots=True)
class GetConsumerRunningInfoRequestHeader(Header):
    """GET_CONSUMER_RUNNING_INFO (307), broker -> consumer."""

    consumer_group: str
    client_id: str
    jstack_enable: bool = False


@dataclasses.dataclass(slots=True)
class ConsumeMessageDirectlyResultRequestHeader(Header):
    """CONSUME_MESSAGE_DIRECTLY (309), broker -> consumer."""

    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    broker_name: str | None = None


# ------------------------------------------------------------------------------- admin
@dataclasses.dataclass(slots=True)
class CreateTopicRequestHeader(Header):
    """UPDATE_AND_CREATE_TOPIC (17); defaults are what RocketMQ's admin tools send."""

    topic: str
    default_topic: str = DEFAULT_TOPIC
    read_queue_nums: U32 = 8
    write_queue_nums: U32 = 8
    perm: PermBits = 6
    topic_filter_type: TopicFilterType = "SINGLE_TAG"
    topic_sys_flag: TopicSysFlag = 0
    order: bool = False
    attributes: str | None = None  # RocketMQ 5: "+message.type=FIFO" (topic_attributes.py)


@dataclasses.dataclass(slots=True)
class DeleteTopicRequestHeader(Header):
    """DELETE_TOPIC_IN_BROKER (215)."""

    topic: str


@dataclasses.dataclass(slots=True)
class GetAllTopicConfigRequestHeader(Header):
    """GET_ALL_TOPIC_CONFIG (21), RocketMQ 5's pages of a large topic table: at most
    ``max_topic_num`` topics from the ``topic_seq``-th, in name order, of the table whose
    version is ``data_version`` (a DataVersion's JSON; a table at another version is answered
    from its first topic, with its own version, so that the asker starts again). A request
    with none of the three (an older peer's) asks for the whole table."""

    topic_seq: U32 | None = None
    data_version: str | None = None
    max_topic_num: PositiveI32 | None = None

    @property
    def paged(self) -> bool:
        """False for an older peer's request: the whole table."""
        return not (self.topic_seq is None and self.data_version is None
                    and self.max_topic_num is None)


@dataclasses.dataclass(slots=True)
class GetAllTopicConfigResponseHeader(Header):
    """Answer to GET_ALL_TOPIC_CONFIG: how many topics the whole table holds (absent from an
    older broker's answer, whose body is then the whole table)."""

    total_topic_num: U32 | None = None


@dataclasses.dataclass(slots=True)
class GetTopicStatsInfoRequestHeader(Header):
    """GET_TOPIC_STATS_INFO (202)."""

    topic: str


@dataclasses.dataclass(slots=True)
class GetConsumeStatsRequestHeader(Header):
    """GET_CONSUME_STATS (208); no topic means every topic of the group."""

    consumer_group: str
    topic: str | None = None


@dataclasses.dataclass(slots=True)
class GetConsumerConnectionListRequestHeader(Header):
    """GET_CONSUMER_CONNECTION_LIST (203)."""

    consumer_group: str


@dataclasses.dataclass(slots=True)
class GetTopicsByClusterRequestHeader(Header):
    """GET_TOPICS_BY_CLUSTER (224)."""

    cluster: str


@dataclasses.dataclass(slots=True)
class QueryTopicConsumeByWhoRequestHeader(Header):
    """QUERY_TOPIC_CONSUME_BY_WHO (300)."""

    topic: str


@dataclasses.dataclass(slots=True)
class DeleteSubscriptionGroupRequestHeader(Header):
    """DELETE_SUBSCRIPTIONGROUP (207)."""

    group_name: str
    remove_offset: bool = False
