"""What a send or a pull returns: status enums and small immutable result records.

Expected outcomes are statuses, not exceptions (as in RocketMQ): a send stored on the master whose
flush timed out is ``SendStatus.FLUSH_DISK_TIMEOUT``, a pull that found nothing new is
``PullStatus.NO_NEW_MSG``. Failures (no route, a refused request) are exceptions from
:mod:`orbitmq.errors`.
"""

from __future__ import annotations

import dataclasses
import enum

from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.message import MessageExt

__all__ = ["SendStatus", "SendResult", "PullStatus", "PullResult", "RawPullResult"]


class SendStatus(enum.Enum):
    """How far a sent message got. Anything but OK still means the master stored it."""

    OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"

    @classmethod
    def from_response_code(cls, code: int) -> SendStatus | None:
        """The status a send response code stands for, or None when the code is a failure."""
        return _SEND_STATUS_BY_CODE.get(code)


_SEND_STATUS_BY_CODE: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclasses.dataclass(frozen=True, slots=True)
class SendResult:
    """The broker's receipt for a send.

    Attributes:
        status: see :class:`SendStatus`.
        msg_id: the producer's unique id (UNIQ_KEY), what consumers see as ``MessageExt.msg_id``;
            for a batch, the ids of its messages joined by commas (as RocketMQ does).
        offset_msg_id: the broker's id (store address + CommitLog offset), for VIEW_MESSAGE_BY_ID.
        queue: the queue the message went to.
        queue_offset: its offset in that queue (the first one for a batch).
        transaction_id: set for transactional sends.
        master_epoch: the epoch of the master that stored it (controller mode, see
            docs/failover.md), None from a broker outside controller mode.
        recall_handle: set for a timer message (a delivery time ahead): what
            :meth:`Producer.recall_message` takes to cancel it before it is delivered.
    """

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    master_epoch: int | None = None
    recall_handle: str | None = None


class PullStatus(enum.Enum):
    """Outcome of a pull (RocketMQ's PullStatus)."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"

    @classmethod
    def from_response_code(cls, code: int) -> PullStatus | None:
        """The status a pull response code stands for, or None when the code is a failure."""
        return _PULL_STATUS_BY_CODE.get(code)


_PULL_STATUS_BY_CODE: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclasses.dataclass(frozen=True, slots=True)
class PullResult:
    """One pull's answer.

    Attributes:
        status: see :class:`PullStatus`.
        next_begin_offset: where the next pull of this queue should start; always use it, also
            after NO_MATCHED_MSG and OFFSET_ILLEGAL, so that a loop over pulls moves on.
        min_offset, max_offset: the queue's bounds when the broker answered (max is one past
            the last message).
        messages: the messages found that match the expression (bodies decompressed).
        suggest_which_broker_id: the broker id the broker suggests for the next pull of this
            queue (0: the master; a slave's id when the consumer reads cold data and the broker
            allows reads from slaves).
    """

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = dataclasses.field(default_factory=list)
    suggest_which_broker_id: int = 0


# The remark of an OrbitMQ (and RocketMQ) broker's NO_MATCHED_MSG answer when retention was
# deleting the messages at the pulled offset: the store's status name.
_REMOVING_REMARK = "MESSAGE_WAS_REMOVING"


@dataclasses.dataclass(slots=True)
class RawPullResult:
    """One pull's answer with the messages left as the broker sent them (``pull_raw``).

    Not frozen, unlike :class:`PullResult`: it is made once per pull on the bulk path, where a
    frozen dataclass's constructor costs ten times as much (2.4 us against 0.26 us here).

    For bulk decoders (Spark's source decodes whole bodies into columns): the body is the
    back-to-back stored messages of the pull response, untouched; decode it with
    :mod:`orbitmq.protocol.stored` (``iter_stored_messages`` for MessageExt objects,
    ``iter_peek`` and ``body_of`` for chosen fields), which checks every message.

    Attributes:
        status, next_begin_offset, min_offset, max_offset: as in :class:`PullResult`.
        body: the stored messages (empty unless FOUND). The broker filters by tag *hash*, so a
            message whose tag merely collides may be in it: keep only tags in ``tags``.
        tags: the tags the pull's expression selects (None: every message, and SQL92, which
            the broker evaluates exactly).
        remark: the broker's reason when it found nothing, as it gave it.
        suggest_which_broker_id: as in :class:`PullResult`.
    """

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    body: bytes = b""
    tags: frozenset[str] | None = None
    remark: str = ""
    suggest_which_broker_id: int = 0

    @property
    def removed(self) -> bool:
        """True when retention was deleting the messages at the pulled offset (NO_MATCHED_MSG
        with the store's MESSAGE_WAS_REMOVING): they are gone, not filtered out."""
        return self.status is PullStatus.NO_MATCHED_MSG and self.remark == _REMOVING_REMARK
