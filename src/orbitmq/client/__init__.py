"""The OrbitMQ SDK: producers, consumers and the admin client (imports protocol and transport only).

The Spark connector and the ``orbitmq`` CLI are built on it alone: what they need from a broker
(raw pulls, ending a transaction by its receipt, topic admin by broker address) is SDK API.

Every blocking class has an asyncio twin with the same methods as coroutines; every client is a
context manager that starts on enter and shuts down on exit.
"""

from orbitmq.client.admin.client import Admin, AsyncAdmin
from orbitmq.client.admin.models import (
    ConsumerConnection,
    ConsumerConnectionInfo,
    GroupStatus,
    QueueConsumeStatus,
    TopicQueueStatus,
)
from orbitmq.client.consumer.consume_types import (
    ConsumeContext,
    ConsumeFrom,
    ConsumeResult,
    MessageModel,
)
from orbitmq.client.consumer.message_selector import MessageSelector
from orbitmq.client.consumer.pull_consumer import AsyncPullConsumer, PullConsumer
from orbitmq.client.consumer.push_consumer import AsyncPushConsumer, PushConsumer
from orbitmq.client.consumer.rebalance import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    AllocateStrategy,
)
from orbitmq.client.producer.producer import AsyncProducer, Producer
from orbitmq.client.producer.selectors import MessageQueueSelector, select_by_hash, select_random
from orbitmq.client.producer.transaction_end import HalfMessageRef
from orbitmq.client.results import PullResult, PullStatus, RawPullResult, SendResult, SendStatus
from orbitmq.security.signature import Credentials
from orbitmq.security.tls import ClientTls

__all__ = [
    "Admin",
    "AsyncAdmin",
    "TopicQueueStatus",
    "QueueConsumeStatus",
    "GroupStatus",
    "ConsumerConnection",
    "ConsumerConnectionInfo",
    "AsyncProducer",
    "Producer",
    "AsyncPullConsumer",
    "PullConsumer",
    "AsyncPushConsumer",
    "PushConsumer",
    "ConsumeResult",
    "ConsumeFrom",
    "ConsumeContext",
    "MessageModel",
    "MessageSelector",
    "AllocateStrategy",
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateByConfig",
    "AllocateByMachineRoom",
    "AllocateConsistentHash",
    "SendResult",
    "SendStatus",
    "PullResult",
    "PullStatus",
    "RawPullResult",
    "HalfMessageRef",
    "MessageQueueSelector",
    "select_by_hash",
    "select_random",
    "Credentials",
    "ClientTls",
]
