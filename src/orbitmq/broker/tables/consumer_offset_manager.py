"""Committed consumer offsets of clustering consumer groups (their requests: processor/offset_processor.py).

The table is keyed like RocketMQ's, ``topic@group`` -> queue id -> next offset to consume, and
persisted as ``STORE/config/consumerOffset.json`` (``{"offsetTable": {"topic@group": {"0": 12}}}``;
Java writes the queue ids as bare numbers, which we also read). It is written atomically every
``flush_consumer_offset_interval_ms`` when something changed, and at stop; a failed write is
logged and tried again at the next round (config_file.TableFile).

Only what can be written is accepted: the header's ranges (a queue id within int32, an offset
within int64) and, checked here, a topic and a group that are legal names (a ``@`` or a ``/``
in either would make the table's keys ambiguous).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import orjson

from orbitmq.broker.config_file import TableFile, config_path, read_json
from orbitmq.errors import StoreError
from orbitmq.protocol._lenient import I32_MAX, I64_MAX

if TYPE_CHECKING:
    from orbitmq.store.message_store import MessageStore

__all__ = ["ConsumerOffsetManager", "TOPIC_GROUP_SEPARATOR", "parse_offset_table"]

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    """``topic@group`` -> {queue id: offset}, persisted."""

    def __init__(self, store_path: str, store: MessageStore) -> None:
        self.path = config_path(store_path, "consumerOffset.json")
        self.store = store
        self.table: dict[str, dict[int, int]] = {}
        self._lock = threading.Lock()  # the persist thread snapshots while the loop commits
        self.file = TableFile(self.path, self.encode, "consumer offsets")

    # -- table ----------------------------------------------------------------------------------
    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset``; ValueError for a queue id or offset the table cannot hold (callers
        pass header values, already range-checked: this guards the file, not the wire)."""
        if not (0 <= queue_id <= I32_MAX and 0 <= offset <= I64_MAX):
            raise ValueError(f"offset {offset} of queue {queue_id} cannot be stored")
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        with self._lock:
            queues = self.table.get(key)
            if queues is None:
                queues = self.table[key] = {}
            if queues.get(queue_id) != offset:
                queues[queue_id] = offset
                self.file.mark_dirty()

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one for this queue."""
        queues = self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}")
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def topics_of_group(self, group: str) -> list[str]:
        suffix = f"{TOPIC_GROUP_SEPARATOR}{group}"
        return sorted(k[: -len(suffix)] for k in list(self.table) if k.endswith(suffix))

    def groups_of_topic(self, topic: str) -> list[str]:
        prefix = f"{topic}{TOPIC_GROUP_SEPARATOR}"
        return sorted(k[len(prefix):] for k in list(self.table) if k.startswith(prefix))

    def remove_topic(self, topic: str) -> None:
        prefix = f"{topic}{TOPIC_GROUP_SEPARATOR}"
        with self._lock:
            for key in [k for k in self.table if k.startswith(prefix)]:
                del self.table[key]
                self.file.mark_dirty()

    def remove_group(self, group: str) -> None:
        suffix = f"{TOPIC_GROUP_SEPARATOR}{group}"
        with self._lock:
            for key in [k for k in self.table if k.endswith(suffix)]:
                del self.table[key]
                self.file.mark_dirty()

    def snapshot(self) -> dict[str, dict[int, int]]:
        with self._lock:
            return {key: dict(queues) for key, queues in self.table.items()}

    def unread_floor(self) -> int:
        """The lowest commit log offset that a consumer group has still to read: where the next
        message of each queue lies for each group with an offset in it (a group behind the
        queue's oldest message reads from that), the commit log's end when every group has read
        everything. The store drops pages below it from the page cache (MessageStore.
        unread_floor); it runs in the store's page-release thread."""
        store = self.store
        floor = store.max_physical_offset()
        for key, queues in self.snapshot().items():
            topic = key.split(TOPIC_GROUP_SEPARATOR, 1)[0]
            for queue_id, offset in queues.items():
                entry = store.queue_entry(
                    topic, queue_id, max(offset, store.get_min_offset_in_queue(topic, queue_id)))
                if entry is not None:
                    floor = min(floor, entry[0])
        return floor

    # -- persistence ----------------------------------------------------------------------------
    def load(self) -> None:
        data = read_json(self.path)
        if data is None:
            return
        try:
            self.table = parse_offset_table(data)
        except ValueError as e:
            raise StoreError(f"{self.path}: {e}") from None
        log.info("consumer offsets loaded entries=%d path=%s", len(self.table), self.path)

    def merge_from_master(self, table: dict[str, dict[int, int]]) -> int:
        """A slave's copy of its master's offsets (GET_ALL_CONSUMER_OFFSET): the master's value
        wins for every queue it has (RocketMQ's putAll); returns how many changed."""
        changed = 0
        with self._lock:
            for key, queues in table.items():
                mine = self.table.setdefault(key, {})
                for qid, offset in queues.items():
                    if mine.get(qid) != offset:
                        mine[qid] = offset
                        changed += 1
            if changed:
                self.file.mark_dirty()
        return changed

    def encode(self) -> bytes:
        return orjson.dumps({"offsetTable": _json_ready(self.snapshot())})

    def persist(self, *, force: bool = False) -> bool:
        """Write the table if it changed since the last write (or ``force``); False when the
        write failed (logged; tried again at the next call). Safe from a worker thread: it
        encodes a snapshot."""
        return self.file.save(force=force)


def parse_offset_table(data: Any) -> dict[str, dict[int, int]]:
    """``{"offsetTable": {"topic@group": {"0": 12}}}`` (queue ids as text or bare numbers, as
    Java writes them) as a table; ValueError naming what is wrong."""
    table = data.get("offsetTable") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise ValueError("no offsetTable object")
    try:
        parsed = {str(key): {int(qid): int(off) for qid, off in queues.items()}
                  for key, queues in table.items()}
    except (AttributeError, TypeError, ValueError) as e:
        raise ValueError(f"malformed offsetTable: {e}") from None
    bad = [(k, q, o) for k, queues in parsed.items() for q, o in queues.items()
           if not (0 <= q <= I32_MAX and -1 <= o <= I64_MAX)]
    if bad:
        raise ValueError(f"offsetTable holds values out of range: {bad[:3]}")
    return parsed


def _json_ready(table: dict[str, dict[int, int]]) -> dict[str, Any]:
    return {key: {str(qid): off for qid, off in sorted(queues.items())}
            for key, queues in sorted(table.items())}
