"""Consumer group settings (RocketMQ's SubscriptionGroupConfig table).

Groups are created on first use when ``auto_create_subscription_group`` is on (the default), or by
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP. The table is persisted as ``STORE/config/subscriptionGroup.json``
in Java's shape: ``{"subscriptionGroupTable": {"group": {...}}, "dataVersion": {...}}``; a failed
write is logged and tried again (config_file.TableFile).

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

from orbitmq.broker.config_file import TableFile, config_path, read_json
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

    def __init__(self, config: BrokerConfig, counters: LimitCounters | None = None) -> None:
        """``counters``: where a refusal past ``groups_max`` is counted (the server's)."""
        self.config = config
        self._counters = counters if counters is not None else LimitCounters()
        self._limit_log = RateLimitedLog(log)
        self.path = config_path(config.store.store_path, "subscriptionGroup.json")
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion(int(time.time() * 1000), 0)
        self._lock = threading.Lock()
        self.file = TableFile(self.path, lambda: self.wrapper().to_json(), "subscription groups")

    def load(self) -> None:
        data = read_json(self.path)
        if data is None:
            return
        try:
            wrapper = SubscriptionGroupWrapper.from_dict(data)
        except RemoteProtocolError as e:
            raise StoreError(f"{self.path}: {e}") from None
        self.table.update(wrapper.subscription_group_table)
        self.data_version = wrapper.data_version

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
        self.file.mark_dirty()
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
            self.table = table
            self.data_version = DataVersion(version.timestamp, version.counter)
        self.file.mark_dirty()
        self.file.save()
        return True

    def delete(self, group: str) -> bool:
        with self._lock:
            removed = self.table.pop(group, None)
            if removed is not None:
                self.data_version = DataVersion(int(time.time() * 1000),
                                                self.data_version.counter + 1)
        if removed is not None:
            self.file.mark_dirty()
            self.file.save()
        return removed is not None
