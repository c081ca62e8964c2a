"""The OrbitMQ SDK: producers, consumers and the admin client (imports protocol and transport only).

Every blocking class has an asyncio twin with the same methods as coroutines; every client is a
context manager that starts on enter and shuts down on exit.
"""

from orbitmq.client.admin import Admin, AsyncAdmin
from orbitmq.client.admin_models import (
    ConsumerConnection,
    ConsumerConnectionInfo,
    GroupStatus,
    QueueConsumeStatus,
    TopicQueueStatus,
)
from orbitmq.client.consume_types import ConsumeContext, ConsumeFrom, ConsumeResult, MessageModel
from orbitmq.client.message_selector import MessageSelector
from orbitmq.client.producer import AsyncProducer, Producer
from orbitmq.client.pull_consumer import AsyncPullConsumer, PullConsumer
from orbitmq.client.push_consumer import AsyncPushConsumer, PushConsumer
from orbitmq.client.rebalance import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    AllocateStrategy,
)
from orbitmq.client.results import PullResult, PullStatus, SendResult, SendStatus
from orbitmq.client.selectors import MessageQueueSelector, select_by_hash, select_random

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
    "MessageQueueSelector",
    "select_by_hash",
    "select_random",
]
