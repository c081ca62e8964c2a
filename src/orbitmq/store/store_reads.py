"""The read half of the store facade: queues (RocketMQ's getMessage and the offset lookups),
the commit log by offset, and the key index. ``MessageStore`` (message_store.py) inherits it;
every method reads and none starts, stops or writes anything."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from orbitmq.config import StoreConfig
from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol import stored
from orbitmq.protocol.message import MessageExt
from orbitmq.protocol.stored import BLANK_ENTRY_SIZE, decode_stored_message
from orbitmq.store.commit_log import CommitLog
from orbitmq.store.consume_queue import ConsumeQueue
from orbitmq.store.corruption import CorruptionWatch
from orbitmq.store.index_service import IndexService
from orbitmq.store.message_filter import MessageFilter
from orbitmq.store.queue_reader import read_queue
from orbitmq.store.status import GetMessageResult, QueryMessageResult

__all__ = ["StoreReads"]

QUERY_CANDIDATES_MAX = 4096  # index entries a key query looks at, colliding keys included
CHECKED_READS_MAX = 4  # reads of one get_message on a slave that met corruption and cut its log

_Parsed = TypeVar("_Parsed")


def _decode_unchecked(raw: memoryview) -> MessageExt:
    return decode_stored_message(raw, check_crc=False)


class StoreReads:
    """Reads of the store's queues, commit log and index (mixed into MessageStore, which sets
    these attributes)."""

    config: StoreConfig
    commit_log: CommitLog
    consume_queue_table: dict[tuple[str, int], ConsumeQueue]
    index: IndexService | None
    corruption: CorruptionWatch
    _replica: bool
    check_reads: bool
    # (offset, problem, found_by) -> whether the log was cut there: ReplicaCopy's
    corrupt_message_found: Callable[[int, str, str], bool]

    def _queue(self, key: tuple[str, int], *, create: bool = False) -> ConsumeQueue | None:
        """A queue, loaded on first use (MessageStore's)."""
        raise NotImplementedError

    # -- reading queues -------------------------------------------------------------------------

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
        bulk: bool = False,
        max_physical_end: int | None = None,
        runs: bool = False,
        max_bytes: int | None = None,
    ) -> GetMessageResult:
        """Up to ``max_msg_nums`` stored messages of a queue from ``offset`` (raw, for the wire),
        bounded by ``max_transfer_count_on_message_in_memory`` and ``..._bytes_...`` (by
        ``bulk_pull_count_max`` and ``bulk_pull_bytes_max`` for a ``bulk`` read) and by the
        reader's own ``max_bytes`` (a pull's maxMsgBytes; the first message always comes), and
        with ``max_physical_end`` to messages that end at or before that commit log offset; with
        ``runs``, back-to-back messages in one buffer (queue_reader.read_queue).

        A slave checks every message before serving it (a master too with
        ``check_crc_on_read``): a corrupt one is never served (see corruption.py); a slave cuts
        its log there and reads again, so the answer is as if its queue ended before it."""
        check = self._replica or self.check_reads
        for _ in range(CHECKED_READS_MAX):
            result = read_queue(self._queue((topic, queue_id)), self.commit_log,
                                offset, max_msg_nums, message_filter, self.config, bulk,
                                max_physical_end, runs, check, max_bytes)
            if result.corrupt_at < 0 or not self.corrupt_message_found(
                    result.corrupt_at, result.corrupt_problem, "read"):
                return result
        return result

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._queue((topic, queue_id))
        return cq.max_offset if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._queue((topic, queue_id))
        return cq.min_offset if cq is not None else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset stored at or after ``timestamp_ms`` (max offset if none)."""
        cq = self._queue((topic, queue_id))
        if cq is None:
            return 0
        return cq.offset_by_time(timestamp_ms, self.commit_log.store_timestamp_at)

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of one queue entry's message; -1 when absent."""
        cq = self._queue((topic, queue_id))
        found = cq.entry(offset) if cq is not None and offset >= cq.min_offset else None
        return -1 if found is None else self.commit_log.store_timestamp_at(found[0])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of the oldest message still in the queue; -1 when none."""
        return self.get_message_store_timestamp(
            topic, queue_id, self.get_min_offset_in_queue(topic, queue_id)
        )

    def queue_entry(self, topic: str, queue_id: int, offset: int) -> tuple[int, int, int] | None:
        """(commit log offset, size, tags code) of a queue entry, for the broker's own scans."""
        cq = self._queue((topic, queue_id))
        return cq.entry(offset) if cq is not None else None

    # -- reading the commit log -----------------------------------------------------------------

    def get_message_raw(self, commit_offset: int, size: int | None = None) -> memoryview | None:
        """The stored bytes of the message at ``commit_offset`` (size read from it when omitted)."""
        if size is None:
            head = self.commit_log.read(commit_offset, BLANK_ENTRY_SIZE)
            if head is None:
                return None
            size = stored.total_size(head)
            if size <= 0:
                return None
        return self.commit_log.read(commit_offset, size)

    def look_message_by_offset(self, commit_offset: int, size: int | None = None) -> MessageExt | None:
        """Decode the message at a commit log offset; None when absent or not a message, or
        (on a slave, or a master with ``check_crc_on_read``) corrupt: never served (see
        get_message)."""
        check = self._replica or self.check_reads
        return self._parse_at(commit_offset, size, _decode_unchecked, check)

    def peek_message_by_offset(self, commit_offset: int,
                               size: int | None = None) -> stored.StoredPeek | None:
        """Every field of the message at a commit log offset but its body (its bytes neither
        copied nor touched); None when absent or not a message."""
        return self._parse_at(commit_offset, size, stored.peek)

    def _parse_at(self, commit_offset: int, size: int | None,
                  parse: Callable[[memoryview], _Parsed], check: bool = False) -> _Parsed | None:
        raw = self.get_message_raw(commit_offset, size)
        if raw is None:
            return None
        if check:
            bad = stored.verify(raw, physical_offset=commit_offset)
            if bad is not None:
                self.corrupt_message_found(commit_offset, bad, "read")
                return None
        try:
            return parse(raw)
        except RemoteProtocolError:
            return None

    def max_physical_offset(self) -> int:
        return self.commit_log.max_offset

    def min_physical_offset(self) -> int:
        return self.commit_log.min_offset

    def flushed_physical_offset(self) -> int:
        return self.commit_log.flushed_offset

    # -- keys -----------------------------------------------------------------------------------

    def query_message_raw(
        self, topic: str, key: str, max_num: int, begin_ms: int = 0, end_ms: int = 2**62
    ) -> QueryMessageResult:
        """Stored messages of ``topic`` whose KEYS or UNIQ_KEY is ``key`` (newest first), at most
        ``max_num``. The index answers by hash, so other keys' entries may come first: candidates
        are asked for again, twice as many each time (up to QUERY_CANDIDATES_MAX), until
        ``max_num`` of them really carry ``key`` or the index has no more."""
        if self.index is None:
            return QueryMessageResult([], 0, 0)
        wanted = max_num
        while True:
            found = self.index.query_offsets(topic, key, wanted, begin_ms, end_ms)
            buffers: list[memoryview | bytes] = []
            for phy in found.phy_offsets:
                msg = self.look_message_by_offset(phy)
                if msg is None or msg.topic != topic or (key not in msg.keys and msg.uniq_key != key):
                    continue  # hash collision or data gone
                raw = self.get_message_raw(phy, msg.store_size)
                if raw is not None and len(buffers) < max_num:
                    buffers.append(raw)
            if (len(buffers) >= max_num or len(found.phy_offsets) < wanted
                    or wanted >= QUERY_CANDIDATES_MAX):
                return QueryMessageResult(
                    buffers, found.index_last_update_timestamp, found.index_last_update_phy_offset
                )
            wanted = min(wanted * 2, QUERY_CANDIDATES_MAX)

    def query_message(
        self, topic: str, key: str, max_num: int, begin_ms: int = 0, end_ms: int = 2**62
    ) -> list[MessageExt]:
        """Decoded form of ``query_message_raw``."""
        result = self.query_message_raw(topic, key, max_num, begin_ms, end_ms)
        return [decode_stored_message(raw, check_crc=False) for raw in result.buffers]
