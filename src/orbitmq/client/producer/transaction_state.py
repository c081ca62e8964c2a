"""The producer side of a transaction: verdicts, the listener contract, the result, and the phases
one ``send_in_transaction`` goes through (an Enum with its valid transitions).

Pure code: no I/O, so the rules are unit-testable without a broker.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Awaitable

from orbitmq.client.results import SendResult, SendStatus
from orbitmq.errors import ClientError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.message import Message, MessageExt, MessageSysFlag, PropertyKey

__all__ = [
    "LocalTransactionState",
    "TransactionListener",
    "TransactionSendResult",
    "TransactionBatch",
    "TransactionPhase",
    "PHASE_TRANSITIONS",
    "TransactionTracker",
    "coerce_state",
    "transaction_id",
]

log = logging.getLogger(__name__)


class LocalTransactionState(enum.Enum):
    """A listener's verdict on its local transaction (RocketMQ's names as values)."""

    COMMIT = "COMMIT_MESSAGE"
    ROLLBACK = "ROLLBACK_MESSAGE"
    UNKNOWN = "UNKNOW"  # sic: RocketMQ's spelling

    @property
    def commit_or_rollback(self) -> int:
        """The END_TRANSACTION ``commitOrRollback`` value: 8, 12 or 0."""
        return _WIRE[self]


_WIRE = {
    LocalTransactionState.COMMIT: int(MessageSysFlag.TRANSACTION_COMMIT_TYPE),
    LocalTransactionState.ROLLBACK: int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE),
    LocalTransactionState.UNKNOWN: int(MessageSysFlag.TRANSACTION_NOT_TYPE),
}

ListenerResult = LocalTransactionState | None | Awaitable[LocalTransactionState | None]


class TransactionListener:
    """What a transactional producer calls. Subclass it and override both methods.

    Return :class:`LocalTransactionState`; ``None`` or an exception counts as UNKNOWN (the broker
    then checks back later). With :class:`~orbitmq.client.AsyncTransactionProducer`
    either method may be a coroutine function.
    """

    def execute_local_transaction(self, msg: Message, arg: object) -> ListenerResult:
        """Run the local transaction of ``msg`` (its half message is stored). ``arg`` is what was
        passed to ``send_in_transaction``; ``transaction_id(msg)`` names the transaction."""
        raise NotImplementedError

    def check_local_transaction(self, msg: MessageExt) -> ListenerResult:
        """Say how the local transaction of ``msg`` ended, from durable state: the process that
        ran it may have crashed. ``msg.msg_id`` is the transaction id."""
        raise NotImplementedError

    def execute_local_transaction_batch(self, batch: TransactionBatch, arg: object) -> ListenerResult:
        """The local transaction of a batch sent with ``send_batch_in_transaction`` (its half
        message is stored); ``batch.transaction_id`` names it. Not overridden: UNKNOWN (the
        broker checks the batch back later)."""
        raise NotImplementedError

    def check_local_transaction_batch(self, batch: TransactionBatch) -> ListenerResult:
        """Say how the local transaction of a pending batch ended (the broker asks about the
        batch as a unit), from durable state. Not overridden: UNKNOWN."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class TransactionBatch:
    """A transaction batch as a listener sees it: messages of one topic committed or rolled back
    together (OrbitMQ; docs/transactions.md).

    Attributes:
        transaction_id: the batch's id (what a check and a receipt name).
        topic: where a commit delivers the messages.
        messages: the messages, each with its own UNIQ_KEY (its ``msg_id`` once delivered) among
            its properties.
        properties: the batch's own properties, as given to the send.
        check_times: how many times the broker has asked about it (0 before any check).
    """

    transaction_id: str
    topic: str
    messages: tuple[Message, ...]
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    check_times: int = 0

    @property
    def msg_ids(self) -> list[str]:
        """The UNIQ_KEY of each message, in order."""
        return [m.properties.get(PropertyKey.UNIQ_KEY, "") for m in self.messages]


def coerce_state(result: object) -> LocalTransactionState:
    """A listener's return value as a verdict (anything but a LocalTransactionState: UNKNOWN)."""
    if isinstance(result, LocalTransactionState):
        return result
    if result is not None:
        log.warning("transaction listener returned %r, not a LocalTransactionState: UNKNOWN", result)
    return LocalTransactionState.UNKNOWN


