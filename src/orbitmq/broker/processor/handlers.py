"""Every request code the broker answers and the handler that answers it: the one table.

Processors only offer handler methods; which code goes to which method, which handlers first
wait for the store's dispatch (read-your-writes: ``after_dispatch``) and which a slave refuses
(``masters_only``), is decided here and nowhere else. A new request family adds its processor
to :class:`Processors` and its rows to :func:`handler_table`.

A slave (broker/role.py, asked at each request: the role may change) refuses what would change
its store or its tables, which are its master's copies, with RocketMQ's answers: sends and
send-backs SERVICE_NOT_AVAILABLE (RocketMQ's store refuses puts on a slave), END_TRANSACTION
SLAVE_NOT_AVAILABLE, topic, group and offset administration NO_PERMISSION. It serves pulls,
queries, lookups and the tables' reads, and takes consumer offset commits as RocketMQ's slaves
do (a client commits to a slave only while its master is gone; the master's copy wins when
the slave next copies the master's tables).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from orbitmq.broker.processor.admin_processor import AdminProcessor
from orbitmq.broker.processor.broker_config_processor import BrokerConfigProcessor
from orbitmq.broker.processor.client_processor import ClientProcessor
from orbitmq.broker.processor.consume_admin_processor import ConsumeAdminProcessor
from orbitmq.broker.processor.consumer_info_processor import ConsumerInfoProcessor
from orbitmq.broker.processor.lock_processor import LockProcessor
from orbitmq.broker.processor.offset_processor import OffsetProcessor
from orbitmq.broker.processor.pull_processor import PullProcessor
from orbitmq.broker.processor.query_processor import QueryProcessor
from orbitmq.broker.processor.recall_processor import RecallProcessor
from orbitmq.broker.processor.replica_processor import ReplicaProcessor
from orbitmq.broker.processor.send_back_processor import SendBackProcessor
from orbitmq.broker.processor.send_processor import SendProcessor
from orbitmq.broker.processor.stats_processor import StatsProcessor
from orbitmq.broker.role import RoleState
from orbitmq.broker.transaction import EndTransactionProcessor, TransactionBatchProcessor
from orbitmq.broker.transaction.pending_processor import PendingTransactionsProcessor
from orbitmq.protocol.codes import OrbitMQRequestCode, RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.security.access_table import AuthRequestCode
from orbitmq.security.admin_handlers import AuthAdminHandlers
from orbitmq.transport.connection import HandlerResult, RemotingConnection
from orbitmq.transport.server import Handler

__all__ = ["Processors", "handler_table", "auth_handler_table", "masters_only", "SLAVE_REFUSALS"]

# What a slave answers to requests it does not serve (see the module docstring).
_SLAVE_SENDS = "this broker is a slave: it stores its master's messages only; send to the master"
SLAVE_REFUSALS: dict[int, tuple[ResponseCode, str]] = {
    RequestCode.SEND_MESSAGE: (ResponseCode.SERVICE_NOT_AVAILABLE, _SLAVE_SENDS),
    RequestCode.SEND_MESSAGE_V2: (ResponseCode.SERVICE_NOT_AVAILABLE, _SLAVE_SENDS),
    RequestCode.SEND_BATCH_MESSAGE: (ResponseCode.SERVICE_NOT_AVAILABLE, _SLAVE_SENDS),
    RequestCode.CONSUMER_SEND_MSG_BACK: (ResponseCode.SERVICE_NOT_AVAILABLE, _SLAVE_SENDS),
    RequestCode.END_TRANSACTION: (
        ResponseCode.SLAVE_NOT_AVAILABLE,
        "this broker is a slave: transactions are ended on the master of its broker set"),
    OrbitMQRequestCode.SEND_TRANSACTION_BATCH: (ResponseCode.SERVICE_NOT_AVAILABLE, _SLAVE_SENDS),
    OrbitMQRequestCode.END_TRANSACTION_BATCH: (
        ResponseCode.SLAVE_NOT_AVAILABLE,
        "this broker is a slave: transactions are ended on the master of its broker set"),
}
for _code in (RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.DELETE_TOPIC_IN_BROKER,
              RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP,
              RequestCode.CLONE_GROUP_OFFSET):
    SLAVE_REFUSALS[_code] = (
        ResponseCode.NO_PERMISSION,
        f"this broker is a slave: {_code.name} is refused (its topics, groups and offsets are "
        "copies of its master's); send it to the master")


_SLAVE_AUTH = ("this broker is a slave: its users and ACLs are copies of its master's; "
               "change them on the master")
for _auth_code in (AuthRequestCode.AUTH_CREATE_USER, AuthRequestCode.AUTH_UPDATE_USER,
              AuthRequestCode.AUTH_DELETE_USER, AuthRequestCode.AUTH_CREATE_ACL,
              AuthRequestCode.AUTH_UPDATE_ACL, AuthRequestCode.AUTH_DELETE_ACL):
    SLAVE_REFUSALS[_auth_code] = (ResponseCode.NO_PERMISSION, _SLAVE_AUTH)


def masters_only(code: int, handler: Handler, role: RoleState) -> Handler:
    """``handler``, answered with the slave's refusal of ``code`` while ``role`` is a slave."""
    refusal_code, remark = SLAVE_REFUSALS[code]

    def gated(cmd: RemotingCommand, conn: RemotingConnection) -> HandlerResult:
        if role.accepts_writes:
            return handler(cmd, conn)
        return cmd.response(refusal_code, remark)

    gated.__name__ = getattr(handler, "__name__", "handler")
    return gated


