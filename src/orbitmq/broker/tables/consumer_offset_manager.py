"""Committed consumer offsets of clustering consumer groups (their requests: processor/offset_processor.py).

The table is keyed like RocketMQ's, ``topic@group`` -> queue id -> next offset to consume, and
persisted in the metadata store (store/metadata_db.py, kind ``consumer_offsets``: one row per
``(topic@group, queue id)``), change by change:

- an explicit commit (UPDATE_CONSUMER_OFFSET, :meth:`ConsumerOffsetManager.commit_saved`) is
  answered after its row is written; the commits of one event-loop round, and those that arrive
  while a save runs, share one transaction, so a burst of commits costs a few writes, not one
  each;
- offsets carried by pulls, POP and the broker's own progress (:meth:`commit`) are written
  behind, as RocketMQ does: every ``flush_consumer_offset_interval_ms`` and at stop, the rows
  that changed in one transaction.

A failed write is logged and tried again at the next round (tables/metadata_table.py). A
``consumerOffset.json`` left by an older broker (``{"offsetTable": {"topic@group": {"0": 12}}}``;
Java writes the queue ids as bare numbers, which we also read) is imported at the first start
and renamed ``consumerOffset.json.migrated``.

Only what can be written is accepted: the header's ranges (a queue id within int32, an offset
within int64) and, checked here, a topic and a group that are legal names (a ``@`` or a ``/``
in either would make the table's keys ambiguous).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, Any

import orjson

from orbitmq.broker.config_file import config_path
from orbitmq.broker.tables.metadata_table import MetadataTable, migrate_json
from orbitmq.errors import StoreError
from orbitmq.protocol._lenient import I32_MAX, I64_MAX
from orbitmq.store.metadata_db import CONSUMER_OFFSETS, METADATA_DB_FILE, MetadataDB, Row

if TYPE_CHECKING:
    from orbitmq.store.message_store import MessageStore

__all__ = ["ConsumerOffsetManager", "TOPIC_GROUP_SEPARATOR", "parse_offset_table"]

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    """``topic@group`` -> {queue id: offset}, persisted.

    Args:
        store_path: the store's root (where an older broker's consumerOffset.json lies).
        store: the message store (for :meth:`unread_floor`).
        db: the broker's metadata store; None opens the store's own (a manager built alone).
    """

    def __init__(self, store_path: str, store: MessageStore, db: MetadataDB | None = None) -> None:
        self.path = config_path(store_path, "consumerOffset.json")  # imported once
        self.store = store
        self.table: dict[str, dict[int, int]] = {}
        self._lock = threading.Lock()  # the persist thread snapshots while the loop commits
        self.db = db if db is not None else MetadataDB(config_path(store_path, METADATA_DB_FILE))
        self.file = MetadataTable(self.db, "consumer offsets", self._rows)
        # Explicit commits waiting for their rows (commit_saved): one save at a time.
        self._save_waiters: list[asyncio.Future[bool]] = []
        self._saving: asyncio.Future[bool] | None = None  # held: the loop keeps weak refs
        self._save_scheduled = False

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
                self.file.mark(key, queue_id)

    async def commit_saved(self, group: str, topic: str, queue_id: int, offset: int) -> bool:
        """:meth:`commit`, then wait until the offset is in the metadata store: True once it
        is, False when the write failed (logged; the offset stays in memory and is written at
        the next round). ValueError as :meth:`commit`.

        Group commit: one save runs at a time, on a worker thread; the commits that arrive in
        the same event-loop round, and all those that arrive while a save runs, wait for the
        next save, which writes them in one transaction. So a burst of commits costs a few
        transactions, and a slow disk (SYNC_FLUSH fsyncs each one) holds one thread, never
        the executor's every worker."""
        self.commit(group, topic, queue_id, offset)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._save_waiters.append(waiter)
        if self._saving is None and not self._save_scheduled:
            self._save_scheduled = True
            loop.call_soon(self._start_save)  # after the rest of this round's commits
        return await asyncio.shield(waiter)

    def pending_rounds(self) -> list[asyncio.Future[bool]]:
        """The save running for explicit commits, if any (the controller waits for it at stop)."""
        return [] if self._saving is None else [self._saving]

    def _start_save(self) -> None:
        """One save for every commit waiting; the next starts when it ends, if any waits."""
        self._save_scheduled = False
        if self._saving is not None or not self._save_waiters:
            return
        waiters, self._save_waiters = self._save_waiters, []
        task = self._saving = asyncio.ensure_future(asyncio.to_thread(self.file.save))

        def done(t: asyncio.Future[bool]) -> None:
            self._saving = None
            saved = not t.cancelled() and t.exception() is None and t.result()
            for w in waiters:
                if not w.done():
                    w.set_result(saved)
            self._start_save()

        task.add_done_callback(done)

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
                self.file.mark_many((key, qid) for qid in self.table.pop(key))

    def remove_topics(self, topics: set[str]) -> None:
        """``remove_topic`` of many topics in one pass over the table (expired lite topics)."""
        with self._lock:
            for key in [k for k in self.table if k.partition(TOPIC_GROUP_SEPARATOR)[0] in topics]:
                self.file.mark_many((key, qid) for qid in self.table.pop(key))

    def remove_group(self, group: str) -> None:
        suffix = f"{TOPIC_GROUP_SEPARATOR}{group}"
        with self._lock:
            for key in [k for k in self.table if k.endswith(suffix)]:
                self.file.mark_many((key, qid) for qid in self.table.pop(key))

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
        """Read the offsets from the metadata store, importing consumerOffset.json once.

        Raises:
            StoreError: the store cannot be read, holds an offset out of range, or the JSON
                file to import is not valid.
        """
        self.db.open()
        table: dict[str, dict[int, int]] = {}
        for key, qid, offset in self.db.rows(CONSUMER_OFFSETS):
            if not (isinstance(offset, int) and 0 <= qid <= I32_MAX and -1 <= offset <= I64_MAX):
                raise StoreError(f"{self.db.path}: offset {offset!r} of {key} queue {qid} "
                                 "is out of range")
            table.setdefault(key, {})[qid] = offset
        self.table = table
        migrate_json(self.path, self.file, self._import)
        log.info("consumer offsets loaded entries=%d path=%s", len(self.table), self.db.path)

    def _import(self, data: object) -> None:
        """consumerOffset.json's content into the table, every offset marked to be written."""
        try:
            imported = parse_offset_table(data)
        except ValueError as e:
            raise StoreError(f"{self.path}: {e}") from None
        with self._lock:
            for key, queues in imported.items():
                self.table.setdefault(key, {}).update(queues)
                self.file.mark_many((key, qid) for qid in queues)

    def _rows(self, keys: list[tuple[str, int]]) -> list[Row]:
        """The rows of the changed offsets as they are now (a delete for one removed)."""
        with self._lock:
            return [Row(CONSUMER_OFFSETS, key, qid, self.table.get(key, {}).get(qid))
                    for key, qid in keys]

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
                        self.file.mark(key, qid)
                        changed += 1
        return changed

    def encode(self) -> bytes:
        return orjson.dumps({"offsetTable": _json_ready(self.snapshot())})

    def persist(self, *, force: bool = False) -> bool:
        """Write the offsets that changed since the last write in one transaction; False when
        the write failed (logged; tried again at the next call). Safe from a worker thread."""
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
