"""Which topics take which messages (RocketMQ 5's ``message.type``), for both protocols.

The rule is :func:`orbitmq.protocol.topic_attributes.type_refusal`. The gRPC endpoint applies it
as RocketMQ 5's proxy does: a topic without the attribute is NORMAL, and a message must be of the
topic's type (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE). Remoting (4.x) sends are checked only
against topics that carry the attribute, leniently (4.x orderly sends have no mark): a 4.x
client keeps sending delayed and transactional messages to the topics it always used, and a
topic typed by an operator refuses what does not fit with MESSAGE_ILLEGAL and the same remark.

Priority messages (:func:`remoting_priority_queue`): a 4.x send to a PRIORITY topic is stored in
the queue of its priority (``__PRIORITY``, 0..9; none: 0), whatever queue the sender picked, so
that every client's priority messages order alike; a batch goes to one queue, so its messages
must share one priority. A message with a priority sent to a topic of another type, or of none,
is refused (MESSAGE_ILLEGAL), never stored as if it had none; a group's retry topic
(``%RETRY%``) takes it, priority and all, as a consumer's failed message goes there.
"""

from __future__ import annotations

from orbitmq.errors import BrokerError, RemoteProtocolError
from orbitmq.protocol.batch import decode_batch
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.properties import parse_properties
from orbitmq.protocol.topic_attributes import (
    MESSAGE_TYPE_ATTRIBUTE,
    PRIORITY_PROPERTY,
    TopicMessageType,
    message_type_of,
    parse_priority,
    priority_queue,
    topic_message_type,
    type_refusal,
)
from orbitmq.protocol.topics import RETRY_GROUP_TOPIC_PREFIX

__all__ = ["remoting_refusal", "grpc_refusal", "remoting_priority_queue"]

_PRIORITY_BYTES = PRIORITY_PROPERTY.encode()


def remoting_refusal(tc: TopicConfig, properties_text: str | None, batch: bool) -> str | None:
    """Why a 4.x send to ``tc`` is refused (None: it goes). Costs nothing for untyped topics."""
    if not tc.attributes or MESSAGE_TYPE_ATTRIBUTE not in tc.attributes:
        return None
    topic_type = topic_message_type(tc.attributes)
    if batch:
        kind = TopicMessageType.NORMAL
    else:
        kind = message_type_of(parse_properties(properties_text) if properties_text else {})
    return type_refusal(tc.topic_name, topic_type, kind, lenient=True)


def grpc_refusal(tc: TopicConfig, kind: TopicMessageType) -> str | None:
    """Why a 5.x send of ``kind`` to ``tc`` is refused, as RocketMQ 5's proxy refuses it."""
    return type_refusal(tc.topic_name, topic_message_type(tc.attributes), kind, lenient=False)


def remoting_priority_queue(tc: TopicConfig, properties_text: str | None,
                            body: bytes | bytearray | memoryview, batch: bool) -> int | None:
    """The queue a 4.x send to ``tc`` is stored in when its priority decides it (a PRIORITY
    topic), else None (the sender's queue stands). Costs a substring test for other topics.

    Raises:
        BrokerError: MESSAGE_ILLEGAL for a priority out of 0..9, a batch of several priorities,
            or a priority message to a topic that is not of type PRIORITY (module docstring).
    """
    priority_topic = bool(tc.attributes) and \
        topic_message_type(tc.attributes) is TopicMessageType.PRIORITY
    if not priority_topic:
        mentions = (_PRIORITY_BYTES in body) if batch else \
            bool(properties_text) and PRIORITY_PROPERTY in properties_text  # type: ignore[operator]
        if mentions and not tc.topic_name.startswith(RETRY_GROUP_TOPIC_PREFIX):
            if batch:
                props_list = _batch_properties(body)
                mentions = any(PRIORITY_PROPERTY in p for p in props_list)
            else:
                mentions = PRIORITY_PROPERTY in _properties(properties_text)
            if mentions:
                raise BrokerError(ResponseCode.MESSAGE_ILLEGAL,
                                  f"topic {tc.topic_name} is not of message.type PRIORITY: it "
                                  "takes no priority messages")
        return None
    if batch:
        priorities = {_priority(p) for p in _batch_properties(body)}
        if len(priorities) > 1:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL,
                              "a batch goes to one queue: its messages must share one priority, "
                              f"got {sorted(priorities)}")
        priority = priorities.pop() if priorities else 0
    else:
        priority = _priority(_properties(properties_text))
    return priority_queue(priority, tc.write_queue_nums)


def _properties(text: str | None) -> dict[str, str]:
    try:
        return parse_properties(text) if text else {}
    except RemoteProtocolError as e:
        raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, str(e)) from None


def _batch_properties(body: bytes | bytearray | memoryview) -> list[dict[str, str]]:
    try:
        return [props for _, _, props in decode_batch(body)]
    except RemoteProtocolError as e:
        raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, f"malformed batch body: {e}") from None


def _priority(props: dict[str, str]) -> int:
    raw = props.get(PRIORITY_PROPERTY)
    if raw is None:
        return 0
    try:
        return parse_priority(raw)
    except RemoteProtocolError as e:
        raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, str(e)) from None
