"""Dead letters: reading a group's ``%DLQ%`` queues and sending them back, to that group only,
without duplicates.

Where a dead letter goes back: to its own group's retry topic ``%RETRY%{group}``, as the broker's
own retry does, never to its original topic (every other group subscribed to that topic would
process it again). It keeps the sender's body, tags, keys and properties (UNIQ_KEY too: the same
message id), and carries what a retry carries: RETRY_TOPIC (its original topic: a consumer shows
the message under the topic it subscribed to) and ORIGIN_MESSAGE_ID, with its reconsume times
reset to 0, so it gets the group's full ``retry_max_times`` again. Every push consumer of the group
subscribes to its retry topic (RocketMQ's clients too), so the group's live members, or the
first to start, consume it, once per group; no other group does. RocketMQ's other way,
CONSUME_MESSAGE_DIRECTLY to one live member, is not used: it needs a member online, delivers
outside the group's offsets (a crash in the middle loses it), and does not retry a failure.

A dead letter stays in its DLQ queue after it is resent (RocketMQ never deletes a message), so
what was resent is remembered by the broker, through the ordinary offset API: a consumer offset
of the reserved group ``%RESENT%{group}`` (:func:`resend_group`) on each DLQ queue, the *resend
mark*. Every dead letter below the mark was resent; a resend starts at the mark, sends in queue
order and moves the mark past each message sent, so running it twice sends nothing new, and a
resend interrupted halfway goes on where it stopped. ``force`` sends from the start of the queue
again, on purpose (the mark then stays past everything resent).

One message picked by id (``msg_id``) is sent when asked, once: one below the mark counts as
resent (``force`` sends it again); one at the mark moves it; one further on is sent without moving
the mark (the mark only covers a prefix of the queue), so a later resend of all sends it again.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from orbitmq.client.admin.core import AdminCore
from orbitmq.client.admin.groups import (
    DLQ_TOPIC_PREFIX,
    RETRY_TOPIC_PREFIX,
    original_topic,
    resend_properties,
)
from orbitmq.client.admin.queues import read_queue
from orbitmq.client.admin.topics import topic_status
from orbitmq.client.results import SendResult
from orbitmq.client.route import subscribe_queues_from_route
from orbitmq.client.validation import GROUP_LENGTH_MAX, check_group
from orbitmq.errors import ClientError, OrbitMQError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.headers import (
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)
from orbitmq.protocol.message import Message, MessageExt, PropertyKey

__all__ = [
    "DeadLetter",
    "Resent",
    "ResendReport",
    "RESEND_GROUP_PREFIX",
    "RESEND_PRODUCER_GROUP",
    "resend_group",
    "dead_letter_entries",
    "resend_dead_letters",
    "resend_report",
]

RESEND_GROUP_PREFIX = "%RESENT%"
RESEND_PRODUCER_GROUP = "orbitmq-dlq-resend"


@dataclasses.dataclass(frozen=True)
class DeadLetter:
    """One message of a group's dead letter queue.

    Attributes:
        queue: its ``%DLQ%`` queue (``message.queue_offset`` is its place there).
        message: the dead letter.
        resent: an earlier resend sent it back already (it is below the resend mark).
    """

    queue: MessageQueue
    message: MessageExt
    resent: bool


@dataclasses.dataclass(frozen=True)
class Resent:
    """What a resend did with one dead letter: ``result`` when sent, else ``skipped`` saying why.

    ``topic``: the group's retry topic it went (or would go) to; None when it has no original
    topic recorded (it cannot be resent)."""

    dead_letter: DeadLetter
    topic: str | None
    result: SendResult | None = None
    skipped: str | None = None


@dataclasses.dataclass(frozen=True)
class ResendReport:
    """What one resend did, counted (what a console or a CLI reports).

    Attributes:
        items: one Resent per dead letter read, in queue order.
        resent_before: dead letters still in the DLQ that an earlier resend sent, passed over
            without being read (a resend of all without ``force``).
        left: dead letters not sent yet that this call did not reach (past ``max_messages``):
            the next resend sends them.
    """

    items: list[Resent]
    resent_before: int = 0
    left: int = 0

    @property
    def sent(self) -> int:
        return sum(1 for r in self.items if r.result is not None)

    @property
    def skipped_resent_before(self) -> int:
        """Resent before, not sent again: those passed over plus those read and skipped."""
        return self.resent_before + sum(1 for r in self.items
                                        if r.result is None and r.topic is not None)

    @property
    def skipped_no_topic(self) -> int:
        return sum(1 for r in self.items if r.topic is None)

    @property
    def skipped(self) -> int:
        return self.skipped_resent_before + self.skipped_no_topic


def resend_group(group: str) -> str:
    """The reserved consumer group whose offsets on ``%DLQ%{group}`` are the resend marks."""
    name = RESEND_GROUP_PREFIX + check_group(group)
    if len(name) <= GROUP_LENGTH_MAX:
        return name
    digest = hashlib.sha256(group.encode()).hexdigest()[:40]
    return RESEND_GROUP_PREFIX + group[: GROUP_LENGTH_MAX - len(RESEND_GROUP_PREFIX) - 41] + \
        "-" + digest


def _matches(msg: MessageExt, msg_id: str) -> bool:
    return msg_id in (msg.msg_id, msg.offset_msg_id,
                      msg.properties.get(PropertyKey.ORIGIN_MESSAGE_ID))


# -- marks ----------------------------------------------------------------------------------------
async def _mark(core: AdminCore, addr: str, group: str, mq: MessageQueue) -> int:
    """The resend mark of one DLQ queue (0 when nothing was ever resent)."""
    header = QueryConsumerOffsetRequestHeader(resend_group(group), mq.topic, mq.queue_id)
    resp = await core.broker_call(addr, RequestCode.QUERY_CONSUMER_OFFSET, header,
                                  ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
    if resp.code == ResponseCode.QUERY_NOT_FOUND:
        return 0  # never resent, and the queue's first messages are gone: all that is left is new
    return QueryConsumerOffsetResponseHeader.from_ext_fields(resp.ext_fields).offset


async def _set_mark(core: AdminCore, addr: str, group: str, mq: MessageQueue,
                    offset: int) -> None:
    header = UpdateConsumerOffsetRequestHeader(resend_group(group), mq.topic, mq.queue_id, offset)
    await core.broker_call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header)


async def _dlq_queues(core: AdminCore, group: str) -> list[tuple[MessageQueue, str]]:
    """(DLQ queue, its master's address), in queue order; [] when the group has no DLQ."""
    topic = DLQ_TOPIC_PREFIX + check_group(group)
    try:
        route, masters = await core.route_masters(topic)
    except OrbitMQError as e:
        if getattr(e, "code", None) == ResponseCode.TOPIC_NOT_EXIST:
            return []
        raise
    return [(mq, masters[mq.broker_name]) for mq in sorted(subscribe_queues_from_route(topic, route))
            if mq.broker_name in masters]


# -- reading --------------------------------------------------------------------------------------
async def _entries(core: AdminCore, group: str, max_messages: int, unresent_only: bool
                   ) -> tuple[list[DeadLetter], dict[MessageQueue, tuple[str, int]]]:
    found: list[DeadLetter] = []
    marks: dict[MessageQueue, tuple[str, int]] = {}
    for mq, addr in await _dlq_queues(core, group):
        mark = await _mark(core, addr, group, mq)
        marks[mq] = (addr, mark)
        if len(found) >= max_messages:
            continue
        start = mark if unresent_only else 0
        for msg in await read_queue(core, addr, mq, max_messages - len(found), start=start):
            found.append(DeadLetter(mq, msg, msg.queue_offset < mark))
    return found, marks


async def dead_letter_entries(core: AdminCore, group: str, max_messages: int = 1000, *,
                              unresent_only: bool = False) -> list[DeadLetter]:
    """The dead letters of ``group`` (up to ``max_messages``), oldest first, each saying whether
    it was resent; only those not resent yet with ``unresent_only``."""
    found, _ = await _entries(core, group, max_messages, unresent_only)
    return sorted(found, key=lambda d: (d.message.store_timestamp, d.message.commit_log_offset))


# -- resending ------------------------------------------------------------------------------------
def _message_of(msg: MessageExt, retry: str, original: str) -> Message:
    """The dead letter for its group's retry topic: body, tags, keys, flag and properties as its
    sender sent them (UNIQ_KEY too, so consumers see the same message id), without the broker's
    retry bookkeeping, plus a retry's RETRY_TOPIC and ORIGIN_MESSAGE_ID (reconsume times: 0)."""
    props = resend_properties(msg)
    props[PropertyKey.RETRY_TOPIC] = original
    props[PropertyKey.ORIGIN_MESSAGE_ID] = (msg.properties.get(PropertyKey.ORIGIN_MESSAGE_ID)
                                            or msg.msg_id)
    return Message.with_system_properties(retry, bytes(msg.body), properties=props,
                                          tags=msg.tags, keys=list(msg.keys) or None,
                                          flag=msg.flag)


async def resend_dead_letters(core: AdminCore, group: str, *, msg_id: str | None = None,
                              force: bool = False, max_messages: int = 1000,
                              producer_group: str = RESEND_PRODUCER_GROUP) -> list[Resent]:
    """Send ``group``'s dead letters back to the group's retry topic (see the module docstring):
    :func:`resend_report`'s items (it also counts what was passed over)."""
    report = await resend_report(core, group, msg_id=msg_id, force=force,
                                 max_messages=max_messages, producer_group=producer_group)
    return report.items


async def resend_report(core: AdminCore, group: str, *, msg_id: str | None = None,
                        force: bool = False, max_messages: int = 1000,
                        producer_group: str = RESEND_PRODUCER_GROUP) -> ResendReport:
    """Send ``group``'s dead letters back to ``%RETRY%{group}``, each once (module docstring).

    Args:
        msg_id: only this one (its message id, offset message id or original message id).
        force: also those resent before.
        max_messages: at most this many dead letters read (and sent) in this call.

    Returns:
        one Resent per dead letter considered, in queue order, and the counts of those passed
        over (resent before) or not reached (past ``max_messages``).

    Raises:
        ClientError: ``msg_id`` names no dead letter of the group.
        OrbitMQError: the broker could not be read; what was sent before is marked.
    """
    from orbitmq.client.producer.producer import AsyncProducer

    every = msg_id is None
    entries, marks = await _entries(core, group, max_messages, unresent_only=every and not force)
    if msg_id is not None:
        entries = [d for d in entries if _matches(d.message, msg_id)]
        if not entries:
            raise ClientError(f"no dead letter {msg_id} for group {group}")
    entries.sort(key=lambda d: (d.queue, d.message.queue_offset))
    before, left = (await _passed_over(core, group, marks, len(entries), force)) if every \
        else (0, 0)
    retry = RETRY_TOPIC_PREFIX + group
    moved: dict[MessageQueue, int] = {}
    out: list[Resent] = []
    try:
        async with AsyncProducer(producer_group, core.instance.namesrv_addrs,
                                 credentials=core.instance.credentials,
                                 tls=core.instance.tls) as producer:
            for dead in entries:
                out.append(await _resend_one(producer, dead, retry, force, marks, moved))
    finally:
        for mq, offset in moved.items():
            addr, _ = marks[mq]
            await _set_mark(core, addr, group, mq, offset)
    return ResendReport(out, before, left)


async def _passed_over(core: AdminCore, group: str, marks: dict[MessageQueue, tuple[str, int]],
                       read: int, force: bool) -> tuple[int, int]:
    """(dead letters below the marks still in the DLQ, not read without ``force``; those to send
    that were not read: past ``max_messages``), from the DLQ queues' offsets."""
    if not marks:
        return 0, 0
    bounds = {s.queue: (s.min_offset, s.max_offset)
              for s in await topic_status(core, DLQ_TOPIC_PREFIX + group)}
    before = to_send = 0
    for mq, (_addr, mark) in marks.items():
        low, high = bounds.get(mq, (0, 0))
        below = max(0, min(mark, high) - low)
        before += below
        to_send += high - low - (0 if force else below)
    return (0 if force else before), max(0, to_send - read)


async def _resend_one(producer: Any, dead: DeadLetter, retry: str, force: bool,
                      marks: dict[MessageQueue, tuple[str, int]],
                      moved: dict[MessageQueue, int]) -> Resent:
    """Send one dead letter to the group's retry topic; move its queue's mark past it when it is
    the next one in line (one that can never be sent, having no original topic, is passed over
    the same way)."""
    topic = original_topic(dead.message)
    if dead.resent and not force:
        return Resent(dead, retry, skipped="resent before (force sends it again)")
    outcome = Resent(dead, None, skipped="no original topic (RETRY_TOPIC) recorded")
    if topic is not None:
        message = _message_of(dead.message, retry, topic)
        outcome = Resent(dead, retry, result=await producer.send(message))
    mark = moved.get(dead.queue, marks[dead.queue][1])
    if dead.message.queue_offset == mark:
        moved[dead.queue] = mark + 1
    return outcome
