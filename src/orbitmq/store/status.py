"""Outcomes of store calls: RocketMQ's status enums and the result objects that carry them.

Expected outcomes (a full disk, an offset past the end) are statuses, never exceptions.
"""

from __future__ import annotations

import dataclasses
import enum
import functools

__all__ = [
    "PutMessageStatus",
    "GetMessageStatus",
    "AppendMessageResult",
    "PutMessageResult",
    "GetMessageResult",
    "QueryMessageResult",
    "ReplicaAppendStatus",
    "ReplicaAppendResult",
    "ReplicaTail",
]


class PutMessageStatus(enum.Enum):
    """Outcome of a put, as RocketMQ's PutMessageStatus."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class GetMessageStatus(enum.Enum):
    """Outcome of a read from a queue, as RocketMQ's GetMessageStatus."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@functools.lru_cache(maxsize=64)
def _hex_prefix(id_prefix: bytes) -> str:
    """The first half of an offset message id (store host and port), as upper-case hex."""
    return id_prefix.hex().upper()


class AppendMessageResult:
    """Where an append landed: one message or a whole batch written in one piece.

    ``msg_ids`` (offset message ids, one per message) and ``offsets`` are built on first access
    from the batch's relative positions: the append path does not pay for lists nobody reads.
    """

    __slots__ = (
        "wrote_offset",
        "wrote_bytes",
        "store_timestamp",
        "queue_offset",
        "msg_num",
        "_rel_positions",
        "_id_prefix",
        "_msg_ids",
    )

    def __init__(
        self,
        wrote_offset: int,
        wrote_bytes: int,
        store_timestamp: int,
        queue_offset: int,
        msg_num: int,
        rel_positions: list[int],
        id_prefix: bytes,
    ) -> None:
        self.wrote_offset = wrote_offset
        self.wrote_bytes = wrote_bytes
        self.store_timestamp = store_timestamp
        self.queue_offset = queue_offset
        self.msg_num = msg_num
        self._rel_positions = rel_positions  # of each message from wrote_offset; never mutated
        self._id_prefix = id_prefix  # store ip + port: the first half of every offset message id
        self._msg_ids: list[str] | None = None

    @property
    def msg_ids(self) -> list[str]:
        """Offset message ids of the appended messages, in order."""
        if self._msg_ids is None:
            # hex(ip + port) then the offset as 16 hex digits: RocketMQ's offset message id
            prefix, base = _hex_prefix(self._id_prefix), self.wrote_offset
            self._msg_ids = [f"{prefix}{base + rel:016X}" for rel in self._rel_positions]
        return self._msg_ids

    @property
    def end_offset(self) -> int:
        """The commit log offset just past the appended bytes: what a durability wait names."""
        return self.wrote_offset + self.wrote_bytes

    @property
    def offsets(self) -> list[int]:
        """Commit log offset of each appended message."""
        base = self.wrote_offset
        return [base + rel for rel in self._rel_positions]

    def __repr__(self) -> str:
        return (
            f"AppendMessageResult(wrote_offset={self.wrote_offset}, wrote_bytes={self.wrote_bytes}, "
            f"queue_offset={self.queue_offset}, msg_num={self.msg_num})"
        )


@dataclasses.dataclass(slots=True)
class PutMessageResult:
    """Answer of ``MessageStore.put``: the append's outcome (never its durability, which
    ``MessageStore.durable_up_to`` tells; the broker's durable-save seam may then change a PUT_OK
    into FLUSH_DISK_TIMEOUT and the like).

    ``append`` is set when the bytes are in the commit log. ``remark`` says why a put was refused
    when the status alone does not (which disk condition made the store refuse it:
    SERVICE_NOT_AVAILABLE), for the client's answer.
    """

    status: PutMessageStatus
    append: AppendMessageResult | None = None
    remark: str | None = None

    @property
    def ok(self) -> bool:
        """True for PUT_OK."""
        return self.status is PutMessageStatus.PUT_OK


@dataclasses.dataclass(slots=True)
class GetMessageResult:
    """Answer of ``MessageStore.get_message``: raw stored messages, ready for the wire."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[memoryview | bytes] = dataclasses.field(default_factory=list)
    message_count: int = 0
    total_size: int = 0
    last_commit_offset: int = -1  # commit log offset of the last message read (-1: none)
    held_back_end: int = -1  # where the first entry a max_physical_end held back ends (-1: none)
    corrupt_at: int = -1  # commit log offset of a message a checked read refused (-1: none)
    corrupt_problem: str = ""  # why it was refused


@dataclasses.dataclass(slots=True)
class QueryMessageResult:
    """Answer of ``MessageStore.query_message_raw`` (the QUERY_MESSAGE response's parts)."""

    buffers: list[memoryview | bytes]
    index_last_update_timestamp: int
    index_last_update_phy_offset: int


class ReplicaAppendStatus(enum.Enum):
    """Outcome of a slave's append of its master's bytes (store/replica_append.py)."""

    APPENDED = "APPENDED"
    OFFSET_MISMATCH = "OFFSET_MISMATCH"  # the frame does not continue this log
    GARBLED = "GARBLED"  # the frame is not entries this log can hold
    SEGMENT_FAILED = "SEGMENT_FAILED"  # a new segment could not be created (disk)
    NOT_ACCEPTED = "NOT_ACCEPTED"  # the store is stopped, or not a replica


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaAppendResult:
    """``end_offset``: where the log ends after the call (unchanged unless APPENDED)."""

    status: ReplicaAppendStatus
    end_offset: int
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is ReplicaAppendStatus.APPENDED


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaTail:
    """The last message of a log and what follows it: ``offset`` is where it starts, ``entries``
    the bytes of each entry from there to the end as a master sends them (the message, then a
    blank entry's 8-byte header when the message closed its segment), ``end`` where the log ends."""

    offset: int
    entries: tuple[bytes, ...]
    end: int
