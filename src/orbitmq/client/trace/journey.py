"""One message's journey: its trace records merged with what the brokers know of it.

:func:`message_trace` (``AsyncAdmin.message_trace``, ``orbitmq message trace --msg-id``, the
console's trace page) looks the message id up in the trace topic (the trace messages' keys are
the traced ids: RocketMQ's ``queryMsgTraceById``), decodes the records about that id, and adds
the brokers' side:

- where the message is stored (broker, queue, queue offset, store time, born time and host),
  read by its offset message id (from the Pub record) or by its id in its topic;
- for each consumer group that traced it or that holds an offset of its queue: whether the
  group's committed offset passed it, its retries (copies in ``%RETRY%{group}``) and whether it
  is a dead letter (a copy in ``%DLQ%{group}``);
- the steps with how long each took: the send's round trip, from birth to store, the wait
  before each listener call and the call itself.

Each lookup that fails (no trace topic, a deleted topic, a refused read) is noted in
``problems`` and the rest is still shown.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from orbitmq.errors import BrokerError, ClientError, OrbitMQError
from orbitmq.protocol.bodies import ClusterInfo, MessageQueue
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.message import MessageExt, PropertyKey
from orbitmq.protocol.namespaces import namespace_of, unwrap, wrap
from orbitmq.protocol.topics import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, TRACE_TOPIC
from orbitmq.protocol.trace_codec import (
    ConsumeReturnType,
    TraceMessageType,
    TraceRecord,
    TraceType,
    decode_trace_data,
)

__all__ = ["MessageTrace", "PublishStep", "StoredAt", "ConsumeStep", "GroupProgress",
           "TransactionStep", "message_trace", "TRACE_CONTEXT", "GROUPS_MAX"]

TRACE_CONTEXT = PropertyKey.TRACE_CONTEXT  # the stored property of a 5.x message's trace_context
GROUPS_MAX = 64  # consumer groups looked into for retries and dead letters
_QUERY_MAX = 64  # trace messages read per id (RocketMQ's queryMsgTraceById default)


class _Admin(Protocol):
    """The admin calls a journey needs (AsyncAdmin's)."""

    async def query_messages(self, topic: str, key: str, max_num: int = ..., begin_ms: int = ...,
                             end_ms: int | None = ...) -> list[MessageExt]: ...

    async def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt: ...

    async def cluster_info(self) -> ClusterInfo: ...

    async def committed_offsets(self, topic: str) -> dict[str, dict[MessageQueue, int]]: ...


@dataclasses.dataclass(frozen=True)
class PublishStep:
    """A send of the message (a Pub record): who sent it, when, how long the send took."""

    producer_group: str
    client_host: str
    time_ms: int
    cost_ms: int
    success: bool
    broker_addr: str
    message_type: str
    offset_msg_id: str


@dataclasses.dataclass(frozen=True)
class StoredAt:
    """Where a broker stored the message (from the broker itself)."""

    broker_name: str | None
    store_host: str
    queue_id: int
    queue_offset: int
    store_time_ms: int
    born_time_ms: int
    born_host: str
    reconsume_times: int


@dataclasses.dataclass(frozen=True)
class ConsumeStep:
    """One listener call that had the message (a SubBefore and its SubAfter record)."""

    consumer_group: str
    client_host: str
    time_ms: int
    cost_ms: int | None  # None: no SubAfter (yet): the call did not end or its record is lost
    success: bool | None
    outcome: str  # ConsumeReturnType's name, or "" without a SubAfter
    retry_times: int


@dataclasses.dataclass(frozen=True)
class TransactionStep:
    """The end of the message's transaction (an EndTransaction record)."""

    producer_group: str
    client_host: str
    time_ms: int
    state: str
    from_check: bool


@dataclasses.dataclass(frozen=True)
class GroupProgress:
    """What the brokers know of one consumer group and the message."""

    group: str
    consumed: bool | None  # None: the group has no committed offset on the message's queue
    retries: int  # copies of it in %RETRY%{group}
    dead_letter_time_ms: int | None  # when it went to %DLQ%{group}; None: it did not


@dataclasses.dataclass(frozen=True)
class MessageTrace:
    """See the module docstring."""

    msg_id: str
    topic: str | None
    tags: str | None
    keys: str | None
    trace_context: str | None
    published: list[PublishStep]
    stored: StoredAt | None
    transactions: list[TransactionStep]
    consumed: list[ConsumeStep]
    groups: list[GroupProgress]
    records: list[TraceRecord]
    problems: list[str]

    @property
    def store_delay_ms(self) -> int | None:
        """From the message's birth to its store on the broker."""
        s = self.stored
        return None if s is None or not s.born_time_ms else s.store_time_ms - s.born_time_ms

    def wait_ms(self, step: ConsumeStep) -> int | None:
        """From the store to a listener call's start."""
        return None if self.stored is None else step.time_ms - self.stored.store_time_ms

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form (``orbitmq message trace --format json``)."""
        out = dataclasses.asdict(self)
        out["records"] = [{**dataclasses.asdict(r), "type": r.type.value} for r in self.records]
        out["store_delay_ms"] = self.store_delay_ms
        for step, raw in zip(self.consumed, out["consumed"], strict=True):
            raw["wait_ms"] = self.wait_ms(step)
        return out


def _host(host: tuple[str, int]) -> str:
    return f"{host[0]}:{host[1]}"


def _message_type_name(value: int) -> str:
    try:
        return TraceMessageType(value).name
    except ValueError:
        return str(value)


async def _noted(problems: list[str], what: str, call: Callable[[], Awaitable[Any]],
                 default: Any) -> Any:
    try:
        return await call()
    except (OrbitMQError, OSError) as e:
        problems.append(f"{what}: {e}")
        return default


async def _trace_records(admin: _Admin, msg_id: str, trace_topic: str, max_num: int,
                         problems: list[str]) -> list[tuple[TraceRecord, str]]:
    """The records about ``msg_id`` with the host of the client that wrote each (the trace
    message's born host, as RocketMQ's TraceView takes it), oldest first."""
    try:
        found = await admin.query_messages(trace_topic, msg_id, max_num)
    except BrokerError as e:
        problems.append(f"trace topic {trace_topic}: {e}")
        return []
    out: list[tuple[TraceRecord, str]] = []
    for trace_msg in found:
        errors: list[str] = []
        for record in decode_trace_data(bytes(trace_msg.body), errors=errors):
            if record.msg_id == msg_id:
                out.append((record, trace_msg.born_host[0]))
        problems.extend(f"trace message {trace_msg.msg_id}: {e}" for e in errors)
    return out


async def _stored(admin: _Admin, msg_id: str, topic: str | None, offset_ids: list[str],
                  problems: list[str]) -> MessageExt | None:
    for offset_id in offset_ids:
        try:
            found = await admin.view_message(offset_id, topic)
        except (OrbitMQError, OSError) as e:
            problems.append(f"message by offset id {offset_id}: {e}")
            continue
        if topic is None or unwrap(found.topic, namespace_of(found.topic)) == topic:
            return found  # traced clients name a namespaced topic without its namespace
        # a transaction's half message: the committed copy lies in the topic, by its id
        try:
            return await admin.view_message(msg_id, topic)
        except (OrbitMQError, OSError) as e:
            problems.append(f"message {msg_id} in {topic} (its half message is at "
                            f"{offset_id}): {e}")
            return None
    try:
        # without a topic, only a broker's offset message id finds it (view_message says so)
        return await admin.view_message(msg_id, topic)
    except ClientError:
        problems.append(f"message {msg_id}: no trace record names its topic; give the topic")
        return None
    except (OrbitMQError, OSError) as e:
        problems.append(f"message {msg_id} in {topic}: {e}")
        return None


async def _group_progress(admin: _Admin, group: str, msg_id: str, offsets: dict[MessageQueue, int],
                          mq: MessageQueue | None, queue_offset: int,
                          problems: list[str]) -> GroupProgress:
    consumed = offsets[mq] > queue_offset if mq is not None and mq in offsets else None

    async def copies(prefix: str) -> list[MessageExt]:
        try:
            return await admin.query_messages(prefix + group, msg_id)
        except BrokerError as e:
            if e.code != ResponseCode.TOPIC_NOT_EXIST:  # the group never retried nor dead-lettered
                problems.append(f"{prefix}{group}: {e}")
            return []
        except (ClientError, OSError) as e:
            problems.append(f"{prefix}{group}: {e}")
            return []

    retries, dead = await asyncio.gather(copies(RETRY_GROUP_TOPIC_PREFIX),
                                         copies(DLQ_GROUP_TOPIC_PREFIX))
    return GroupProgress(group, consumed, len(retries),
                         min(m.store_timestamp for m in dead) if dead else None)


async def message_trace(admin: _Admin, msg_id: str, *, topic: str | None = None,
                        trace_topic: str = TRACE_TOPIC, max_num: int = _QUERY_MAX) -> MessageTrace:
    """The journey of the message ``msg_id`` (see the module docstring).

    Args:
        admin: a started AsyncAdmin.
        msg_id: the message's id (UNIQ_KEY, what producers' send results and consumers show).
        topic: its topic, needed only when no Pub record names it.
        trace_topic: where traced clients wrote (their ``customized_trace_topic``).
        max_num: trace messages read per broker at most.

    Raises:
        ClientError: an empty id or ``max_num`` out of 1..65536.
    """
    msg_id = msg_id.strip() if isinstance(msg_id, str) else ""
    if not msg_id or len(msg_id) > 128:
        raise ClientError("a message id is 1..128 characters")
    if not 1 <= max_num <= 65_536:
        raise ClientError(f"max_num must be within 1..65536, got {max_num}")
    problems: list[str] = []
    found = await _trace_records(admin, msg_id, trace_topic, max_num, problems)
    found.sort(key=lambda rh: rh[0].timestamp_ms)
    records = [r for r, _ in found]
    pubs = [(r, h) for r, h in found if r.type is TraceType.PUB]
    topic = topic or next((r.topic for r, _ in pubs if r.topic), None) or next(
        (r.topic for r, _ in found if r.type is TraceType.END_TRANSACTION and r.topic), None)
    offset_ids = list(dict.fromkeys(r.offset_msg_id for r, _ in pubs if r.offset_msg_id))
    msg = await _stored(admin, msg_id, topic, offset_ids, problems)
    stored: StoredAt | None = None
    mq: MessageQueue | None = None
    if msg is not None:
        topic = msg.topic if not msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else topic
        info = await _noted(problems, "cluster", admin.cluster_info, None)
        addr = _host(msg.store_host)
        broker = None if info is None else next(
            (name for name, bd in info.broker_addr_table.items()
             if addr in bd.broker_addrs.values()), None)
        stored = StoredAt(broker, addr, msg.queue_id, msg.queue_offset, msg.store_timestamp,
                          msg.born_timestamp, _host(msg.born_host), msg.reconsume_times)
        if broker is not None and topic is not None:
            mq = MessageQueue(topic, broker, msg.queue_id)
        if not found and msg.uniq_key and msg.uniq_key != msg_id:
            # found by the broker's offset message id: its traces are keyed by its own id
            msg_id = msg.uniq_key
            found = await _trace_records(admin, msg_id, trace_topic, max_num, problems)
            found.sort(key=lambda rh: rh[0].timestamp_ms)
            records = [r for r, _ in found]
            pubs = [(r, h) for r, h in found if r.type is TraceType.PUB]
    offsets: dict[str, dict[MessageQueue, int]] = {}
    if topic is not None:
        offsets = await _noted(problems, f"consumer offsets of {topic}",
                               lambda: admin.committed_offsets(topic), {})
    before = [(r, h) for r, h in found if r.type is TraceType.SUB_BEFORE]
    after = {r.request_id: r for r, _ in found if r.type is TraceType.SUB_AFTER}
    consumed = []
    for r, host in before:
        end = after.get(r.request_id)
        consumed.append(ConsumeStep(
            r.group, host, r.timestamp_ms, end.cost_time_ms if end else None,
            end.success if end else None,
            ConsumeReturnType(end.context_code).name if end and 0 <= end.context_code <= 4 else "",
            r.retry_times))
    ns = namespace_of(topic) if topic else ""  # consumers' records name their groups bare
    groups = sorted({wrap(ns, s.consumer_group) for s in consumed if s.consumer_group}
                    | {g for g, queues in offsets.items() if mq is not None and mq in queues})
    if len(groups) > GROUPS_MAX:
        problems.append(f"{len(groups)} consumer groups: the first {GROUPS_MAX} are shown")
        groups = groups[:GROUPS_MAX]
    progress = list(await asyncio.gather(*(
        _group_progress(admin, g, msg_id, offsets.get(g, {}), mq,
                        stored.queue_offset if stored else -1, problems) for g in groups)))
    first_pub = pubs[0][0] if pubs else None
    return MessageTrace(
        msg_id=msg_id, topic=topic,
        tags=msg.tags if msg is not None else (first_pub.tags if first_pub else None),
        keys=(msg.properties.get(PropertyKey.KEYS) if msg is not None
              else first_pub.keys if first_pub else None),
        trace_context=msg.properties.get(TRACE_CONTEXT) if msg is not None else None,
        published=[PublishStep(r.group, h, r.timestamp_ms, r.cost_time_ms, r.success,
                               r.store_host, _message_type_name(r.msg_type), r.offset_msg_id)
                   for r, h in pubs],
        stored=stored,
        transactions=[TransactionStep(r.group, h, r.timestamp_ms, r.transaction_state,
                                      r.from_transaction_check)
                      for r, h in found if r.type is TraceType.END_TRANSACTION],
        consumed=consumed, groups=progress, records=records, problems=problems)
