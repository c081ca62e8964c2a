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

# public name -> module that defines it
_LAZY = {
    "Message": "orbitmq.protocol.message",
    "MessageExt": "orbitmq.protocol.message",
    "MessageQueue": "orbitmq.protocol.bodies",
    "Producer": "orbitmq.client.producer.producer",
    "AsyncProducer": "orbitmq.client.producer.producer",
    "PullConsumer": "orbitmq.client.consumer.pull_consumer",
    "AsyncPullConsumer": "orbitmq.client.consumer.pull_consumer",
    "Admin": "orbitmq.client.admin.client",
    "AsyncAdmin": "orbitmq.client.admin.client",
    "SendResult": "orbitmq.client.results",
    "SendStatus": "orbitmq.client.results",
    "PullResult": "orbitmq.client.results",
    "PullStatus": "orbitmq.client.results",
    "RawPullResult": "orbitmq.client.results",
    "HalfMessageRef": "orbitmq.client.producer.transaction_end",
    "MessageSelector": "orbitmq.client.consumer.message_selector",
    "select_by_hash": "orbitmq.client.producer.selectors",
    "select_random": "orbitmq.client.producer.selectors",
    "PushConsumer": "orbitmq.client.consumer.push_consumer",
    "AsyncPushConsumer": "orbitmq.client.consumer.push_consumer",
    "ConsumeResult": "orbitmq.client.consumer.consume_types",
    "ConsumeFrom": "orbitmq.client.consumer.consume_types",
    "ConsumeContext": "orbitmq.client.consumer.consume_types",
    "MessageModel": "orbitmq.client.consumer.consume_types",
    "AllocateAveragely": "orbitmq.client.consumer.rebalance",
    "AllocateAveragelyByCircle": "orbitmq.client.consumer.rebalance",
    "AllocateByConfig": "orbitmq.client.consumer.rebalance",
    "AllocateByMachineRoom": "orbitmq.client.consumer.rebalance",
    "AllocateConsistentHash": "orbitmq.client.consumer.rebalance",
    "TransactionProducer": "orbitmq.client.producer.transaction_producer",
    "AsyncTransactionProducer": "orbitmq.client.producer.transaction_producer",
    "TransactionListener": "orbitmq.client.producer.transaction_producer",
    "LocalTransactionState": "orbitmq.client.producer.transaction_producer",
    "TransactionSendResult": "orbitmq.client.producer.transaction_producer",
    "TransactionBatch": "orbitmq.client.producer.transaction_producer",
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
    from orbitmq.client.admin.client import Admin as Admin
    from orbitmq.client.admin.client import AsyncAdmin as AsyncAdmin
    from orbitmq.client.consumer.consume_types import ConsumeContext as ConsumeContext
    from orbitmq.client.consumer.consume_types import ConsumeFrom as ConsumeFrom
    from orbitmq.client.consumer.consume_types import ConsumeResult as ConsumeResult
    from orbitmq.client.consumer.consume_types import MessageModel as MessageModel
    from orbitmq.client.consumer.message_selector import MessageSelector as MessageSelector
    from orbitmq.client.consumer.pull_consumer import AsyncPullConsumer as AsyncPullConsumer
    from orbitmq.client.consumer.pull_consumer import PullConsumer as PullConsumer
    from orbitmq.client.consumer.push_consumer import AsyncPushConsumer as AsyncPushConsumer
    from orbitmq.client.consumer.push_consumer import PushConsumer as PushConsumer
    from orbitmq.client.consumer.rebalance import AllocateAveragely as AllocateAveragely
    from orbitmq.client.consumer.rebalance import (
        AllocateAveragelyByCircle as AllocateAveragelyByCircle,
    )
    from orbitmq.client.consumer.rebalance import AllocateByConfig as AllocateByConfig
    from orbitmq.client.consumer.rebalance import AllocateByMachineRoom as AllocateByMachineRoom
    from orbitmq.client.consumer.rebalance import AllocateConsistentHash as AllocateConsistentHash
    from orbitmq.client.producer.producer import AsyncProducer as AsyncProducer
    from orbitmq.client.producer.producer import Producer as Producer
    from orbitmq.client.producer.selectors import select_by_hash as select_by_hash
    from orbitmq.client.producer.selectors import select_random as select_random
    from orbitmq.client.producer.transaction_producer import (
        AsyncTransactionProducer as AsyncTransactionProducer,
    )
    from orbitmq.client.producer.transaction_producer import (
        LocalTransactionState as LocalTransactionState,
    )
    from orbitmq.client.producer.transaction_producer import TransactionBatch as TransactionBatch
    from orbitmq.client.producer.transaction_producer import (
        TransactionListener as TransactionListener,
    )
    from orbitmq.client.producer.transaction_producer import (
        TransactionProducer as TransactionProducer,
    )
    from orbitmq.client.producer.transaction_producer import (
        TransactionSendResult as TransactionSendResult,
    )
    from orbitmq.client.results import PullResult as PullResult
    from orbitmq.client.results import PullStatus as PullStatus
    from orbitmq.client.results import SendResult as SendResult
    from orbitmq.client.results import SendStatus as SendStatus
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
