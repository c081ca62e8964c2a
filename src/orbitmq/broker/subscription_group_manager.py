"""Consumer group settings (RocketMQ's SubscriptionGroupConfig table).

Groups are created on first use when ``auto_create_subscription_group`` is on (the default), or by
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP. The table is persisted as ``STORE/config/subscriptionGroup.json``
in Java's shape: ``{"subscriptionGroupTable": {"group": {...}}, "dataVersion": {...}}``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

from orbitmq.broker.config_file import config_path, read_json, write_atomic
from orbitmq.config import BrokerConfig
from orbitmq.errors import RemoteProtocolError, StoreError
from orbitmq.protocol.bodies import DataVersion, JsonBody

__all__ = ["SubscriptionGroupConfig", "SubscriptionGroupWrapper", "SubscriptionGroupManager"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(slots=True)
class SubscriptionGroupConfig(JsonBody):
    """One consumer group's settings; defaults are Java's."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True


@dataclasses.dataclass(slots=True)
class SubscriptionGroupWrapper(JsonBody):
    """The persisted table and the body of GET_ALL_SUBSCRIPTIONGROUP_CONFIG."""

    subscription_group_table: dict[str, SubscriptionGroupConfig] = dataclasses.field(
        default_factory=dict
    )
    data_version: DataVersion = dataclasses.field(default_factory=DataVersion)


class SubscriptionGroupManager:
    """Group name -> SubscriptionGroupConfig, auto-created on first sight when allowed."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.path = config_path(config.store.store_path, "subscriptionGroup.json")
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion(int(time.time() * 1000), 0)
        self._lock = threading.Lock()

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

    def persist(self) -> None:
        write_atomic(self.path, self.wrapper().to_json())

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created (and persisted) on first use when auto-creation is on."""
        found = self.table.get(group)
        if found is not None or not self.config.auto_create_subscription_group:
            return found
        created = SubscriptionGroupConfig(group)
        self.update(created)
        log.info("subscription group auto-created group=%s", group)
        return created

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        with self._lock:
            self.table[cfg.group_name] = cfg
            self.data_version = DataVersion(int(time.time() * 1000), self.data_version.counter + 1)
        self.persist()

    def delete(self, group: str) -> bool:
        with self._lock:
            removed = self.table.pop(group, None)
            if removed is not None:
                self.data_version = DataVersion(int(time.time() * 1000),
                                                self.data_version.counter + 1)
        if removed is not None:
            self.persist()
        return removed is not None
