"""Headers of OrbitMQ's own request codes (``codes.OrbitMQRequestCode``): transactions by the batch.

Built with the one header mechanism of :mod:`orbitmq.protocol.headers` (wire names in camelCase,
every integer with its range in its type, a field without default required); a value out of range
is refused where it is parsed with a RemoteProtocolError naming the field, which the server answers
INVALID_PARAMETER (``codes.bad_request_code``: these codes are not of the send family). Kept apart
from ``headers.py``, which holds RocketMQ's headers only.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

from orbitmq.protocol._lenient import I32, I32_MAX, I64, U32, U64, int_range
from orbitmq.protocol.headers import Header, TransactionVerdict

__all__ = [
    "TRAN_BATCH",
    "TX_BATCH_MESSAGES_MAX",
    "SendTransactionBatchRequestHeader",
    "SendTransactionBatchResponseHeader",
    "EndTransactionBatchRequestHeader",
    "EndTransactionBatchResponseHeader",
    "CheckTransactionBatchStateRequestHeader",
]

# The property a batch's half message carries: the number of messages its body holds. Only the
# broker sets it (a producer's own value is dropped), so no single transaction passes for a batch.
TRAN_BATCH = "TRAN_BATCH"
# The most messages one transaction batch holds (its body is bounded by max_message_size too).
TX_BATCH_MESSAGES_MAX = 65_536
BatchCount = Annotated[int, int_range(1, TX_BATCH_MESSAGES_MAX,
                                      f"1..{TX_BATCH_MESSAGES_MAX} messages")]


@dataclasses.dataclass(slots=True)
class SendTransactionBatchRequestHeader(Header):
    """SEND_TRANSACTION_BATCH (9101): a batch body stored as one half message.

    ``queue_id`` negative: the broker picks the queue. ``count``: the messages the body holds
    (checked against it). ``properties``: the batch's own (UNIQ_KEY = its transaction id,
    CHECK_IMMUNITY_TIME_IN_SECONDS, the application's), in the wire text form.
    ``default_topic_queue_nums``: the producer's queues for a topic the broker creates (a send's
    ``defaultTopicQueueNums``; absent: the broker's ``default_topic_queue_nums``).
    """

    producer_group: str
    topic: str
    queue_id: I32
    born_timestamp: U64
    count: BatchCount
    properties: str | None = None
    default_topic_queue_nums: U32 | None = None


@dataclasses.dataclass(slots=True)
class SendTransactionBatchResponseHeader(Header):
    """Answer to SEND_TRANSACTION_BATCH: where the half message lies and where a commit goes."""

    msg_id: str  # the half message's offset message id
    queue_id: I32  # the real queue a commit delivers to
    queue_offset: I64  # the half message's offset in the half queue
    transaction_id: str


@dataclasses.dataclass(slots=True)
class EndTransactionBatchRequestHeader(Header):
    """END_TRANSACTION_BATCH (9102): commit (8), roll back (12) or leave pending (0) a batch.

    ``transaction_id`` must be the batch's (its half message's UNIQ_KEY): a request naming
    another position is refused, so a stale receipt never ends somebody else's batch.
    """

    producer_group: str
    tran_state_table_offset: U64
    commit_log_offset: U64
    commit_or_rollback: TransactionVerdict
    transaction_id: str
    from_transaction_check: bool = False


@dataclasses.dataclass(slots=True)
class EndTransactionBatchResponseHeader(Header):
    """Answer to a commit: where the batch's messages went (absent for other verdicts)."""

    queue_id: I32 | None = None
    queue_offset: I64 | None = None
    count: U32 | None = None


@dataclasses.dataclass(slots=True)
class CheckTransactionBatchStateRequestHeader(Header):
    """CHECK_TRANSACTION_BATCH_STATE (9103), broker -> producer; the body is the half message."""

    tran_state_table_offset: U64
    commit_log_offset: U64
    transaction_id: str
    offset_msg_id: str | None = None
    check_times: Annotated[int, int_range(0, I32_MAX, "a non-negative int32")] = 0
