"""Recall handles: what a send of a timer message answers, and what a recall names.

A handle is RocketMQ 5.3's (``RecallMessageHandle`` v1): the URL-safe base64 (with padding) of
``"v1 TOPIC BROKER_NAME TIMESTAMP MESSAGE_ID"``, space separated: the message's real topic, the
broker that parked it, its delivery time in ms plus one (RocketMQ's rounding) and its UNIQ_KEY.
Tools that decode RocketMQ's handles (its trace hook, its proxy) read OrbitMQ's alike.

A recall is remembered by its delete key, ``TOPIC+MESSAGE_ID`` (RocketMQ's
``TimerMessageStore.buildDeleteKey``), carried by the recall marker in the property
``TIMER_DEL_UNIQKEY`` (broker/timer/timer_service.py).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses

from orbitmq.errors import BrokerError
from orbitmq.protocol.codes import ResponseCode

__all__ = ["RecallHandle", "build_recall_handle", "decode_recall_handle", "delete_key",
           "TIMER_DEL_UNIQKEY", "RECALL_TAG", "RECALL_HANDLE_MAX"]

TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"  # RocketMQ's property naming what a recall cancels
RECALL_TAG = "_RECALL_TAG_"  # the recall marker's tag (RocketMQ's)
RECALL_HANDLE_MAX = 1024  # characters of a handle a request may carry
_VERSION = "v1"
_INVALID = "recall handle is invalid"  # RocketMQ's remark


@dataclasses.dataclass(frozen=True, slots=True)
class RecallHandle:
    """A decoded v1 handle (its fields as RocketMQ names them)."""

    topic: str
    broker_name: str
    timestamp: int  # the delivery time in ms + 1
    message_id: str

    @property
    def due_ms(self) -> int:
        """The delivery time the handle was made for."""
        return self.timestamp - 1


def build_recall_handle(topic: str, broker_name: str, due_ms: int, message_id: str) -> str:
    """The handle a send answers for a timer message parked until ``due_ms``."""
    raw = " ".join((_VERSION, topic, broker_name, str(due_ms + 1), message_id))
    return base64.urlsafe_b64encode(raw.encode()).decode("ascii")


def decode_recall_handle(text: str) -> RecallHandle:
    """The handle's fields.

    Raises:
        BrokerError: ILLEGAL_OPERATION "recall handle is invalid" (RocketMQ's code and remark)
            for anything that is not a v1 handle with a whole-number timestamp.
    """
    if not text or len(text) > RECALL_HANDLE_MAX:
        raise BrokerError(ResponseCode.ILLEGAL_OPERATION, _INVALID)
    try:
        data = text.encode("ascii")
        raw = base64.urlsafe_b64decode(data + b"=" * (-len(data) % 4)).decode("utf-8")  # as Java: padding optional
    except (binascii.Error, UnicodeError, ValueError):
        raise BrokerError(ResponseCode.ILLEGAL_OPERATION, _INVALID) from None
    items = raw.split(" ")
    if len(items) < 5 or items[0] != _VERSION or not all(items[1:5]):
        raise BrokerError(ResponseCode.ILLEGAL_OPERATION, _INVALID)
    stamp = items[3]
    if not stamp.isdigit() or len(stamp) > 18:
        raise BrokerError(ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid")
    return RecallHandle(items[1], items[2], int(stamp), items[4])


def delete_key(topic: str, message_id: str) -> str:
    """What a recall marker names: the real topic and the message's UNIQ_KEY."""
    return f"{topic}+{message_id}"
