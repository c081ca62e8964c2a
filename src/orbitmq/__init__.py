"""OrbitMQ: a RocketMQ-compatible distributed message queue in Python.

The SDK's public names are importable from here. They load on first use, so that ``import orbitmq``
(e.g. by the CLI or a server process) stays light and does not pull in the client machinery.

The package logger ``orbitmq`` has a NullHandler, as a library's should: an application that
configures no logging sees no "No handlers could be found" noise and no warnings printed by
Python's last-resort handler; one that does configure logging gets OrbitMQ's records as usual.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from orbitmq.errors import (
    AccessDeniedError,
    BrokerError,
    ClientError,
    ConnectionClosedError,
    ExpressionError,
    OrbitMQError,
    QueuesNotDrainedError,
    RemoteProtocolError,
    StoreError,
    TimeoutError,
    TopicExistsError,
    TopicNotFoundError,
)

logging.getLogger(__name__).addHandler(logging.NullHandler())

__version__ = "0.1.0"

# public name -> module that exports it
_LAZY = {
    "Message": "orbitmq.protocol.message",
    "MessageExt": "orbitmq.protocol.message",
    "MessageQueue": "orbitmq.protocol.bodies",
    "Producer": "orbitmq.client",
    "AsyncProducer": "orbitmq.client",
    "PullConsumer": "orbitmq.client",
    "LiteConsumer": "orbitmq.client",
    "AsyncLiteConsumer": "orbitmq.client",
    "AsyncPullConsumer": "orbitmq.client",
    "Admin": "orbitmq.client",
    "AsyncAdmin": "orbitmq.client",
    "SendResult": "orbitmq.client",
    "SendStatus": "orbitmq.client",
    "PullResult": "orbitmq.client",
    "PullStatus": "orbitmq.client",
    "RawPullResult": "orbitmq.client",
    "HalfMessageRef": "orbitmq.client",
    "MessageSelector": "orbitmq.client",
    "select_by_hash": "orbitmq.client",
    "select_random": "orbitmq.client",
    "PushConsumer": "orbitmq.client",
    "AsyncPushConsumer": "orbitmq.client",
    "ConsumeResult": "orbitmq.client",
    "ConsumeFrom": "orbitmq.client",
    "ConsumeContext": "orbitmq.client",
    "MessageModel": "orbitmq.client",
    "AllocateAveragely": "orbitmq.client",
    "AllocateAveragelyByCircle": "orbitmq.client",
    "AllocateByConfig": "orbitmq.client",
    "AllocateByMachineRoom": "orbitmq.client",
    "AllocateConsistentHash": "orbitmq.client",
    "TransactionProducer": "orbitmq.client",
    "AsyncTransactionProducer": "orbitmq.client",
    "TransactionListener": "orbitmq.client",
    "LocalTransactionState": "orbitmq.client",
    "TransactionSendResult": "orbitmq.client",
    "TransactionBatch": "orbitmq.client",
    "TraceConfig": "orbitmq.client",
    "MessageTrace": "orbitmq.client",
    "Credentials": "orbitmq.security.signature",
    "ClientTls": "orbitmq.security.tls",
}

__all__ = [
    "__version__",
    *_LAZY,
    "OrbitMQError",
    "ClientError",
    "BrokerError",
    "TopicNotFoundError",
    "TopicExistsError",
    "QueuesNotDrainedError",
    "ExpressionError",
    "RemoteProtocolError",
    "StoreError",
    "TimeoutError",
    "ConnectionClosedError",
    "AccessDeniedError",
]

if TYPE_CHECKING:  # static checkers see the names; at run time __getattr__ loads them
    from orbitmq.client import Admin as Admin
    from orbitmq.client import AllocateAveragely as AllocateAveragely
    from orbitmq.client import (
        AllocateAveragelyByCircle as AllocateAveragelyByCircle,
    )
    from orbitmq.client import AllocateByConfig as AllocateByConfig
    from orbitmq.client import AllocateByMachineRoom as AllocateByMachineRoom
    from orbitmq.client import AllocateConsistentHash as AllocateConsistentHash
    from orbitmq.client import AsyncAdmin as AsyncAdmin
    from orbitmq.client import AsyncLiteConsumer as AsyncLiteConsumer
    from orbitmq.client import AsyncProducer as AsyncProducer
    from orbitmq.client import AsyncPullConsumer as AsyncPullConsumer
    from orbitmq.client import AsyncPushConsumer as AsyncPushConsumer
    from orbitmq.client import (
        AsyncTransactionProducer as AsyncTransactionProducer,
    )
    from orbitmq.client import ConsumeContext as ConsumeContext
    from orbitmq.client import ConsumeFrom as ConsumeFrom
    from orbitmq.client import ConsumeResult as ConsumeResult
    from orbitmq.client import LiteConsumer as LiteConsumer
    from orbitmq.client import (
        LocalTransactionState as LocalTransactionState,
    )
    from orbitmq.client import MessageModel as MessageModel
    from orbitmq.client import MessageSelector as MessageSelector
    from orbitmq.client import MessageTrace as MessageTrace
    from orbitmq.client import Producer as Producer
    from orbitmq.client import PullConsumer as PullConsumer
    from orbitmq.client import PullResult as PullResult
    from orbitmq.client import PullStatus as PullStatus
    from orbitmq.client import PushConsumer as PushConsumer
    from orbitmq.client import SendResult as SendResult
    from orbitmq.client import SendStatus as SendStatus
    from orbitmq.client import TraceConfig as TraceConfig
    from orbitmq.client import TransactionBatch as TransactionBatch
    from orbitmq.client import (
        TransactionListener as TransactionListener,
    )
    from orbitmq.client import (
        TransactionProducer as TransactionProducer,
    )
    from orbitmq.client import (
        TransactionSendResult as TransactionSendResult,
    )
    from orbitmq.client import select_by_hash as select_by_hash
    from orbitmq.client import select_random as select_random
    from orbitmq.protocol.bodies import MessageQueue as MessageQueue
    from orbitmq.protocol.message import Message as Message
    from orbitmq.protocol.message import MessageExt as MessageExt
    from orbitmq.security.signature import Credentials as Credentials
    from orbitmq.security.tls import ClientTls as ClientTls


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'orbitmq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
