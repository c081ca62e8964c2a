"""Every request code the broker answers and the handler that answers it: the one table.

Processors only offer handler methods; which code goes to which method, and which handlers first
wait for the store's dispatch (read-your-writes: ``after_dispatch``), is decided here and nowhere
else. A new request family adds its processor to :class:`Processors` and its rows to
:func:`handler_table`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from orbitmq.broker.admin_processor import AdminProcessor
from orbitmq.broker.broker_config_processor import BrokerConfigProcessor
from orbitmq.broker.client_processor import ClientProcessor
from orbitmq.broker.consume_admin_processor import ConsumeAdminProcessor
from orbitmq.broker.consumer_info_processor import ConsumerInfoProcessor
from orbitmq.broker.consumer_offset_manager import ConsumerOffsetManager
from orbitmq.broker.pull_processor import PullProcessor
from orbitmq.broker.query_processor import QueryProcessor
from orbitmq.broker.queue_lock_manager import QueueLockManager
from orbitmq.broker.send_back_processor import SendBackProcessor
from orbitmq.broker.send_processor import SendProcessor
from orbitmq.broker.stats_processor import StatsProcessor
from orbitmq.broker.transaction import (
    EndTransactionProcessor,
    TransactionBatchProcessor,
    TransactionService,
)
from orbitmq.protocol.codes import OrbitMQRequestCode, RequestCode
from orbitmq.transport.server import Handler

__all__ = ["Processors", "handler_table"]


@dataclasses.dataclass(frozen=True, eq=False)
class Processors:
    """The broker's request processors (built by the controller from one BrokerContext)."""

    send: SendProcessor
    pull: PullProcessor
    clients: ClientProcessor
    query: QueryProcessor
    admin: AdminProcessor
    offsets: ConsumerOffsetManager
    send_back: SendBackProcessor
    locks: QueueLockManager
    consumer_info: ConsumerInfoProcessor
    transactions: TransactionService
    end_transaction: EndTransactionProcessor
    stats: StatsProcessor
    consume_admin: ConsumeAdminProcessor
    broker_config: BrokerConfigProcessor
    transaction_batches: TransactionBatchProcessor


def handler_table(p: Processors, after_dispatch: Callable[[Handler], Handler]) -> dict[int, Handler]:
    """Request code -> handler. ``after_dispatch(h)`` runs ``h`` once the store has dispatched
    every send acknowledged before the request (reads of queues and stats)."""
    wait = after_dispatch
    return {
        # sends and pulls
        RequestCode.SEND_MESSAGE: p.send.send_message,
        RequestCode.SEND_MESSAGE_V2: p.send.send_message,
        RequestCode.SEND_BATCH_MESSAGE: p.send.send_batch_message,
        RequestCode.PULL_MESSAGE: p.pull.pull_message,
        RequestCode.CONSUMER_SEND_MSG_BACK: p.send_back.consumer_send_msg_back,
        RequestCode.END_TRANSACTION: p.end_transaction.end_transaction,
        # OrbitMQ: transactions by the batch, bulk pulls (protocol/codes.py)
        OrbitMQRequestCode.SEND_TRANSACTION_BATCH: p.transaction_batches.send_batch,
        OrbitMQRequestCode.END_TRANSACTION_BATCH: p.transaction_batches.end_batch,
        OrbitMQRequestCode.PULL_MESSAGE_BULK: p.pull.pull_message_bulk,
        # clients
        RequestCode.HEART_BEAT: p.clients.heart_beat,
        # a client that leaves its group gives up its orderly queue locks at once
        RequestCode.UNREGISTER_CLIENT: p.locks.releasing(p.clients.unregister_client,
                                                         p.clients.clients),
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: p.clients.get_consumer_list_by_group,
        RequestCode.CHECK_CLIENT_CONFIG: p.clients.check_client_config,
        RequestCode.QUERY_CONSUMER_OFFSET: p.offsets.query_consumer_offset,
        RequestCode.UPDATE_CONSUMER_OFFSET: p.offsets.update_consumer_offset,
        RequestCode.LOCK_BATCH_MQ: p.locks.lock_batch_mq,
        RequestCode.UNLOCK_BATCH_MQ: p.locks.unlock_batch_mq,
        RequestCode.GET_CONSUMER_CONNECTION_LIST: p.consumer_info.get_consumer_connection_list,
        RequestCode.GET_CONSUMER_RUNNING_INFO: p.consumer_info.get_consumer_running_info,
        # offsets and messages (VIEW_MESSAGE_BY_ID reads the commit log: nothing to wait for)
        RequestCode.GET_MAX_OFFSET: wait(p.query.get_max_offset),
        RequestCode.GET_MIN_OFFSET: wait(p.query.get_min_offset),
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: wait(p.query.search_offset_by_timestamp),
        RequestCode.GET_EARLIEST_MSG_STORETIME: wait(p.query.get_earliest_msg_storetime),
        RequestCode.VIEW_MESSAGE_BY_ID: p.query.view_message_by_id,
        RequestCode.QUERY_MESSAGE: wait(p.query.query_message),
        # administration
        RequestCode.UPDATE_AND_CREATE_TOPIC: p.admin.update_and_create_topic,
        RequestCode.DELETE_TOPIC_IN_BROKER: p.admin.delete_topic,
        RequestCode.GET_ALL_TOPIC_CONFIG: p.admin.get_all_topic_config,
        RequestCode.GET_TOPIC_STATS_INFO: wait(p.admin.get_topic_stats_info),
        RequestCode.GET_CONSUME_STATS: wait(p.admin.get_consume_stats),
        RequestCode.GET_ALL_CONSUMER_OFFSET: p.admin.get_all_consumer_offset,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: p.admin.update_subscription_group,
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: p.admin.get_all_subscription_group,
        RequestCode.DELETE_SUBSCRIPTIONGROUP: p.admin.delete_subscription_group,
        OrbitMQRequestCode.LIST_PENDING_TRANSACTIONS: wait(p.transactions.list_pending),
        # operations: runtime info, stats, connections, settings
        RequestCode.GET_BROKER_RUNTIME_INFO: p.stats.get_broker_runtime_info,
        RequestCode.VIEW_BROKER_STATS_DATA: p.stats.view_broker_stats_data,
        RequestCode.GET_BROKER_CONSUME_STATS: p.stats.get_broker_consume_stats,
        RequestCode.GET_PRODUCER_CONNECTION_LIST: p.consume_admin.get_producer_connection_list,
        RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: p.consume_admin.query_topic_consume_by_who,
        RequestCode.QUERY_CONSUME_TIME_SPAN: p.consume_admin.query_consume_time_span,
        RequestCode.CLONE_GROUP_OFFSET: p.consume_admin.clone_group_offset,
        RequestCode.QUERY_CONSUME_QUEUE: p.consume_admin.query_consume_queue,
        RequestCode.GET_BROKER_CONFIG: p.broker_config.get_broker_config,
        RequestCode.UPDATE_BROKER_CONFIG: p.broker_config.update_broker_config,
    }
