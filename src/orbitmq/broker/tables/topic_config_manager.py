"""The broker's topic table: which topics it serves, with how many queues and which permissions.

Persisted in the metadata store (store/metadata_db.py, kind ``topics``: one row per topic, its
config as Java's TopicConfig JSON, and the data version in ``versions``): a change writes that
topic's row and the version in one small transaction, before the change is answered, whatever
the number of topics. Every change bumps the data version and tells the controller which topic
changed, which registers that topic alone with the name servers at once, so that a topic created
by a send shows up in routes without waiting for the 30 s registration. A failed write is logged
and tried again at the next periodic round (tables/metadata_table.py); the change itself stands.
A ``topics.json`` left by an older broker is imported at the first start and renamed
``topics.json.migrated``.

Every change is checked before it is made (:func:`check_topic_config`): a legal name, queue
counts within ``0..QUEUE_NUMS_MAX``, permission and system flags within their defined bits. What
could not be written to the metadata store or registered with a name server is never accepted.

Auto-creation works as in RocketMQ: with ``auto_create_topic`` the default topic ``TBW102`` exists
with the INHERIT permission; a send to an unknown topic naming it as ``defaultTopic`` creates the
topic with ``min(defaultTopicQueueNums, TBW102's write queues)`` queues and TBW102's permission
minus INHERIT.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

from orbitmq.broker.config_file import config_path
from orbitmq.broker.tables.metadata_table import MetadataTable, metadata_db_for, migrate_json
from orbitmq.config import QUEUE_NUMS_MAX, BrokerConfig
from orbitmq.errors import BrokerError, RemoteProtocolError, StoreError
from orbitmq.protocol._lenient import PERM_MASK, TOPIC_SYS_FLAG_MASK
from orbitmq.protocol.bodies import DataVersion, Perm, TopicConfig, TopicConfigSerializeWrapper
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.topics import (
    DEFAULT_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    METADATA_LOG_TOPIC,
    OFFSET_MOVED_EVENT,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TIMER_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from orbitmq.rate_limited_log import RateLimitedLog
from orbitmq.store.metadata_db import TOPICS, VERSIONS, MetadataDB, Row
from orbitmq.transport.limits import LimitCounters

__all__ = [
    "TopicConfigManager",
    "validate_topic",
    "check_topic_config",
    "DEFAULT_TOPIC",
    "SCHEDULE_TOPIC",
    "TRANS_HALF_TOPIC",
    "TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "RETRY_GROUP_TOPIC_PREFIX",
    "DLQ_GROUP_TOPIC_PREFIX",
    "SYSTEM_TOPICS",
    "NOT_ALLOWED_SEND_TOPICS",
    "TOPIC_MAX_LENGTH",
    "QUEUE_NUMS_MAX",
]

log = logging.getLogger(__name__)

SYSTEM_TOPICS = frozenset({
    DEFAULT_TOPIC, SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT, TIMER_TOPIC, METADATA_LOG_TOPIC,
})
# Topics only the broker itself writes: a producer sending there would corrupt a service's state.
NOT_ALLOWED_SEND_TOPICS = frozenset({
    DEFAULT_TOPIC, SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC,
    TIMER_TOPIC, METADATA_LOG_TOPIC,
})

TOPIC_MAX_LENGTH = 127
_TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")

_RW = int(Perm.READ | Perm.WRITE)


def validate_topic(topic: str) -> str | None:
    """RocketMQ's topic name rules; returns the reason a name is refused, None when it is fine."""
    if not topic or not topic.strip():
        return "the specified topic is blank"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"the specified topic is longer than topic max length {TOPIC_MAX_LENGTH}"
    if not _TOPIC_PATTERN.match(topic):
        return f"the specified topic[{topic}] contains illegal characters, allowing only {_TOPIC_PATTERN.pattern}"
    return None