def transaction_id(msg: Message | MessageExt) -> str | None:
    """The transaction id (the UNIQ_KEY) of the message a listener is given."""
    if isinstance(msg, MessageExt):
        return msg.uniq_key
    return msg.properties.get(PropertyKey.UNIQ_KEY)


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionSendResult:
    """What ``send_in_transaction`` returns: the half message's receipt and the local verdict.

    Attributes:
        local_state: the verdict sent in END_TRANSACTION (ROLLBACK when the half message was
            stored without being durable, without running the local transaction).
        transaction_id: the id the broker and the listener know the transaction by (UNIQ_KEY).
        msg_id: the message's UNIQ_KEY (what consumers see as ``msg_id``).
        offset_msg_id: the half message's broker id (store address + commit log offset).
        queue: the real queue the message is delivered to on commit.
        queue_offset: the half message's offset in the broker's half queue.
        status: how far the half message got (SendStatus.OK: stored).
        batch_size: for a transaction batch, how many messages it holds (0: a single message).
    """

    local_state: LocalTransactionState
    transaction_id: str
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    status: SendStatus
    batch_size: int = 0


class TransactionPhase(enum.Enum):
    """Where one ``send_in_transaction`` is."""

    NEW = "NEW"
    HALF_STORED = "HALF_STORED"  # the broker stored the half message: the local transaction may run
    HALF_FAILED = "HALF_FAILED"  # it did not: the local transaction must not run
    LOCAL_DONE = "LOCAL_DONE"  # a verdict exists (the listener's, or ROLLBACK when it was skipped)
    ENDED = "ENDED"  # END_TRANSACTION handed over (or given up on: the broker will check)


PHASE_TRANSITIONS: dict[TransactionPhase, frozenset[TransactionPhase]] = {
    TransactionPhase.NEW: frozenset({TransactionPhase.HALF_STORED, TransactionPhase.HALF_FAILED}),
    TransactionPhase.HALF_STORED: frozenset({TransactionPhase.LOCAL_DONE}),
    TransactionPhase.HALF_FAILED: frozenset(),
    TransactionPhase.LOCAL_DONE: frozenset({TransactionPhase.ENDED}),
    TransactionPhase.ENDED: frozenset(),
}


@dataclasses.dataclass
class TransactionTracker:
    """One transaction on its way through the phases; refuses any step out of order."""

    phase: TransactionPhase = TransactionPhase.NEW
    send_result: SendResult | None = None
    message: Message | None = None  # as the listener sees it (UNIQ_KEY, TRAN_MSG, PGROUP set)
    local_state: LocalTransactionState | None = None
    error: BaseException | None = None

    def advance(self, new: TransactionPhase) -> None:
        if new not in PHASE_TRANSITIONS[self.phase]:
            raise ClientError(f"transaction cannot go from {self.phase.value} to {new.value}")
        self.phase = new

    def half_stored(self, sent: SendResult, message: Message) -> None:
        self.advance(TransactionPhase.HALF_STORED)
        self.send_result, self.message = sent, message

    @property
    def runs_local(self) -> bool:
        """Whether the local transaction may run: the half message is stored and durable (a
        FLUSH_*_TIMEOUT or SLAVE_NOT_AVAILABLE receipt rolls back without running it, as RocketMQ)."""
        sent = self.send_result
        return (self.phase is TransactionPhase.HALF_STORED and sent is not None
                and sent.status is SendStatus.OK)

    def local_done(self, state: LocalTransactionState, error: BaseException | None) -> None:
        self.advance(TransactionPhase.LOCAL_DONE)
        self.local_state, self.error = state, error

    def result(self) -> TransactionSendResult:
        sent = self.send_result
        if self.phase is not TransactionPhase.ENDED or sent is None or self.local_state is None:
            raise ClientError(f"transaction result asked for in phase {self.phase.value}")
        return TransactionSendResult(
            local_state=self.local_state,
            transaction_id=sent.transaction_id or sent.msg_id,
            msg_id=sent.msg_id,
            offset_msg_id=sent.offset_msg_id,
            queue=sent.queue,
            queue_offset=sent.queue_offset,
            status=sent.status,
        )
