"""Consumer group settings (RocketMQ's SubscriptionGroupConfig table).

Groups are created on first use when ``auto_create_subscription_group`` is on (the default), or by
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP. The table is persisted in the metadata store
(store/metadata_db.py, kind ``subscription_groups``: one row per group, its config as Java's
SubscriptionGroupConfig JSON; the data version in ``versions``), one small transaction per change;
a failed write is logged and tried again (tables/metadata_table.py). A ``subscriptionGroup.json``
left by an older broker (``{"subscriptionGroupTable": {"group": {...}}, "dataVersion": {...}}``)
is imported at the first start and renamed ``subscriptionGroup.json.migrated``.

A group name follows RocketMQ 5's rule for topics and groups (``^[%|a-zA-Z0-9_-]+$``), short enough
that its retry topic ``%RETRY%{group}`` is a legal topic: the name becomes part of a topic, of a
directory path under the store and of the offset table's keys, so a group that breaks any of them
is never created (:func:`validate_group`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

from orbitmq.broker.config_file import config_path
from orbitmq.broker.tables.metadata_table import MetadataTable, metadata_db_for, migrate_json
from orbitmq.broker.tables.topic_config_manager import (
    QUEUE_NUMS_MAX,
    RETRY_GROUP_TOPIC_PREFIX,
    TOPIC_MAX_LENGTH,
    validate_topic,
)
from orbitmq.config import BrokerConfig
from orbitmq.errors import BrokerError, RemoteProtocolError, StoreError
from orbitmq.protocol._lenient import U32, U64
from orbitmq.protocol.bodies import DataVersion, JsonBody
from orbitmq.protocol.codes import ResponseCode
from orbitmq.rate_limited_log import RateLimitedLog
from orbitmq.store.metadata_db import SUBSCRIPTION_GROUPS, VERSIONS, MetadataDB, Row
from orbitmq.transport.limits import LimitCounters

__all__ = [
    "SubscriptionGroupConfig",
    "SubscriptionGroupWrapper",
    "SubscriptionGroupManager",
    "validate_group",
    "GROUP_MAX_LENGTH",
]

log = logging.getLogger(__name__)

GROUP_MAX_LENGTH = TOPIC_MAX_LENGTH - len(RETRY_GROUP_TOPIC_PREFIX)  # %RETRY%{group} is a topic


def validate_group(group: str) -> str | None:
    """Why ``group`` cannot be a consumer group's name, or None when it can."""
    if len(group) > GROUP_MAX_LENGTH:
        return f"the group name is longer than {GROUP_MAX_LENGTH} characters"
    reason = validate_topic(group)
    return None if reason is None else reason.replace("topic", "group")


