"""Half and op messages: how transactional messages are laid out in the store.

RocketMQ's scheme, which keeps the store unaware of transactions:

- a half message is the producer's message re-addressed to ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0,
  its real topic and queue kept in REAL_TOPIC / REAL_QID and its sysFlag transaction type reset to
  "not a transaction", so the store dispatches it into the half topic's consume queue (where the
  check service scans it) and never into the real topic's (where consumers would see it);
- committing re-stores it under its real topic and queue (sysFlag commit, TRAN_MSG, REAL_TOPIC and
  REAL_QID cleared, UNIQ_KEY kept, preparedTransactionOffset = the half message's commit log
  offset);
- an op message in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0 (tag ``d``, body = the half message's
  queue offset, as RocketMQ writes it) says that the half message has been dealt with. OrbitMQ adds
  two properties: TRAN_PREPARED_QUEUE_OFFSET (the transaction's origin, see state.py) and TRAN_OP
  (COMMITTED / ROLLED_BACK / DISCARDED), so that the outcome survives a restart.

This module builds those messages and reads them back; it decides nothing, and stores nothing
(the TransactionService saves through the broker's durable-save seam).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from orbitmq.broker.tables.topic_config_manager import (
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from orbitmq.broker.transaction.state import HalfState
from orbitmq.protocol.extension_headers import TRAN_BATCH
from orbitmq.protocol.message import (
    TRANSACTION_TYPE_MASK,
    MessageExt,
    MessageSysFlag,
    PropertyKey,
)
from orbitmq.protocol.stored import StoredPeek, encode_stored_message
from orbitmq.store.message_inner import MessageInner

if TYPE_CHECKING:
    from orbitmq.broker.context import BrokerHost
    from orbitmq.store.message_store import MessageStore

__all__ = ["HalfStore", "OP_TAG", "TRAN_OP", "HALF_QUEUE_ID", "origin_of", "check_times_of"]

OP_TAG = "d"  # RocketMQ's TransactionalMessageUtil.REMOVETAG
TRAN_OP = "TRAN_OP"  # OrbitMQ: the outcome an op message records
HALF_QUEUE_ID = 0
_TYPE_BITS = TRANSACTION_TYPE_MASK
_COMMIT = int(MessageSysFlag.TRANSACTION_COMMIT_TYPE)
# Properties only the broker may set on a half message: a producer's value would corrupt the
# check count or make one transaction pass for another.
_BROKER_ONLY = (PropertyKey.TRANSACTION_PREPARED_QUEUE_OFFSET, PropertyKey.TRANSACTION_CHECK_TIMES,
                PropertyKey.REAL_TOPIC, PropertyKey.REAL_QID, TRAN_OP, TRAN_BATCH)


def origin_of(half: MessageExt | StoredPeek) -> int:
    """The transaction a half message copy belongs to (its first copy's half queue offset)."""
    raw = half.properties.get(PropertyKey.TRANSACTION_PREPARED_QUEUE_OFFSET)
    if raw is not None and raw.isdigit():
        return int(raw)
    return half.queue_offset


def check_times_of(half: MessageExt) -> int:
    raw = half.properties.get(PropertyKey.TRANSACTION_CHECK_TIMES, "0")
    return int(raw) if raw.isdigit() else 0


class HalfStore:
    """Builds half and op messages and reads them back from a MessageStore.

    Args:
        store: the broker's store (read only here).
        host: the broker's address; its ``store_host`` is written into re-stored messages.
    """

    def __init__(self, store: MessageStore, host: BrokerHost) -> None:
        self.store = store
        self.host = host

    @property
    def store_host(self) -> tuple[str, int]:
        return self.host.store_host

    # -- building -------------------------------------------------------------------------------
    @staticmethod
    def to_half(msg: MessageInner, producer_group: str) -> MessageInner:
        """The half message of a transactional send (``msg`` is addressed to its real queue)."""
        props = msg.properties
        for name in _BROKER_ONLY:
            props.pop(name, None)
        props.pop(PropertyKey.DELAY, None)  # RocketMQ's producer drops it too: no delayed commits
        props[PropertyKey.REAL_TOPIC] = msg.topic
        props[PropertyKey.REAL_QID] = str(msg.queue_id)
        if not props.get(PropertyKey.PGROUP):
            props[PropertyKey.PGROUP] = producer_group
        msg.topic = TRANS_HALF_TOPIC
        msg.queue_id = HALF_QUEUE_ID
        msg.sys_flag &= ~_TYPE_BITS
        return msg

    def _copy(self, half: MessageExt, topic: str, queue_id: int, props: dict[str, str],
              sys_flag: int) -> MessageInner:
        return MessageInner(
            topic, queue_id, half.body, props, half.flag, sys_flag, half.born_timestamp,
            half.born_host, self.store_host, half.reconsume_times,
        )

    def committed(self, half: MessageExt) -> MessageInner:
        """The message a commit delivers: the half message back in its real topic and queue."""
        props = dict(half.properties)
        topic = props.pop(PropertyKey.REAL_TOPIC)
        queue_id = int(props.pop(PropertyKey.REAL_QID, "0"))
        props.pop(PropertyKey.TRAN_MSG, None)
        props.pop(PropertyKey.TRANSACTION_PREPARED_QUEUE_OFFSET, None)
        msg = self._copy(half, topic, queue_id, props, (half.sys_flag & ~_TYPE_BITS) | _COMMIT)
        msg.prepared_transaction_offset = half.commit_log_offset
        return msg

    def renewed(self, half: MessageExt, check_times: int) -> MessageInner:
        """A fresh copy of a half message at the end of the half queue (one more check counted)."""
        props = dict(half.properties)
        props[PropertyKey.TRANSACTION_CHECK_TIMES] = str(check_times)
        props[PropertyKey.TRANSACTION_PREPARED_QUEUE_OFFSET] = str(origin_of(half))
        return self._copy(half, TRANS_HALF_TOPIC, HALF_QUEUE_ID, props, half.sys_flag)

    def discarded(self, half: MessageExt) -> MessageInner:
        """The copy kept (queryable, never delivered) once the check limit is reached."""
        return self._copy(half, TRANS_CHECK_MAX_TIME_TOPIC, 0, dict(half.properties), half.sys_flag)

    def op_message(self, half: MessageExt, outcome: HalfState) -> MessageInner:
        props = {
            PropertyKey.TAGS: OP_TAG,
            PropertyKey.TRANSACTION_PREPARED_QUEUE_OFFSET: str(origin_of(half)),
            TRAN_OP: outcome.value,
        }
        return MessageInner(
            TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID, str(half.queue_offset).encode(), props,
            born_timestamp=self.store.clock(), born_host=self.store_host, store_host=self.store_host,
        )

    @staticmethod
    def for_producer(half: MessageExt) -> bytes:
        """The half message in stored format as a check request carries it: under its real topic
        and queue, as RocketMQ sends it (the producer's listener sees the message it sent)."""
        props = half.properties
        return encode_stored_message(
            topic=props.get(PropertyKey.REAL_TOPIC, half.topic), body=half.body,
            queue_id=int(props.get(PropertyKey.REAL_QID, "0")), flag=half.flag,
            queue_offset=half.queue_offset, physical_offset=half.commit_log_offset,
            sys_flag=half.sys_flag, born_timestamp=half.born_timestamp, born_host=half.born_host,
            store_timestamp=half.store_timestamp, store_host=half.store_host,
            reconsume_times=half.reconsume_times,
            prepared_transaction_offset=half.prepared_transaction_offset, properties=props,
        )

    # -- reading --------------------------------------------------------------------------------
    def read_at(self, commit_log_offset: int, size: int | None = None) -> MessageExt | None:
        """The message at a commit log offset (None when absent or not a message); ``size``
        when known (a peek's ``total_size``), else read from its header."""
        if commit_log_offset < 0:
            return None
        return self.store.look_message_by_offset(commit_log_offset, size)

    def read_half(self, queue_offset: int) -> MessageExt | None:
        """Half queue entry ``queue_offset``; None when gone (retention) or unreadable."""
        return self._read_entry(TRANS_HALF_TOPIC, queue_offset)

    def peek_half(self, queue_offset: int) -> StoredPeek | None:
        """Half queue entry ``queue_offset`` without its body: enough to know its transaction
        (``origin_of``), and where to read it whole (``read_at``); None when gone or
        unreadable."""
        entry = self.store.queue_entry(TRANS_HALF_TOPIC, HALF_QUEUE_ID, queue_offset)
        if entry is None:
            return None
        return self.store.peek_message_by_offset(entry[0], entry[1])

    def _read_entry(self, topic: str, queue_offset: int) -> MessageExt | None:
        entry = self.store.queue_entry(topic, HALF_QUEUE_ID, queue_offset)
        if entry is None:
            return None
        return self.store.look_message_by_offset(entry[0], entry[1])

    def half_bounds(self) -> tuple[int, int]:
        """(min, max) offsets of the half queue."""
        return (self.store.get_min_offset_in_queue(TRANS_HALF_TOPIC, HALF_QUEUE_ID),
                self.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, HALF_QUEUE_ID))

    def iter_ops(self) -> Iterator[tuple[int, HalfState]]:
        """(origin, outcome) of every op message still stored, oldest first."""
        store = self.store
        first = store.get_min_offset_in_queue(TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID)
        end = store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID)
        for offset in range(first, end):
            op = self._read_entry(TRANS_OP_HALF_TOPIC, offset)
            if op is None:
                continue
            raw = op.properties.get(PropertyKey.TRANSACTION_PREPARED_QUEUE_OFFSET)
            if raw is None or not raw.isdigit():
                raw = op.body.decode("ascii", "replace").strip()  # an op RocketMQ wrote
            if not raw.isdigit():
                continue
            try:
                # An op of RocketMQ's own says only "done": treat it as a commit (never redeliver).
                outcome = HalfState(op.properties.get(TRAN_OP, HalfState.COMMITTED.value))
            except ValueError:
                outcome = HalfState.COMMITTED
            yield int(raw), outcome

    def committed_copy_exists(self, half: MessageExt) -> bool:
        """Whether the real topic already holds this transaction's committed message (found by
        UNIQ_KEY in the index): a crash between the commit's two writes leaves it without an op."""
        uniq = half.uniq_key
        topic = half.properties.get(PropertyKey.REAL_TOPIC)
        if not uniq or not topic:
            return False
        found = self.store.query_message(topic, uniq, 32)
        return any(m.uniq_key == uniq and m.sys_flag & _TYPE_BITS == _COMMIT for m in found)
