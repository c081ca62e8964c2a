"""SEND_TRANSACTION_BATCH (9101) and END_TRANSACTION_BATCH (9102): OrbitMQ's transactions by the
batch (the layout in batch.py, the protocol in ``protocol.codes.OrbitMQRequestCode``).

A batch is stored as one half message and ends with one verdict; the checks of its sending are
those of a send (permissions, sizes, the topic), plus what a commit needs to be certain to
succeed later: the body is a well-formed batch of at most ``max_message_size`` bytes whose stored
form fits one append, with ``count`` messages, each with a UNIQ_KEY, none delayed or
transactional. Refusals: MESSAGE_ILLEGAL for what the messages hold, INVALID_PARAMETER for a
header field (the transport answers one that does not parse), NO_PERMISSION and TOPIC_NOT_EXIST
as for sends. A batch to a topic that does not exist creates it as a send does (from TBW102, when
the broker auto-creates topics, with the producer's ``defaultTopicQueueNums``), and is answered
once the name servers have the new route: a first exactly-once write to a new topic works as a
first send does. Both are saved and answered through the durable-save seam, as a send and
END_TRANSACTION are.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.durable_save import APPENDED, put_answer
from orbitmq.broker.processor.send_processor import ROUTE_PUBLISH_WAIT_S
from orbitmq.broker.tables.topic_config_manager import (
    DEFAULT_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    TRANS_HALF_TOPIC,
    validate_topic,
)
from orbitmq.broker.transaction.batch import TRAN_BATCH, is_batch
from orbitmq.broker.transaction.ending import Answer, Ending, commit_answer, end_transaction
from orbitmq.broker.transaction.service import TransactionService
from orbitmq.errors import BrokerError, RemoteProtocolError
from orbitmq.protocol.bodies import Perm, TopicConfig
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.extension_headers import (
    EndTransactionBatchRequestHeader,
    SendTransactionBatchRequestHeader,
)
from orbitmq.protocol.message import MessageExt, PropertyKey
from orbitmq.protocol.properties import PROPERTIES_SIZE_MAX, parse_properties
from orbitmq.protocol.stored import check_wire_batch
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.status import PutMessageResult, PutMessageStatus
from orbitmq.transport.connection import RemotingConnection

__all__ = ["TransactionBatchProcessor"]

log = logging.getLogger(__name__)

_PERM_WRITE = int(Perm.WRITE)



class TransactionBatchProcessor:
    """The two batch handlers over the TransactionService (which settles and checks batches as
    it does single transactions)."""

    def __init__(self, ctx: BrokerContext, service: TransactionService) -> None:
        self.ctx = ctx
        self.service = service
        self._round_robin = itertools.count()

    # -- SEND_TRANSACTION_BATCH ----------------------------------------------------------------
    def send_batch(self, cmd: RemotingCommand, conn: RemotingConnection) -> Answer:
        h = SendTransactionBatchRequestHeader.from_ext_fields(cmd.ext_fields)
        body = cmd.body if isinstance(cmd.body, bytes) else bytes(cmd.body)
        created = self.ctx.topics.get(h.topic) is None
        try:
            queue_id = self._check(h, len(body))
            half = self._half(h, body, queue_id, _born_host(conn))
        except BrokerError as e:  # a check; reject_transaction_message; topics_max by a creation
            return cmd.response(e.code, e.remark)
        result = self.ctx.saver.append([half])
        self.ctx.stats.on_send(h.topic, result.append, [half])
        tx_id = half.properties[PropertyKey.UNIQ_KEY]
        answer = self.ctx.saver.answer(result, _send_response, cmd, queue_id, tx_id)
        if created and result.status is PutMessageStatus.PUT_OK:
            return self._after_route_published(answer)
        return answer

    async def _after_route_published(self, answer: Answer) -> RemotingCommand:
        """The answer to the batch that created its topic, once the name servers have the new
        route (or ROUTE_PUBLISH_WAIT_S passed), as for a send that creates its topic."""
        try:
            await asyncio.wait_for(self.ctx.route_published(), ROUTE_PUBLISH_WAIT_S)
        except TimeoutError:
            log.warning("new topic's route not published within %.1f s; answering the batch",
                        ROUTE_PUBLISH_WAIT_S)
        return answer if isinstance(answer, RemotingCommand) else await answer

    def _create_topic(self, h: SendTransactionBatchRequestHeader) -> TopicConfig:
        """The batch's topic created as a send creates it (BrokerError past ``topics_max``)."""
        nums = h.default_topic_queue_nums or self.ctx.config.default_topic_queue_nums
        tc = self.ctx.topics.create_in_send(h.topic, DEFAULT_TOPIC, nums, 0)
        if tc is None:
            raise BrokerError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first "
                           "please! (this broker does not auto-create topics)")
        return tc

    def _check(self, h: SendTransactionBatchRequestHeader, body_size: int) -> int:
        """The queue the batch goes to (its topic created when missing and the broker
        auto-creates topics); BrokerError when it may not go."""
        config = self.ctx.config
        if not config.broker_permission & _PERM_WRITE:
            raise BrokerError(ResponseCode.NO_PERMISSION,
                           f"the broker[{config.broker_name}] sending message is forbidden")
        if body_size > config.store.max_message_size:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, f"transaction batch body of {body_size} "
                           f"bytes exceeds the limit {config.store.max_message_size}")
        if h.properties is not None and len(h.properties) >= PROPERTIES_SIZE_MAX:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, f"batch properties size "
                           f"{len(h.properties)} exceeds the limit {PROPERTIES_SIZE_MAX}")
        topic = h.topic
        problem = validate_topic(topic)
        if problem is not None:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, problem)
        if topic in NOT_ALLOWED_SEND_TOPICS or topic.startswith(
                (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            raise BrokerError(ResponseCode.NO_PERMISSION,
                           f"sending a transaction batch to topic[{topic}] is forbidden")
        tc = self.ctx.topics.get(topic)
        if tc is None:
            tc = self._create_topic(h)
        if not tc.perm & _PERM_WRITE:
            raise BrokerError(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        if tc.write_queue_nums <= 0:
            raise BrokerError(ResponseCode.SYSTEM_ERROR, f"topic[{topic}] has no write queue")
        if 0 <= h.queue_id < tc.write_queue_nums:
            return h.queue_id
        return next(self._round_robin) % tc.write_queue_nums

    def _half(self, h: SendTransactionBatchRequestHeader, body: bytes, queue_id: int,
              born_host: tuple[str, int]) -> MessageInner:
        """The batch's half message, after checking that its commit will store (see the module
        docstring). Raises BrokerError (a check failed, or transactions are refused)."""
        try:
            props = parse_properties(h.properties)
        except RemoteProtocolError as e:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, f"batch properties: {e}") from None
        if not props.get(PropertyKey.UNIQ_KEY):
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL,
                           "a transaction batch needs its transaction id as UNIQ_KEY")
        if PropertyKey.DELAY in props:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, "a transaction batch cannot be delayed")
        store, host = self.ctx.store, self.ctx.host.store_host
        try:  # what the commit's encode_wire_batch will check, nothing encoded now
            checked = check_wire_batch(h.topic, queue_id, body, 0, h.born_timestamp, born_host,
                                       host, 0, store.config.max_message_size, store.max_blob_size)
        except RemoteProtocolError as e:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, f"malformed transaction batch: {e}") from None
        if checked is None:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL,
                           "a transaction batch may not hold delayed or transaction messages")
        count, without_uniq = checked
        if count != h.count:
            raise BrokerError(ResponseCode.INVALID_PARAMETER, f"SendTransactionBatchRequestHeader."
                           f"count: {h.count}, but the body holds {count} messages")
        if without_uniq:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL,
                           "every message of a transaction batch needs a UNIQ_KEY")
        msg = MessageInner(h.topic, queue_id, body, props, 0, 0, h.born_timestamp, born_host,
                           host, 0)
        half = self.service.to_half(msg, h.producer_group)
        half.properties[PropertyKey.TRAN_MSG] = "true"
        half.properties[TRAN_BATCH] = str(count)
        return half

    # -- END_TRANSACTION_BATCH -----------------------------------------------------------------
    def end_batch(self, cmd: RemotingCommand, conn: RemotingConnection) -> Answer:
        h = EndTransactionBatchRequestHeader.from_ext_fields(cmd.ext_fields)
        ending = Ending("transaction batch", "END_TRANSACTION_BATCH", h.commit_or_rollback,
                        h.from_transaction_check, h.producer_group, h.transaction_id,
                        h.commit_log_offset)
        return end_transaction(self.service, cmd, conn, ending, lambda half: _mismatch(half, h),
                               _commit_answer)