def check_topic_config(tc: TopicConfig) -> str | None:
    """Why ``tc`` cannot be stored (the field named), or None when it can."""
    reason = validate_topic(tc.topic_name)
    if reason is not None:
        return reason
    for name, n in (("readQueueNums", tc.read_queue_nums), ("writeQueueNums", tc.write_queue_nums)):
        if not 0 <= n <= QUEUE_NUMS_MAX:
            return f"{name} {n} is out of range 0..{QUEUE_NUMS_MAX}"
    if not 0 <= tc.perm <= PERM_MASK:
        return f"perm {tc.perm} sets bits outside PermName bits (mask {PERM_MASK:#x})"
    if not 0 <= tc.topic_sys_flag <= TOPIC_SYS_FLAG_MASK:
        return (f"topicSysFlag {tc.topic_sys_flag} sets bits outside TopicSysFlag bits "
                f"(mask {TOPIC_SYS_FLAG_MASK:#x})")
    if tc.topic_filter_type not in ("SINGLE_TAG", "MULTI_TAG"):
        return f"topicFilterType {tc.topic_filter_type!r} is not SINGLE_TAG or MULTI_TAG"
    return None


class TopicConfigManager:
    """Topic configs of one broker; mutated from the event loop, read from anywhere.

    Args:
        config: the broker's settings (store path, auto-creation, default queue numbers,
            ``topics_max``).
        on_change: called with the topic's name after every change of it (the controller
            registers that topic with the name servers).
        counters: where a refusal past ``topics_max`` is counted (the server's limit counters).
        db: the broker's metadata store, shared by its tables (the controller's); None opens
            the store's own (a manager built alone, in tests and tools).
    """

    def __init__(self, config: BrokerConfig, on_change: Callable[[str], None] | None = None,
                 counters: LimitCounters | None = None, db: MetadataDB | None = None) -> None:
        self.config = config
        self._counters = counters if counters is not None else LimitCounters()
        self._limit_log = RateLimitedLog(log)
        self.path = config_path(config.store.store_path, "topics.json")  # imported once
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion(int(time.time() * 1000), 0)
        self._on_change = on_change
        self._lock = threading.Lock()
        # The names in order for ``page`` (None: to be sorted again); dropped whenever a name
        # comes or goes, under the lock, as the table changes.
        self._sorted_names: list[str] | None = None
        self.db = db if db is not None else metadata_db_for(config)
        self.file = MetadataTable(self.db, "topics", self._rows)

    # -- persistence ----------------------------------------------------------------------------
    def load(self) -> None:
        """Read the topics from the metadata store (importing topics.json once) and make sure
        the system topics this broker needs exist.

        Raises:
            StoreError: the store cannot be read, or holds or imports a config it refuses.
        """
        self.db.open()
        for name, _sub, value in self.db.rows(TOPICS):
            try:
                self.table[name] = TopicConfig.from_json(_text(value))
            except RemoteProtocolError as e:
                raise StoreError(f"{self.db.path}: topic {name}: {e}") from None
        for key, _sub, value in self.db.rows(VERSIONS):
            if key == TOPICS:
                self.data_version = _version(value, self.db.path)
        migrate_json(self.path, self.file, self._import)
        changed = False
        if self.config.auto_create_topic and DEFAULT_TOPIC not in self.table:
            nums = self.config.default_topic_queue_nums
            self.table[DEFAULT_TOPIC] = TopicConfig(DEFAULT_TOPIC, nums, nums, _RW | int(Perm.INHERIT))
            self.file.mark(DEFAULT_TOPIC)
            changed = True
        trace_topic = self.config.msg_trace_topic_name
        if self.config.trace_topic_enable and trace_topic not in self.table:
            # RocketMQ's traceTopicEnable: one queue that traced clients write to (docs/trace.md)
            self.table[trace_topic] = TopicConfig(trace_topic, 1, 1, _RW)
            self.file.mark(trace_topic)
            changed = True
        if changed:
            self._bump()
            self.persist()
        log.info("topics loaded count=%d path=%s", len(self.table), self.db.path)

    def _import(self, data: object) -> None:
        """topics.json's content into the table, every topic marked to be written."""
        try:
            wrapper = TopicConfigSerializeWrapper.from_dict(data)
        except RemoteProtocolError as e:
            raise StoreError(f"{self.path}: {e}") from None
        self.table.update(wrapper.topic_config_table)
        self._sorted_names = None
        self.data_version = wrapper.data_version
        self.file.mark_many((name, 0) for name in wrapper.topic_config_table)

    def _rows(self, keys: list[tuple[str, int]]) -> list[Row]:
        """The rows of the changed topics as they are now, and the data version."""
        with self._lock:
            rows = [Row(TOPICS, name, 0, _config_text(self.table.get(name))) for name, _ in keys]
            version = self.data_version.to_json().decode()
        rows.append(Row(VERSIONS, TOPICS, 0, version))
        return rows

    def persist(self, *, force: bool = True) -> bool:
        """Write what changed since the last save; False when it failed (logged, retried by
        the next call). ``force`` is kept for callers: the store holds everything else."""
        return self.file.save(force=force)

    def wrapper(self) -> TopicConfigSerializeWrapper:
        """Every topic and the data version: the body of GET_ALL_TOPIC_CONFIG and REGISTER_BROKER."""
        with self._lock:
            return TopicConfigSerializeWrapper(
                dict(self.table), DataVersion(self.data_version.timestamp, self.data_version.counter)
            )

    def page(self, data_version: DataVersion | None, topic_seq: int,
             count_max: int) -> tuple[TopicConfigSerializeWrapper, int]:
        """One page of the table for a slave's copy (GET_ALL_TOPIC_CONFIG, RocketMQ 5's
        ``subTopicConfigTable``): at most ``count_max`` topics from the ``topic_seq``-th in name
        order, from the first when ``data_version`` is not the table's version now (the asker
        sees the new version and starts again), with the version now; and the table's size.
        The sorted names are kept until the set of names changes, so that a copy in pages
        sorts the table once, not once a page."""
        with self._lock:
            version = self.data_version
            names = self._sorted_names
            if names is None:
                names = self._sorted_names = sorted(self.table)
            if data_version is None or (data_version.timestamp, data_version.counter) != (
                    version.timestamp, version.counter):
                topic_seq = 0
            page = {name: self.table[name] for name in names[topic_seq:topic_seq + count_max]}
            return (TopicConfigSerializeWrapper(page, DataVersion(version.timestamp,
                                                                  version.counter)),
                    len(names))

    def _bump(self) -> None:
        self.data_version = DataVersion(int(time.time() * 1000), self.data_version.counter + 1)

    def _changed(self, topic: str) -> None:
        self._bump()
        self.file.mark(topic)
        self.file.save()
        if self._on_change is not None:
            self._on_change(topic)

    # -- queries --------------------------------------------------------------------------------
    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def topics(self) -> list[str]:
        return sorted(self.table)

    # -- changes --------------------------------------------------------------------------------
    def update(self, tc: TopicConfig, *, quota: bool = False) -> None:
        """Create or replace a topic (UPDATE_AND_CREATE_TOPIC, and the broker's own topics).
        ``quota``: a topic a client asks for (an admin's or a send's) is not created past
        ``topics_max``; the broker's own always are.

        Raises:
            BrokerError: INVALID_PARAMETER when ``tc`` cannot be stored (check_topic_config);
                LIMIT_EXCEEDED for a new topic past ``topics_max``; nothing changes then.
        """
        reason = check_topic_config(tc)
        if reason is not None:
            raise BrokerError(ResponseCode.INVALID_PARAMETER, f"topic config refused: {reason}")
        with self._lock:
            old = self.table.get(tc.topic_name)
            if old is None and quota and len(self.table) >= self.config.topics_max:
                self._refuse(tc.topic_name, len(self.table))
            self.table[tc.topic_name] = tc
            if old is None:
                self._sorted_names = None
        log.info("topic %s topic=%s queues=%d/%d perm=%d", "updated" if old else "created",
                 tc.topic_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm)
        self._changed(tc.topic_name)

    def _refuse(self, topic: str, held: int) -> None:
        self._counters.hit("topics_max")
        self._limit_log.warning("topics_max", "topic not created topic=%s: %d topics held, "
                                "topics_max = %d", topic, held, self.config.topics_max)
        raise BrokerError(ResponseCode.LIMIT_EXCEEDED, (
            f"topic[{topic}] not created: the broker holds {held} topics, topics_max = "
            f"{self.config.topics_max} (delete unused topics or raise topics_max)"))

    def delete(self, topic: str) -> bool:
        with self._lock:
            removed = self.table.pop(topic, None)
            if removed is not None:
                self._sorted_names = None
        if removed is None:
            return False
        log.info("topic deleted topic=%s", topic)
        self._changed(topic)
        return True

    def replace_from_master(self, wrapper: TopicConfigSerializeWrapper) -> bool:
        """A slave's copy of its master's topics (GET_ALL_TOPIC_CONFIG): the whole table,
        unless the master's data version is the one held; False when nothing changed. A config
        this broker cannot hold is left out (logged)."""
        version = wrapper.data_version
        if (version.timestamp, version.counter) == (self.data_version.timestamp,
                                                    self.data_version.counter):
            return False
        table: dict[str, TopicConfig] = {}
        for name, tc in wrapper.topic_config_table.items():
            reason = check_topic_config(tc)
            if reason is not None or name != tc.topic_name:
                log.warning("topic from the master left out topic=%s: %s", name, reason)
                continue
            table[name] = tc
        with self._lock:
            changed = [name for name in table.keys() | self.table.keys()
                       if table.get(name) != self.table.get(name)]
            self.table = table
            self._sorted_names = None
            self.data_version = DataVersion(version.timestamp, version.counter)
        self.file.mark_many((name, 0) for name in changed)
        self.file.touch()  # the version, even when no row differs
        self.file.save()  # the changed rows only, and the version
        log.info("topics copied from the master count=%d version=%d", len(table), version.counter)
        return True

    def apply_from_master(self, name: str, tc: TopicConfig | None, version: DataVersion) -> None:
        """A slave applies one change its master made (broker/metadata_log.py): ``tc`` replaces
        the topic (None removes it) and the table takes the master's data version, so that the
        next full copy (replace_from_master) finds it equal and copies nothing. Applying the
        same change twice leaves the same table (idempotent).

        Raises:
            BrokerError: INVALID_PARAMETER when ``tc`` cannot be stored; nothing changes then.
        """
        if tc is not None:
            reason = check_topic_config(tc)
            if reason is None and tc.topic_name != name:
                reason = f"config of {tc.topic_name!r} under the name {name!r}"
            if reason is not None:
                raise BrokerError(ResponseCode.INVALID_PARAMETER, f"topic config refused: {reason}")
        with self._lock:
            if tc is None:
                self.table.pop(name, None)
            else:
                self.table[name] = tc
            self._sorted_names = None
            self.data_version = DataVersion(version.timestamp, version.counter)
        self.file.mark(name)
        self.file.save()
        if self._on_change is not None:
            self._on_change(name)

    def create_in_send(
        self, topic: str, default_topic: str, client_queue_nums: int, topic_sys_flag: int
    ) -> TopicConfig | None:
        """The topic config for a send to an unknown topic, created from ``default_topic`` when
        that one may be inherited; None when the broker refuses to create it."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        parent = self.table.get(default_topic)
        if parent is None or not parent.perm & Perm.INHERIT:
            log.warning("auto-create refused topic=%s default_topic=%s (absent or not inheritable)",
                        topic, default_topic)
            return None
        nums = max(1, min(client_queue_nums, parent.write_queue_nums, QUEUE_NUMS_MAX))
        tc = TopicConfig(
            topic, nums, nums, parent.perm & ~int(Perm.INHERIT),
            parent.topic_filter_type, topic_sys_flag,
        )
        self.update(tc, quota=True)  # BrokerError LIMIT_EXCEEDED past topics_max
        return tc

    def create_system_topic(self, topic: str, queue_nums: int, perm: int = _RW,
                            topic_sys_flag: int = 0) -> TopicConfig:
        """A topic the broker itself needs (retry topics, schedule/transaction topics)."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        tc = TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=topic_sys_flag)
        self.update(tc)
        return tc


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if not isinstance(value, str):
        raise StoreError(f"a metadata row holds {type(value).__name__}, not JSON text")
    return value


def _config_text(tc: TopicConfig | None) -> str | None:
    return None if tc is None else tc.to_json().decode()


def _version(value: object, where: str) -> DataVersion:
    """A data version row (``{"timestamp": .., "counter": ..}``)."""
    try:
        return DataVersion.from_json(_text(value))
    except RemoteProtocolError as e:
        raise StoreError(f"{where}: data version: {e}") from None
