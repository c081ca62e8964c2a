"""Which topics take which messages (RocketMQ 5's ``message.type``), for both protocols.

The rule is :func:`orbitmq.protocol.topic_attributes.type_refusal`. The gRPC endpoint applies it
as RocketMQ 5's proxy does: a topic without the attribute is NORMAL, and a message must be of the
topic's type (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE). Remoting (4.x) sends are checked only
against topics that carry the attribute, leniently (4.x orderly sends have no mark): a 4.x
client keeps sending delayed and transactional messages to the topics it always used, and a
topic typed by an operator refuses what does not fit with MESSAGE_ILLEGAL and the same remark.
"""

from __future__ import annotations

from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.properties import parse_properties
from orbitmq.protocol.topic_attributes import (
    MESSAGE_TYPE_ATTRIBUTE,
    TopicMessageType,
    message_type_of,
    topic_message_type,
    type_refusal,
)

__all__ = ["remoting_refusal", "grpc_refusal"]


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
