"""Metadata changes that cross a failover: carried by the replicated commit log.

A slave copies its master's tables every ``slave_sync_interval_ms`` (replication/slave_sync.py);
alone, that loses a topic created or an offset committed between two copies when the master is
killed and a slave is elected. So a master in a replicated set also *appends each change* as one
record to the internal topic :data:`~orbitmq.protocol.topics.METADATA_LOG_TOPIC` (queue 0) and
answers the change only once the record is durable as a send would be (durable_save.py: synced
under SYNC_FLUSH, held by the in-sync slaves of a SYNC_MASTER; FLUSH_SLAVE_TIMEOUT /
SLAVE_NOT_AVAILABLE otherwise, with the change standing on the master). Every replica applies
the records, in queue order, to its own tables when its store dispatches them, at start, and at
promotion before it answers anything as master; so a change answered SUCCESS by a SYNC_MASTER
is on every member that can be elected (an in-sync one holds the record; the promotion applies
it). ASYNC_MASTER answers at once: its slaves get the change as far behind as their copy of the
commit log is (``ha`` lag, usually milliseconds), and the periodic full copy stays the repair
path for anything a record could not carry (a replica whose log was cut, a record refused).

Why the commit log, not a push of each change to the slaves: it already has everything this
needs (ordering, the HA stream and its authentication, the in-sync set, epochs and the cut of
unacknowledged tails at failover, the durability waits), so the metadata inherits the
guarantees the messages have instead of a second protocol with its own.

Each record is a small JSON object, ``{"v": 1, "kind": ..., ...}`` (:class:`RecordKind`); each
sets a value (never adds to one), so applying a record twice leaves the same tables
(idempotent). The next queue offset to apply is kept in the metadata store (``versions`` row
``metadata_log``): the tables hold the latest state, so the log only has to cover what a replica
has not applied yet and its retention loses nothing (a replica that finds its next record
deleted jumps to the oldest one and waits for the full copy). A record this broker cannot apply
(an unknown kind, a field out of range: :class:`~orbitmq.errors.MetadataRecordError`) is
refused loudly (logged as an error, counted) and skipped: the full copy repairs it.

Clients never see the topic: it has no topic config (no route names it; pulls answer
TOPIC_NOT_EXIST) and it is in NOT_ALLOWED_SEND_TOPICS and SYSTEM_TOPICS (sends, creates and
deletes are refused), so a client cannot forge a record.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from orbitmq.broker.durable_save import DurableSave, put_answer
from orbitmq.broker.role import RoleState
from orbitmq.broker.tables.consumer_offset_manager import ConsumerOffsetManager
from orbitmq.broker.tables.subscription_group_manager import (
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from orbitmq.broker.tables.topic_config_manager import TopicConfigManager
from orbitmq.errors import BrokerError, MetadataRecordError, RemoteProtocolError, StoreError
from orbitmq.protocol.bodies import DataVersion, TopicConfig
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.message import PropertyKey
from orbitmq.protocol.topics import METADATA_LOG_TOPIC
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.message_store import MessageStore
from orbitmq.store.metadata_db import VERSIONS, MetadataDB, Row
from orbitmq.store.status import PutMessageResult, PutMessageStatus
from orbitmq.transport.loop import call_soon_from_any_thread

__all__ = ["MetadataLog", "MetadataTables", "RecordKind", "MetadataRecord", "encode_record",
           "decode_record", "apply_record", "RECORD_SIZE_MAX_BYTES", "APPLIED_KEY"]

log = logging.getLogger(__name__)

RECORD_VERSION = 1
RECORD_SIZE_MAX_BYTES = 256 * 1024  # a topic config with attributes is well under this
APPLY_BATCH_MAX = 1000  # records applied per round; the loop runs other work between rounds
APPLY_POLL_INTERVAL_S = 1.0  # beside the dispatch's arrival signal, should one be missed
PROMOTION_DISPATCH_WAIT_MAX_S = 2.0  # a new master waits this long for its log to be queued
APPLIED_KEY = "metadata_log"  # the versions row holding the next queue offset to apply
_QUEUE = 0
_I32_MAX = 2**31 - 1
_I64_MAX = 2**63 - 1


class RecordKind(enum.Enum):
    """What a record changes."""

    TOPIC_UPDATE = "topic.update"  # topic, config, version
    TOPIC_DELETE = "topic.delete"  # topic, version (its offsets go too, as on the master)
    GROUP_UPDATE = "group.update"  # group, config, version
    GROUP_DELETE = "group.delete"  # group, removeOffset, version
    OFFSET_COMMIT = "offset.commit"  # group, topic, queueId, offset


@dataclasses.dataclass(frozen=True, slots=True)
class MetadataRecord:
    kind: RecordKind
    fields: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class MetadataTables:
    """The tables records apply to."""

    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager


def encode_record(kind: RecordKind, **fields: Any) -> bytes:
    """One record's body (JSON)."""
    return orjson.dumps({"v": RECORD_VERSION, "kind": kind.value, **fields})