@dataclasses.dataclass(slots=True)
class SubscriptionGroupConfig(JsonBody):
    """One consumer group's settings; defaults are Java's."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: U32 = 1
    retry_max_times: U32 = 16
    broker_id: U64 = 0
    which_broker_when_consume_slowly: U64 = 1
    notify_consumer_ids_changed_enable: bool = True
    consume_message_orderly: bool = False  # RocketMQ 5: a FIFO group (POP receives in order)


@dataclasses.dataclass(slots=True)
class SubscriptionGroupWrapper(JsonBody):
    """The persisted table and the body of GET_ALL_SUBSCRIPTIONGROUP_CONFIG."""

    subscription_group_table: dict[str, SubscriptionGroupConfig] = dataclasses.field(
        default_factory=dict
    )
    data_version: DataVersion = dataclasses.field(default_factory=DataVersion)


class SubscriptionGroupManager:
    """Group name -> SubscriptionGroupConfig, auto-created on first sight when allowed."""

    def __init__(self, config: BrokerConfig, counters: LimitCounters | None = None,
                 db: MetadataDB | None = None) -> None:
        """``counters``: where a refusal past ``groups_max`` is counted (the server's); ``db``:
        the broker's metadata store (None: the store's own, for a manager built alone)."""
        self.config = config
        self._counters = counters if counters is not None else LimitCounters()
        self._limit_log = RateLimitedLog(log)
        self.path = config_path(config.store.store_path, "subscriptionGroup.json")
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion(int(time.time() * 1000), 0)
        self._lock = threading.Lock()
        self.db = db if db is not None else metadata_db_for(config)
        self.file = MetadataTable(self.db, "subscription groups", self._rows)

    def load(self) -> None:
        """Read the groups from the metadata store, importing subscriptionGroup.json once.

        Raises:
            StoreError: the store cannot be read, or holds or imports a config it refuses.
        """
        self.db.open()
        for name, _sub, value in self.db.rows(SUBSCRIPTION_GROUPS):
            try:
                text = value.decode() if isinstance(value, bytes) else value
                if not isinstance(text, str):
                    raise RemoteProtocolError(f"a row holds {type(value).__name__}, not JSON")
                self.table[name] = SubscriptionGroupConfig.from_json(text)
            except RemoteProtocolError as e:
                raise StoreError(f"{self.db.path}: group {name}: {e}") from None
        for key, _sub, value in self.db.rows(VERSIONS):
            if key == SUBSCRIPTION_GROUPS and isinstance(value, (str, bytes)):
                try:
                    self.data_version = DataVersion.from_json(value)
                except RemoteProtocolError as e:
                    raise StoreError(f"{self.db.path}: groups' data version: {e}") from None
        migrate_json(self.path, self.file, self._import)

    def _import(self, data: object) -> None:
        """subscriptionGroup.json's content into the table, every group marked to be written."""
        try:
            wrapper = SubscriptionGroupWrapper.from_dict(data)
        except RemoteProtocolError as e:
            raise StoreError(f"{self.path}: {e}") from None
        self.table.update(wrapper.subscription_group_table)
        self.data_version = wrapper.data_version
        self.file.mark_many((name, 0) for name in wrapper.subscription_group_table)

    def _rows(self, keys: list[tuple[str, int]]) -> list[Row]:
        """The rows of the changed groups as they are now, and the data version."""
        with self._lock:
            rows = []
            for name, _ in keys:
                cfg = self.table.get(name)
                rows.append(Row(SUBSCRIPTION_GROUPS, name, 0,
                                None if cfg is None else cfg.to_json().decode()))
            version = self.data_version.to_json().decode()
        rows.append(Row(VERSIONS, SUBSCRIPTION_GROUPS, 0, version))
        return rows

    def wrapper(self) -> SubscriptionGroupWrapper:
        with self._lock:
            return SubscriptionGroupWrapper(dict(self.table), self.data_version)

    def persist(self, *, force: bool = True) -> bool:
        """Write the table (by default even unchanged); False when it failed (logged, retried
        by the next call)."""
        return self.file.save(force=force)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created (and persisted) on first use when auto-creation is on.

        Raises:
            BrokerError: INVALID_PARAMETER for a name that cannot be a group (never created);
                LIMIT_EXCEEDED past ``groups_max``.
        """
        found = self.table.get(group)
        if found is not None or not self.config.auto_create_subscription_group:
            return found
        created = SubscriptionGroupConfig(group)
        self.update(created, quota=True)
        log.info("subscription group auto-created group=%s", group)
        return created

    def update(self, cfg: SubscriptionGroupConfig, *, quota: bool = False) -> None:
        """Create or replace a group; with ``quota`` (a client's request) a new group is not
        created past ``groups_max``.

        Raises:
            BrokerError: INVALID_PARAMETER for an illegal name or a retry queue count over
                QUEUE_NUMS_MAX, LIMIT_EXCEEDED past ``groups_max``: refused before anything
                changes.
        """
        reason = validate_group(cfg.group_name)
        if reason is None and cfg.retry_queue_nums > QUEUE_NUMS_MAX:
            reason = f"retryQueueNums {cfg.retry_queue_nums} exceeds {QUEUE_NUMS_MAX}"
        if reason is not None:
            raise BrokerError(ResponseCode.INVALID_PARAMETER, f"subscription group refused: {reason}")
        with self._lock:
            held = len(self.table)
            if quota and cfg.group_name not in self.table and held >= self.config.groups_max:
                self._counters.hit("groups_max")
                self._limit_log.warning("groups_max", "subscription group not created group=%s: "
                                        "%d groups held, groups_max = %d", cfg.group_name, held,
                                        self.config.groups_max)
                raise BrokerError(ResponseCode.LIMIT_EXCEEDED, (
                    f"subscription group[{cfg.group_name}] not created: the broker holds {held} "
                    f"groups, groups_max = {self.config.groups_max} (delete unused groups or "
                    "raise groups_max)"))
            self.table[cfg.group_name] = cfg
            self.data_version = DataVersion(int(time.time() * 1000), self.data_version.counter + 1)
        self.file.mark(cfg.group_name)
        self.file.save()

    def replace_from_master(self, wrapper: SubscriptionGroupWrapper) -> bool:
        """A slave's copy of its master's groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG): the whole
        table, unless the data version is the one held; False when nothing changed."""
        version = wrapper.data_version
        if (version.timestamp, version.counter) == (self.data_version.timestamp,
                                                    self.data_version.counter):
            return False
        table = {name: cfg for name, cfg in wrapper.subscription_group_table.items()
                 if validate_group(name) is None and cfg.group_name == name}
        with self._lock:
            changed = [name for name in table.keys() | self.table.keys()
                       if table.get(name) != self.table.get(name)]
            self.table = table
            self.data_version = DataVersion(version.timestamp, version.counter)
        self.file.mark_many((name, 0) for name in changed)
        self.file.touch()  # the version, even when no row differs
        self.file.save()
        return True

    def apply_from_master(self, name: str, cfg: SubscriptionGroupConfig | None,
                          version: DataVersion) -> None:
        """A slave applies one change its master made (broker/metadata_log.py): ``cfg``
        replaces the group (None removes it) and the table takes the master's data version
        (the next full copy then finds it equal). Idempotent.

        Raises:
            BrokerError: INVALID_PARAMETER for a group this broker cannot hold; nothing changes.
        """
        reason = validate_group(name)
        if reason is None and cfg is not None:
            if cfg.group_name != name:
                reason = f"config of {cfg.group_name!r} under the name {name!r}"
            elif cfg.retry_queue_nums > QUEUE_NUMS_MAX:
                reason = f"retryQueueNums {cfg.retry_queue_nums} exceeds {QUEUE_NUMS_MAX}"
        if reason is not None:
            raise BrokerError(ResponseCode.INVALID_PARAMETER, f"subscription group refused: {reason}")
        with self._lock:
            if cfg is None:
                self.table.pop(name, None)
            else:
                self.table[name] = cfg
            self.data_version = DataVersion(version.timestamp, version.counter)
        self.file.mark(name)
        self.file.save()

    def delete(self, group: str) -> bool:
        with self._lock:
            removed = self.table.pop(group, None)
            if removed is not None:
                self.data_version = DataVersion(int(time.time() * 1000),
                                                self.data_version.counter + 1)
        if removed is not None:
            self.file.mark(group)
            self.file.save()
        return removed is not None
