"""Committed consumer offsets of clustering consumer groups, and their two request handlers.

The table is keyed like RocketMQ's, ``topic@group`` -> queue id -> next offset to consume, and
persisted as ``STORE/config/consumerOffset.json`` (``{"offsetTable": {"topic@group": {"0": 12}}}``;
Java writes the queue ids as bare numbers, which we also read). It is written atomically every
``flush_consumer_offset_interval_ms`` when something changed, and at stop.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import orjson

from orbitmq.broker.config_file import config_path, read_json, write_atomic
from orbitmq.errors import StoreError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from orbitmq.transport.connection import RemotingConnection

if TYPE_CHECKING:
    from orbitmq.store.message_store import MessageStore

__all__ = ["ConsumerOffsetManager", "TOPIC_GROUP_SEPARATOR"]

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    """``topic@group`` -> {queue id: offset}, persisted; the QUERY/UPDATE_CONSUMER_OFFSET handlers."""

    def __init__(self, store_path: str, store: MessageStore) -> None:
        self.path = config_path(store_path, "consumerOffset.json")
        self.store = store
        self.table: dict[str, dict[int, int]] = {}
        self._lock = threading.Lock()  # the persist thread snapshots while the loop commits
        self._write_lock = threading.Lock()  # one writer of the file (periodic thread vs stop)
        self._dirty = False

    # -- table ----------------------------------------------------------------------------------
    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        with self._lock:
            queues = self.table.get(key)
            if queues is None:
                queues = self.table[key] = {}
            if queues.get(queue_id) != offset:
                queues[queue_id] = offset
                self._dirty = True

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
                self._dirty = True

    def remove_group(self, group: str) -> None:
        suffix = f"{TOPIC_GROUP_SEPARATOR}{group}"
        with self._lock:
            for key in [k for k in self.table if k.endswith(suffix)]:
                del self.table[key]
                self._dirty = True

    def snapshot(self) -> dict[str, dict[int, int]]:
        with self._lock:
            return {key: dict(queues) for key, queues in self.table.items()}

    # -- persistence ----------------------------------------------------------------------------
    def load(self) -> None:
        data = read_json(self.path)
        if data is None:
            return
        table = data.get("offsetTable") if isinstance(data, dict) else None
        if not isinstance(table, dict):
            raise StoreError(f"{self.path}: no offsetTable object")
        try:
            self.table = {
                str(key): {int(qid): int(off) for qid, off in queues.items()}
                for key, queues in table.items()
            }
        except (AttributeError, TypeError, ValueError) as e:
            raise StoreError(f"{self.path}: malformed offsetTable: {e}") from None
        log.info("consumer offsets loaded entries=%d path=%s", len(self.table), self.path)

    def encode(self) -> bytes:
        return orjson.dumps({"offsetTable": _json_ready(self.snapshot())})

    def persist(self, *, force: bool = False) -> bool:
        """Write the table if it changed since the last write (or ``force``); True if written.

        Safe to call from a worker thread: it works on a snapshot.
        """
        with self._write_lock:
            with self._lock:
                if not (self._dirty or force):
                    return False
                self._dirty = False
            try:
                write_atomic(self.path, self.encode())
            except OSError:
                self._dirty = True  # try again next round
                raise
            return True

    # -- handlers -------------------------------------------------------------------------------
    def query_consumer_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """QUERY_CONSUMER_OFFSET (14). Without a committed offset, a queue whose first message
        is still stored answers 0 (a new group reads it from the start, as RocketMQ); otherwise
        QUERY_NOT_FOUND and the client applies its ConsumeFromWhere."""
        h = QueryConsumerOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        offset = self.query(h.consumer_group, h.topic, h.queue_id)
        if offset < 0 and self.store.get_min_offset_in_queue(h.topic, h.queue_id) <= 0:
            offset = 0
        if offset < 0:
            return cmd.response(
                ResponseCode.QUERY_NOT_FOUND,
                f"no committed offset for group {h.consumer_group} in {h.topic}:{h.queue_id}",
            )
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(offset)})

    def update_consumer_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """UPDATE_CONSUMER_OFFSET (15); the C++ client sends it without the oneway bit and does
        not wait, so it is answered like any request."""
        h = UpdateConsumerOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        if h.queue_id < 0 or h.commit_offset < 0:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"illegal offset commit queueId={h.queue_id} commitOffset={h.commit_offset}",
            )
        self.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return cmd.response(ResponseCode.SUCCESS)


def _json_ready(table: dict[str, dict[int, int]]) -> dict[str, Any]:
    return {key: {str(qid): off for qid, off in sorted(queues.items())}
            for key, queues in sorted(table.items())}
