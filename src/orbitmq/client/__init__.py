"""The OrbitMQ SDK: producers, consumers and the admin client (imports protocol and transport only).

The Spark connector, the web console, the ``orbitmq`` CLI and the reliable messaging toolkit are
built on it alone, and import only what this module exports (import-linter contracts hold them
to it): what they need from a broker (raw pulls, ending a transaction by its receipt, topic admin
by broker address, browsing) is SDK API.

Inside, the SDK is arranged by role: ``producer/`` (producers, auto-batching, the send codec,
transactions), ``consumer/`` (push and pull consumers, the pull codec, rebalancing, offset
stores), ``admin/`` (the admin client over a shared core, one module per area), ``trace/``
(message trace: the records traced clients write, their dispatcher, one message's journey), and
the parts they share at the top (client instance, routes, results, validation, the event loop).

Every blocking class has an asyncio twin with the same methods as coroutines; every client is a
context manager that starts on enter and shuts down on exit.
"""

from orbitmq.client.admin.browse import consumed_by
from orbitmq.client.admin.client import Admin, AsyncAdmin
from orbitmq.client.admin.groups import (
    DLQ_TOPIC_PREFIX,
    RETRY_BOOKKEEPING,
    RETRY_TOPIC_PREFIX,
    original_topic,
    running_info_queues,
)
from orbitmq.client.admin.models import (
    ConsumerConnection,
    ConsumerConnectionInfo,
    GroupStatus,
    QueueConsumeStatus,
    TopicQueueStatus,
)
from orbitmq.client.admin.ops_models import first_rate
from orbitmq.client.consumer.consume_types import (
    ConsumeContext,
    ConsumeFrom,
    ConsumeResult,
    MessageModel,
    retry_topic,
)
from orbitmq.client.consumer.lite_consumer import AsyncLiteConsumer, LiteConsumer
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
from orbitmq.client.loop import new_event_loop, run
from orbitmq.client.producer.producer import AsyncProducer, Producer
from orbitmq.client.producer.selectors import MessageQueueSelector, select_by_hash, select_random
from orbitmq.client.producer.transaction_end import HalfMessageRef
from orbitmq.client.producer.transaction_producer import (
    AsyncTransactionProducer,
    TransactionProducer,
)
from orbitmq.client.producer.transaction_state import (
    LocalTransactionState,
    TransactionBatch,
    TransactionListener,
    TransactionSendResult,
    transaction_id,
)
from orbitmq.client.response_names import response_name
from orbitmq.client.results import PullResult, PullStatus, RawPullResult, SendResult, SendStatus
from orbitmq.client.route import MASTER_ID
from orbitmq.client.system_names import (
    SYSTEM_GROUPS,
    SYSTEM_TOPICS,
    is_system_group,
    is_system_topic,
    topic_kind,
)
from orbitmq.client.trace.dispatcher import TraceConfig, TraceStats
from orbitmq.client.trace.journey import (
    ConsumeStep,
    GroupProgress,
    MessageTrace,
    PublishStep,
    StoredAt,
    TransactionStep,
)
from orbitmq.client.validation import NOT_ALLOWED_SEND_TOPICS, check_group, check_topic
from orbitmq.security.signature import Credentials
from orbitmq.security.tls import ClientTls

__all__ = [
    # admin
    "Admin",
    "AsyncAdmin",
    "TopicQueueStatus",
    "QueueConsumeStatus",
    "GroupStatus",
    "ConsumerConnection",
    "ConsumerConnectionInfo",
    # producers and transactions
    "AsyncProducer",
    "Producer",
    "AsyncTransactionProducer",
    "TransactionProducer",
    "TransactionListener",
    "LocalTransactionState",
    "TransactionSendResult",
    "TransactionBatch",
    "transaction_id",
    "HalfMessageRef",
    "MessageQueueSelector",
    "select_by_hash",
    "select_random",
    # consumers
    "AsyncPullConsumer",
    "LiteConsumer",
    "AsyncLiteConsumer",
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
    # message trace
    "TraceConfig",
    "TraceStats",
    "MessageTrace",
    "PublishStep",
    "StoredAt",
    "ConsumeStep",
    "GroupProgress",
    "TransactionStep",
    # results
    "SendResult",
    "SendStatus",
    "PullResult",
    "PullStatus",
    "RawPullResult",
    # security
    "Credentials",
    "ClientTls",
    # running the async clients from plain code
    "run",
    "new_event_loop",
    # names and rules the tools built on the SDK share (CLI, console, Spark, reliable)
    "MASTER_ID",
    "RETRY_TOPIC_PREFIX",
    "DLQ_TOPIC_PREFIX",
    "RETRY_BOOKKEEPING",
    "SYSTEM_TOPICS",
    "SYSTEM_GROUPS",
    "NOT_ALLOWED_SEND_TOPICS",
    "retry_topic",
    "original_topic",
    "topic_kind",
    "is_system_topic",
    "is_system_group",
    "check_topic",
    "check_group",
    "response_name",
    "first_rate",
    "running_info_queues",
    "consumed_by",
]