def decode_record(body: bytes | bytearray | memoryview) -> MetadataRecord:
    """A record from its body; MetadataRecordError when it is not one this broker knows."""
    if len(body) > RECORD_SIZE_MAX_BYTES:
        raise MetadataRecordError(f"metadata record of {len(body)} bytes exceeds "
                                  f"{RECORD_SIZE_MAX_BYTES}")
    try:
        data = orjson.loads(bytes(body))
    except orjson.JSONDecodeError as e:
        raise MetadataRecordError(f"metadata record is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise MetadataRecordError("metadata record is not a JSON object")
    if data.get("v") != RECORD_VERSION:
        raise MetadataRecordError(f"metadata record version {data.get('v')!r} is not "
                                  f"{RECORD_VERSION}")
    try:
        kind = RecordKind(data.get("kind"))
    except ValueError:
        raise MetadataRecordError(f"unknown metadata record kind {data.get('kind')!r}") from None
    return MetadataRecord(kind, data)


def _text(fields: dict[str, Any], name: str) -> str:
    value = fields.get(name)
    if not isinstance(value, str) or not value:
        raise MetadataRecordError(f"metadata record field {name!r} is not a non-empty string")
    return value


def _int(fields: dict[str, Any], name: str, high: int) -> int:
    value = fields.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise MetadataRecordError(f"metadata record field {name!r} = {value!r} is not in "
                                  f"0..{high}")
    return value


def _version(fields: dict[str, Any]) -> DataVersion:
    try:
        return DataVersion.from_dict(fields.get("version"))
    except RemoteProtocolError as e:
        raise MetadataRecordError(f"metadata record version: {e}") from None


def apply_record(record: MetadataRecord, tables: MetadataTables) -> None:
    """Make the change ``record`` names in ``tables`` (the same tables whether applied once or
    twice). Raises MetadataRecordError, nothing changed, for a record it refuses."""
    f, kind = record.fields, record.kind
    try:
        if kind is RecordKind.TOPIC_UPDATE:
            name = _text(f, "topic")
            tables.topics.apply_from_master(name, TopicConfig.from_dict(f.get("config")),
                                            _version(f))
        elif kind is RecordKind.TOPIC_DELETE:
            name = _text(f, "topic")
            tables.topics.apply_from_master(name, None, _version(f))
            tables.offsets.remove_topic(name)
        elif kind is RecordKind.GROUP_UPDATE:
            name = _text(f, "group")
            tables.groups.apply_from_master(
                name, SubscriptionGroupConfig.from_dict(f.get("config")), _version(f))
        elif kind is RecordKind.GROUP_DELETE:
            name = _text(f, "group")
            tables.groups.apply_from_master(name, None, _version(f))
            if f.get("removeOffset") is True:
                tables.offsets.remove_group(name)
        elif kind is RecordKind.OFFSET_COMMIT:
            tables.offsets.commit(_text(f, "group"), _text(f, "topic"),
                                  _int(f, "queueId", _I32_MAX), _int(f, "offset", _I64_MAX))
        else:  # pragma: no cover - RecordKind is closed; a new kind must be added above
            raise MetadataRecordError(f"no apply for metadata record kind {kind.value}")
    except (RemoteProtocolError, BrokerError, ValueError) as e:
        raise MetadataRecordError(f"metadata record {kind.value} refused: {e}") from None


class MetadataLog:
    """Appends a master's changes and applies them on every replica (module docstring).

    Args:
        store: the broker's store (records are read from its queue of the topic).
        saver: the durable-save seam (a record is saved as a send is).
        role: the broker's role now (only a master appends; only a slave applies as it goes).
        tables: the tables records apply to.
        db: the metadata store (the next queue offset to apply).
        replicated: True while this master's changes must reach slaves (controller mode, a
            SYNC_MASTER, or a slave connected): a broker alone writes no record.
        store_host: (ip, port) written into the records.
    """

    def __init__(self, store: MessageStore, saver: DurableSave, role: RoleState,
                 tables: MetadataTables, db: MetadataDB, replicated: Callable[[], bool],
                 store_host: Callable[[], tuple[str, int]]) -> None:
        self.store, self.saver, self.role, self.tables, self.db = store, saver, role, tables, db
        self._replicated = replicated
        self._store_host = store_host
        self.applied = 0  # the next queue offset of the topic to apply
        self._saved_applied = 0
        self.records_applied = 0
        self.records_refused = 0
        self.records_appended = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listening = False
        self._kicked = False
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def load(self) -> None:
        """Read the next offset to apply, then apply what the store holds past it (a replica
        killed between dispatching a record and applying it). After the tables are loaded."""
        for key, _sub, value in self.db.rows(VERSIONS):
            if key == APPLIED_KEY and isinstance(value, int) and value >= 0:
                self.applied = self._saved_applied = value
        self.catch_up()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if not self._listening:
            self.store.add_arrival_listener(self._on_arrival)
            self._listening = True
        self._task = self._loop.create_task(self._poll(), name="orbitmq-metadata-log")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._loop = None
        self.save_applied()

    # -- a master's side ------------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        """True when a change made now must be appended (a master in a replicated set)."""
        return self.role.accepts_writes and self._replicated()

    def append(self, kind: RecordKind, **fields: Any) -> PutMessageResult | None:
        """Append the record of a change just made (in the same loop step as the change, so
        the log keeps the changes' order); None when no record is needed."""
        if not self.enabled:
            return None
        body = encode_record(kind, **fields)
        host = self._store_host()
        inner = MessageInner(METADATA_LOG_TOPIC, _QUEUE, body, {PropertyKey.TAGS: kind.value},
                             born_timestamp=int(time.time() * 1000), born_host=host,
                             store_host=host)
        result = self.saver.append([inner])
        if result.status is PutMessageStatus.PUT_OK and result.append is not None:
            self.records_appended += 1
            # A master's own changes are in its tables already: nothing to apply up to here.
            if result.append.queue_offset >= self.applied:
                self.applied = result.append.queue_offset + 1
        else:
            log.error("metadata record not appended kind=%s status=%s: the change stands on "
                      "this master and reaches the slaves with their next full copy",
                      kind.value, result.status.value)
        return result

    async def settled(self, result: PutMessageResult | None) -> tuple[ResponseCode, str | None]:
        """The answer of a change whose record is ``result``: SUCCESS once the record is durable
        as a send would be (bounded by the durability conditions' waits), else the send's
        failure code, the remark saying the change stands on this master."""
        if result is None:
            return ResponseCode.SUCCESS, None
        if result.status is PutMessageStatus.PUT_OK:
            result = await self.saver.settled(result)
        if result.status is PutMessageStatus.PUT_OK:
            return ResponseCode.SUCCESS, None
        code, remark = put_answer(result)
        return code, (f"the change is made on the master but its slaves may not have it "
                      f"({remark}); it reaches them with their next full copy")

    # -- every replica's side -------------------------------------------------------------------
    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        """The store dispatched entries (any thread): a record for a slave to apply soon."""
        if topic != METADATA_LOG_TOPIC or self.role.accepts_writes:
            return
        loop = self._loop
        if loop is None or self._kicked:
            return
        self._kicked = True
        try:
            call_soon_from_any_thread(loop, self._kick)
        except RuntimeError:  # the loop closed (the broker stops)
            self._kicked = False

    def _kick(self) -> None:
        self._kicked = False
        if not self.role.accepts_writes:
            self._apply_round()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(APPLY_POLL_INTERVAL_S)
            if not self.role.accepts_writes:
                self._apply_round()

    def _apply_round(self) -> None:
        try:
            if self.catch_up(APPLY_BATCH_MAX) >= APPLY_BATCH_MAX and self._loop is not None:
                self._loop.call_soon(self._kick)  # more to do: after other work
        except Exception:
            log.exception("applying metadata records failed; tried again at the next round")

    def promoted(self) -> int:
        """This replica becomes master: apply every record its log holds, first waiting
        (bounded) for the store to queue it, before it answers anything as master."""
        if not self.store.wait_dispatched(PROMOTION_DISPATCH_WAIT_MAX_S):
            log.error("promotion: the log is not all dispatched after %.1f s; metadata records "
                      "past it are applied by the next full copy", PROMOTION_DISPATCH_WAIT_MAX_S)
        applied = self.catch_up()
        log.info("promotion: %d metadata records applied, next %d", applied, self.applied)
        return applied

    def catch_up(self, count_max: int | None = None) -> int:
        """Apply the records from ``applied`` to the queue's end (at most ``count_max``), in
        order; returns how many were read. The tables are saved, then the new offset."""
        store = self.store
        high = store.get_max_offset_in_queue(METADATA_LOG_TOPIC, _QUEUE)
        low = store.get_min_offset_in_queue(METADATA_LOG_TOPIC, _QUEUE)
        if self.applied > high:  # this log was cut below what it applied (a failover)
            log.warning("metadata log: applied up to %d but the log ends at %d (cut at a "
                        "failover); the full copy repairs what was applied past it",
                        self.applied, high)
            self.applied = high
        if self.applied < low:
            log.warning("metadata log: records %d..%d are gone (retention); the full copy "
                        "repairs what they held", self.applied, low - 1)
            self.applied = low
        end = high if count_max is None else min(high, self.applied + count_max)
        read = 0
        while self.applied < end:
            offset = self.applied
            entry = store.queue_entry(METADATA_LOG_TOPIC, _QUEUE, offset)
            msg = store.look_message_by_offset(entry[0], entry[1]) if entry is not None else None
            if msg is None:
                log.error("metadata log: record %d unreadable; skipped", offset)
                self.records_refused += 1
            else:
                try:
                    apply_record(decode_record(msg.body), self.tables)
                    self.records_applied += 1
                except MetadataRecordError as e:
                    self.records_refused += 1
                    log.error("metadata log: record %d refused and skipped (the full copy "
                              "repairs it): %s", offset, e)
            self.applied = offset + 1
            read += 1
        if read:
            self.tables.offsets.persist()
            self.save_applied()
        return read

    def save_applied(self) -> None:
        """Write the next offset to apply when it moved (after the tables it covers)."""
        applied = self.applied
        if applied == self._saved_applied:
            return
        try:
            self.db.write([Row(VERSIONS, APPLIED_KEY, 0, applied)])
        except StoreError as e:  # records are applied again at the next start: idempotent
            log.warning("metadata log: applied offset %d not saved: %s", applied, e)
            return
        self._saved_applied = applied

    def runtime_info(self) -> dict[str, str]:
        return {"metadataLogApplied": str(self.applied),
                "metadataLogRecordsAppended": str(self.records_appended),
                "metadataLogRecordsRefused": str(self.records_refused)}
