"""The message store: commit log, consume queues, index, flush, recovery and retention.

``MessageStore`` is the facade the broker uses; docs/store.md describes the files and the format.
"""

from orbitmq.store.message_inner import MessageInner
from orbitmq.store.message_store import MessageFilter, MessageStore
from orbitmq.store.recovery import RecoveryReport
from orbitmq.store.status import (
    AppendMessageResult,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
)

__all__ = [
    "MessageStore",
    "MessageInner",
    "MessageFilter",
    "RecoveryReport",
    "AppendMessageResult",
    "GetMessageResult",
    "GetMessageStatus",
    "PutMessageResult",
    "PutMessageStatus",
    "QueryMessageResult",
]
