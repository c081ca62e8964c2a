"""TransactionService: the broker's transactional messages (RocketMQ's TransactionalMessageService).

It owns the half/op message layout (half_store.py) and the state of every transaction
(state.py), saves through the broker's durable-save seam. The END_TRANSACTION handler
(end_transaction_processor.py), the OrbitMQ-only LIST_PENDING_TRANSACTIONS admin request
(pending_processor.py) and the check service (check_service.py) work over it; the controller
builds them with it.

Nothing lives only in memory: at start the outcomes are read back from the op queue, the check
progress from the consumer offset of the system group ``CID_SYS_RMQ_TRANS`` on the half queue, and
the check counts from the half messages themselves (TRANSACTION_CHECK_TIMES). Reading the op queue
costs one small read per op message still stored (retention bounds it). After a crash the saved
progress may be up to one offset-persist interval old: the copies passed since are passed again,
which at worst sends a pending transaction one extra check; outcomes come from the op queue, so
nothing is delivered twice.
"""

from __future__ import annotations

import logging

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.tables.topic_config_manager import (
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from orbitmq.broker.transaction.batch import (
    batch_size,
    committed_batch,
    delivered_part,
    is_batch,
)
from orbitmq.broker.transaction.half_store import (
    HALF_QUEUE_ID,
    HalfStore,
    origin_of,
)
from orbitmq.broker.transaction.state import HalfState, ResolutionTable
from orbitmq.errors import BrokerError, RemoteProtocolError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.message import MessageExt
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.status import PutMessageResult, PutMessageStatus

__all__ = ["TransactionService", "CHECK_GROUP", "PENDING_SCAN_MAX"]

log = logging.getLogger(__name__)

CHECK_GROUP = "CID_SYS_RMQ_TRANS"  # RocketMQ's system group for the half and op queues
PENDING_SCAN_MAX = 200_000  # half queue entries one floor refresh or listing reads at most


class TransactionService:
    """Transactional messages of one broker (loop-owned).

    Attributes:
        half: the half/op message layout over the store.
        table: the outcome of every transaction still above the floor.
        progress: the first half queue offset the check service has not passed yet.
    """

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.config = ctx.config
        self.store = ctx.store
        self.half = HalfStore(ctx.store, ctx.host)
        self.table = ResolutionTable(ctx.store.clock)
        self.progress = 0
        self.boot_ms = 0

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Rebuild the state from the op and half queues (before the check service starts)."""
        self.boot_ms = self.store.clock()
        for topic in (TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC):
            self.ctx.topics.create_system_topic(topic, 1)
        self.rebuild()

    def stop(self) -> None:
        """Save the check progress (after the check service stopped)."""
        self.save_progress()

    def rebuild(self) -> None:
        self.table.clear()
        ops = 0
        for origin, outcome in self.half.iter_ops():
            self.table.load(origin, outcome)
            ops += 1
        low, high = self.half.half_bounds()
        saved = self.ctx.offsets.query(CHECK_GROUP, TRANS_HALF_TOPIC, HALF_QUEUE_ID)
        self.progress = min(max(saved, low), high)
        floor = self._pending_floor(high)
        if floor is not None:
            self.table.raise_floor(floor)
        log.info("transactions rebuilt ops=%d half_queue=[%d,%d) progress=%d kept=%d",
                 ops, low, high, self.progress, len(self.table))

    def save_progress(self) -> None:
        self.ctx.offsets.commit(CHECK_GROUP, TRANS_HALF_TOPIC, HALF_QUEUE_ID, self.progress)

    # -- sends ----------------------------------------------------------------------------------
    def to_half(self, msg: MessageInner, producer_group: str) -> MessageInner:
        """The send processor's hook for a transactional send.

        Raises:
            BrokerError: NO_PERMISSION when ``reject_transaction_message`` is set.
        """
        if self.config.reject_transaction_message:
            raise BrokerError(ResponseCode.NO_PERMISSION,
                              f"the broker[{self.config.broker_name}] sending transaction message "
                              "is forbidden (reject_transaction_message)")
        return self.half.to_half(msg, producer_group)

    def put(self, msg: MessageInner) -> PutMessageResult:
        """Append one message through the durable-save seam (the caller waits if it must)."""
        return self.ctx.saver.append([msg])

    # -- outcomes -------------------------------------------------------------------------------
    def state_of(self, half: MessageExt) -> HalfState:
        """The transaction's state; a pending one stored before this run whose committed message
        is already in its real topic (the broker died between the two writes of a commit) is
        marked committed here instead of being delivered again."""
        origin = origin_of(half)
        state = self.table.state_of(origin)
        if state is HalfState.PENDING and half.store_timestamp < self.boot_ms and is_batch(half):
            return self._recover_batch(half)
        if (state is HalfState.PENDING and half.store_timestamp < self.boot_ms
                and self.half.committed_copy_exists(half)):
            log.warning("transaction found committed without its op message origin=%d msg=%s",
                        origin, half.uniq_key)
            self._resolve(half, HalfState.COMMITTED)
            return HalfState.COMMITTED
        return state

    def settle(self, half: MessageExt, outcome: HalfState) -> PutMessageResult | None:
        """Carry out ``outcome`` for a pending transaction: store the committed (or discarded)
        message, then record the outcome (memory and op message).

        Returns the put result of the committed or discarded copy (None for a rollback), appended
        through the durable-save seam (a caller that answers a client waits on it there). When
        it failed, the transaction stays pending and a later check retries.
        """
        result = None
        if outcome is HalfState.COMMITTED:
            result = self._commit(half)
        elif outcome is HalfState.DISCARDED:
            self.ctx.topics.create_system_topic(TRANS_CHECK_MAX_TIME_TOPIC, 1)
            result = self.put(self.half.discarded(half))
        if result is not None and result.status is not PutMessageStatus.PUT_OK:
            log.error("transaction %s not carried out: store said %s origin=%d", outcome.value,
                      result.status.value, origin_of(half))
            return result
        self._resolve(half, outcome)
        return result

    def _commit(self, half: MessageExt, delivered: frozenset[str] = frozenset()) -> PutMessageResult:
        """Append what committing ``half`` delivers: its message, or every message of a batch
        (but the ``delivered`` ones) in one append (batch.py)."""
        if not is_batch(half):
            return self.put(self.half.committed(half))
        try:
            batch = committed_batch(half, self.half.store_host, self.store, delivered)
        except RemoteProtocolError as e:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"stored batch: {e}")
        return self.ctx.saver.append(batch)

    def _recover_batch(self, half: MessageExt) -> HalfState:
        """``state_of`` for a pending batch stored before this run: a commit the broker's crash
        cut short delivered a prefix of it (batch.py); finished here, never asked again."""
        try:
            delivered = delivered_part(self.store, half)
        except RemoteProtocolError:
            return HalfState.PENDING
        if not delivered:
            return HalfState.PENDING
        log.warning("transaction batch found committed without its op message origin=%d msg=%s "
                    "delivered=%d of %d", origin_of(half), half.uniq_key, len(delivered),
                    batch_size(half))
        if len(delivered) < batch_size(half):
            result = self._commit(half, delivered)
            if result.status is not PutMessageStatus.PUT_OK:
                return HalfState.PENDING  # asked again later
        self._resolve(half, HalfState.COMMITTED)
        return HalfState.COMMITTED

    def _resolve(self, half: MessageExt, outcome: HalfState) -> None:
        resolved = self.table.resolve(origin_of(half), outcome)
        assert resolved, "only a pending transaction is resolved"
        op = self.put(self.half.op_message(half, outcome))
        if op.status is not PutMessageStatus.PUT_OK:
            # The outcome holds in memory; after a restart the check asks the producer again and
            # a commit is recognised by state_of (the committed message is in the index).
            log.error("op message not stored origin=%d status=%s", origin_of(half), op.status.value)

    # -- scans ----------------------------------------------------------------------------------
    def pending_copies(self, end: int, scan_max: int = PENDING_SCAN_MAX) -> tuple[dict[int, MessageExt], bool]:
        """Latest copy of every pending transaction in [progress, end), by origin; and whether
        the scan stopped at ``scan_max`` entries (the answer is then partial)."""
        latest: dict[int, MessageExt] = {}
        stop = min(end, self.progress + scan_max)
        for offset in range(self.progress, stop):
            half = self.half.read_half(offset)
            if half is None:
                continue
            origin = origin_of(half)
            if self.table.state_of(origin) is HalfState.PENDING:
                latest[origin] = half
        return latest, stop < end

    def _pending_floor(self, end: int) -> int | None:
        """The smallest pending origin (``end`` when none); None when the scan was cut short."""
        latest, partial = self.pending_copies(end)
        if partial:
            return None
        return min(latest, default=end)

    async def refresh_floor(self) -> None:
        """Forget outcomes no late request can need any more (after a check round).

        Only once the store has dispatched every copy the round re-stored: a copy missing from
        the half queue would make its (old) origin look settled.
        """
        if not await self.ctx.dispatched.wait():
            return
        floor = self._pending_floor(self.half.half_bounds()[1])
        if floor is not None:
            self.table.raise_floor(floor)

    # -- admin ----------------------------------------------------------------------------------