def _born_host(conn: RemotingConnection) -> tuple[str, int]:
    ip, _, port = conn.peer.rpartition(":")
    return ip or "127.0.0.1", int(port) if port.isdigit() else 0


def _send_response(result: PutMessageResult, cmd: RemotingCommand, queue_id: int,
                   tx_id: str) -> RemotingCommand:
    append, status = result.append, result.status
    if append is None or status not in APPENDED:
        return cmd.response(*put_answer(result))
    fields = {"msgId": append.msg_ids[0], "queueId": str(queue_id),
              "queueOffset": str(append.queue_offset), "transactionId": tx_id}
    if status is PutMessageStatus.PUT_OK:
        return cmd.response(ResponseCode.SUCCESS, None, fields)
    code, remark = put_answer(result)
    return cmd.response(code, remark, fields)


def _mismatch(half: MessageExt | None, h: EndTransactionBatchRequestHeader) -> str | None:
    """Why the request does not name a pending batch of this group, or None when it does."""
    at = h.commit_log_offset
    if half is None:
        return f"find prepared transaction batch failed: nothing at commitLogOffset {at}"
    if half.topic != TRANS_HALF_TOPIC:
        return f"the message at commitLogOffset {at} is not a half message"
    if not is_batch(half):
        return (f"the half message at commitLogOffset {at} is a single transaction: end it with "
                "END_TRANSACTION (37)")
    group = half.properties.get(PropertyKey.PGROUP)
    if group != h.producer_group:
        return f"the producer group wrong: the batch belongs to {group!r}, not {h.producer_group!r}"
    if half.queue_offset != h.tran_state_table_offset:
        return (f"the transaction state table offset wrong: {h.tran_state_table_offset}, "
                f"the batch's half message is at {half.queue_offset}")
    if half.uniq_key != h.transaction_id:
        return (f"the transaction id wrong: {h.transaction_id!r}, the batch at commitLogOffset "
                f"{at} is {half.uniq_key!r}")
    return None


def _commit_answer(result: PutMessageResult, cmd: RemotingCommand, half: MessageExt) -> RemotingCommand:
    append = result.append
    queue_id = int(half.properties.get(PropertyKey.REAL_QID, "0") or 0)
    fields = None if append is None else {"queueId": str(queue_id),
                                          "queueOffset": str(append.queue_offset),
                                          "count": str(append.msg_num)}
    return commit_answer(result, cmd, "committed batch", fields)