@dataclasses.dataclass(frozen=True, eq=False)
class Processors:
    """The broker's request processors (built by the controller from one BrokerContext); the
    tables and services they answer for are theirs to reach, never handlers of their own."""

    send: SendProcessor
    pull: PullProcessor
    clients: ClientProcessor
    query: QueryProcessor
    admin: AdminProcessor
    offsets: OffsetProcessor
    send_back: SendBackProcessor
    locks: LockProcessor
    consumer_info: ConsumerInfoProcessor
    pending_transactions: PendingTransactionsProcessor
    end_transaction: EndTransactionProcessor
    stats: StatsProcessor
    consume_admin: ConsumeAdminProcessor
    broker_config: BrokerConfigProcessor
    replica: ReplicaProcessor
    transaction_batches: TransactionBatchProcessor
    recall: RecallProcessor | None = None  # RECALL_MESSAGE (RocketMQ 5.3), over the timer


def handler_table(p: Processors, after_dispatch: Callable[[Handler], Handler],
                  role: RoleState) -> dict[int, Handler]:
    """Request code -> handler. ``after_dispatch(h)`` runs ``h`` once the store has dispatched
    every send acknowledged before the request (reads of queues and stats); the codes of
    SLAVE_REFUSALS are answered by ``role``'s master only."""
    table = _table(p, after_dispatch)
    if p.recall is not None:  # the timer service answers a slave's refusal itself (RocketMQ's)
        table[RequestCode.RECALL_MESSAGE] = p.recall.recall_message
    for code in SLAVE_REFUSALS:
        if code in table:  # the user and ACL codes are auth_handler_table's
            table[code] = masters_only(code, table[code], role)
    return table


def auth_handler_table(admin: AuthAdminHandlers, role: RoleState) -> dict[int, Handler]:
    """The user and ACL codes (security/admin_handlers.py); their changes on the master only."""
    table: dict[int, Handler] = dict(admin.table())
    for code in table:
        if code in SLAVE_REFUSALS:
            table[code] = masters_only(code, table[code], role)
    return table


def _table(p: Processors, after_dispatch: Callable[[Handler], Handler]) -> dict[int, Handler]:
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
        RequestCode.UNREGISTER_CLIENT: p.locks.releasing(p.clients.unregister_client),
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
        RequestCode.EXPORT_ROCKSDB_CONFIG_TO_JSON: p.admin.export_metadata,
        OrbitMQRequestCode.LIST_PENDING_TRANSACTIONS: wait(p.pending_transactions.list_pending),
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
        # replication: what a slave copies, and the HA status (RocketMQ 5's)
        RequestCode.GET_ALL_DELAY_OFFSET: p.replica.get_all_delay_offset,
        RequestCode.GET_BROKER_HA_STATUS: p.replica.get_broker_ha_status,
    }
