"""The broker's Prometheus families, built at scrape time (RocketMQ 5's names and labels).

Every family starts with the labels ``cluster`` (the broker's cluster name), ``node_type``
(``broker``) and ``node_id`` (the broker name), as RocketMQ 5's broker labels them.

================================================  ==============================================
family                                            labels after the identity
================================================  ==============================================
rocketmq_messages_in_total, _throughput_in_total  topic, message_type, is_system
rocketmq_message_size (bytes, histogram)          topic, message_type, is_system
rocketmq_messages_out_total, _throughput_out_     topic, consumer_group, is_retry, is_system
rocketmq_consumer_lag_messages / _lag_latency,    consumer_group, topic, is_retry, is_system
  _inflight_messages, _queueing_latency,
  _ready_messages (latencies in ms)
rocketmq_producer_connections                     language, version, protocol_type
rocketmq_consumer_connections                     consumer_group, language, version,
                                                  consume_mode, protocol_type, is_system
rocketmq_rpc_latency (ms, histogram, sampled)     protocol_type, request_code, response_code
rocketmq_storage_size, _flush_behind_bytes,       storage_type, storage_medium
  _dispatch_behind_bytes, _message_reserve_time
rocketmq_broker_permission                        (none)
orbitmq_group_commit_sync_latency (ms, hist.)     (none): one sync of the commit log that
                                                  SYNC_FLUSH sends waited for
orbitmq_send_requests_total                       path: ``encoded`` (the one-step stored-form
                                                  path) or ``general`` (declined by it)
orbitmq_pull_requests_total                       result: ``found`` or ``empty``
orbitmq_native_speedups                           (none): 1 when the C speedups are loaded
orbitmq_long_poll_held_pulls                      (none)
orbitmq_store_corrupt_messages_total              role: ``master`` or ``slave`` (the store's
                                                  role when a read or recovery met it)
orbitmq_replication_lag_bytes, _lag_latency (ms)  slave (its HA connection's address): on a
                                                  master, what each slave does not hold yet
orbitmq_replication_in_sync_slaves                (none): slaves within ha_max_gap_not_in_sync
orbitmq_replication_master_connected              (none): a slave's HA connection (1 or 0)
rocketmq_authentication_failures_total,           reason: why access control refused
  rocketmq_authorization_denials_total              (the audit log's counters)
================================================  ==============================================

Lag follows RocketMQ 5: per group and topic, ``lag`` = stored - committed, ``inflight`` =
pulled - committed, ``ready`` = stored - pulled (pulled = the next offset of the group's last
pull answered by this broker since it started; the committed offset where none), and the
latencies are the age of the oldest unconsumed (lag) or unpulled (queueing) message.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from orbitmq.broker.native import NATIVE
from orbitmq.broker.observability.broker_stats import FIFO, NORMAL, BrokerStats
from orbitmq.broker.tables.client_manager import ClientManager
from orbitmq.broker.tables.consumer_offset_manager import (
    TOPIC_GROUP_SEPARATOR,
    ConsumerOffsetManager,
)
from orbitmq.broker.tables.topic_config_manager import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    TopicConfigManager,
)
from orbitmq.config import BrokerConfig
from orbitmq.metrics.families import (
    PROTOCOL_REMOTING,
    Families,
    LimitedServer,
    access_families,
    limit_families,
    rpc_latency_family,
)
from orbitmq.metrics.rpc import RpcLatency
from orbitmq.protocol.bodies import ConsumeType
from orbitmq.protocol.codes import LanguageCode
from orbitmq.protocol.topics import SYSTEM_GROUP_PREFIX as RMQ_SYSTEM_GROUP_PREFIX
from orbitmq.protocol.topics import SYSTEM_TOPIC_PREFIXES
from orbitmq.security.audit import AuditLog
from orbitmq.store.message_store import MessageStore

__all__ = ["BrokerMetricsCollector", "is_system_topic", "is_system_group"]

SYSTEM_GROUP_PREFIX = RMQ_SYSTEM_GROUP_PREFIX.lower()  # compared lower-case
_STORAGE = ("local", "disk")  # storage_type, storage_medium: RocketMQ's values for a local store


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIXES)


def is_system_group(group: str) -> bool:
    return group.lower().startswith(SYSTEM_GROUP_PREFIX)


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _language(code: int) -> str:
    try:
        return LanguageCode(code).name.lower()
    except ValueError:
        return LanguageCode.OTHER.name.lower()


class BrokerMetricsCollector:
    """Collects the families above from the broker's parts (explicit, so that the collector
    survives the processors' refactoring: it needs the tables, not the controller)."""

    def __init__(self, config: BrokerConfig, stats: BrokerStats, store: MessageStore,
                 topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 clients: ClientManager, held_pulls: Callable[[], int],
                 rpc: RpcLatency, replication: Any = None, audit: AuditLog | None = None,
                 limits: LimitedServer | None = None) -> None:
        self.config = config
        self.stats = stats
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.clients = clients
        self.held_pulls = held_pulls
        self.rpc = rpc
        self.replication = replication  # ReplicationService (ha_status), None: no families
        self.audit = audit  # the access guard's counters, None: no families
        self.limits = limits  # the remoting server's limits (orbitmq_limit_hits_total...)
        self.families = Families({"cluster": config.broker_cluster_name, "node_type": "broker",
                                  "node_id": config.broker_name})

    def collect(self) -> Iterator[Any]:
        yield from self._traffic_in()
        yield from self._traffic_out()
        yield from self._lag()
        yield from self._connections()
        yield rpc_latency_family(self.families, self.rpc)
        yield from self._storage()
        yield from self._orbitmq()
        yield from self._replication()
        if self.audit is not None:
            yield from access_families(self.families, self.audit)
        if self.limits is not None:
            yield from limit_families(self.families, self.limits)

    # -- traffic -----------------------------------------------------------------------------
    def _traffic_in(self) -> Iterator[Any]:
        f = self.families
        labels = ["topic", "message_type", "is_system"]
        msgs = f.counter("rocketmq_messages_in_total", "messages stored", labels)
        size = f.counter("rocketmq_throughput_in_total", "bytes of messages stored", labels)
        hist = f.histogram("rocketmq_message_size", "size of a stored message in bytes", labels)
        for mtype, table in self.stats.put.items():
            for topic, c in list(table.items()):
                tc = self.topics.get(topic)
                shown = FIFO if mtype == NORMAL and tc is not None and tc.order else mtype
                values = [topic, shown, _flag(is_system_topic(topic))]
                f.add(msgs, values, c.msgs)
                f.add(size, values, c.size)
                f.add_buckets(hist, values, c.sizes)
        yield from (msgs, size, hist)

    def _traffic_out(self) -> Iterator[Any]:
        f = self.families
        labels = ["topic", "consumer_group", "is_retry", "is_system"]
        msgs = f.counter("rocketmq_messages_out_total", "messages sent to consumers", labels)
        size = f.counter("rocketmq_throughput_out_total", "bytes sent to consumers", labels)
        for (topic, group), c in list(self.stats.get.items()):
            values = [topic, group, _flag(topic.startswith(RETRY_GROUP_TOPIC_PREFIX)),
                      _flag(is_system_topic(topic) or is_system_group(group))]
            f.add(msgs, values, c.msgs)
            f.add(size, values, c.size)
        yield from (msgs, size)

    # -- lag ---------------------------------------------------------------------------------
    def _lag(self) -> Iterator[Any]:
        f = self.families
        labels = ["consumer_group", "topic", "is_retry", "is_system"]
        lag = f.gauge("rocketmq_consumer_lag_messages", "messages stored, not yet committed",
                      labels)
        lag_ms = f.gauge("rocketmq_consumer_lag_latency",
                         "age in ms of the oldest message not yet committed", labels)
        inflight = f.gauge("rocketmq_consumer_inflight_messages",
                           "messages pulled, not yet committed", labels)
        ready = f.gauge("rocketmq_consumer_ready_messages", "messages stored, not yet pulled",
                        labels)
        queueing = f.gauge("rocketmq_consumer_queueing_latency",
                           "age in ms of the oldest message not yet pulled", labels)
        now = int(time.time() * 1000)
        for key, queues in self.offsets.snapshot().items():
            topic, _, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
            if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
                continue
            figures = self._group_lag(group, topic, queues, now)
            values = [group, topic, _flag(topic.startswith(RETRY_GROUP_TOPIC_PREFIX)),
                      _flag(is_system_topic(topic) or is_system_group(group))]
            for family, value in zip((lag, lag_ms, inflight, ready, queueing), figures,
                                     strict=True):
                f.add(family, values, value)
        yield from (lag, lag_ms, inflight, ready, queueing)

    def _group_lag(self, group: str, topic: str, queues: dict[int, int],
                   now: int) -> tuple[int, int, int, int, int]:
        tc = self.topics.get(topic)
        queue_ids = set(queues) | set(range(tc.read_queue_nums if tc is not None else 0))
        store, pulled_at = self.store, self.stats.pull_offsets
        lag = inflight = ready = 0
        oldest_unconsumed = oldest_unpulled = 0
        for qid in queue_ids:
            stored = store.get_max_offset_in_queue(topic, qid)
            committed = max(queues.get(qid, 0), store.get_min_offset_in_queue(topic, qid))
            pulled = max(pulled_at.get((group, topic, qid), committed), committed)
            lag += max(0, stored - committed)
            inflight += max(0, pulled - committed)
            ready += max(0, stored - pulled)
            if stored > committed:
                ts = store.get_message_store_timestamp(topic, qid, committed)
                if ts > 0 and (not oldest_unconsumed or ts < oldest_unconsumed):
                    oldest_unconsumed = ts
            if stored > pulled:
                ts = store.get_message_store_timestamp(topic, qid, pulled)
                if ts > 0 and (not oldest_unpulled or ts < oldest_unpulled):
                    oldest_unpulled = ts
        return (lag, max(0, now - oldest_unconsumed) if oldest_unconsumed else 0, inflight,
                ready, max(0, now - oldest_unpulled) if oldest_unpulled else 0)

    # -- connections -------------------------------------------------------------------------
    def _connections(self) -> Iterator[Any]:
        f = self.families
        producers = f.gauge("rocketmq_producer_connections", "producer connections",
                            ["language", "version", "protocol_type"])
        counts: dict[tuple[str, ...], int] = {}
        for members in list(self.clients.producers.values()):
            for info in members.values():
                key: tuple[str, ...] = (_language(info.language), str(info.version),
                                        PROTOCOL_REMOTING)
                counts[key] = counts.get(key, 0) + 1
        for key, n in counts.items():
            f.add(producers, key, n)
        consumers = f.gauge("rocketmq_consumer_connections", "consumer connections",
                            ["consumer_group", "language", "version", "consume_mode",
                             "protocol_type", "is_system"])
        counts = {}
        for name, group in list(self.clients.consumers.items()):
            mode = "pull" if group.consume_type is ConsumeType.CONSUME_ACTIVELY else "push"
            for info in group.channels.values():
                key = (name, _language(info.language), str(info.version), mode,
                       PROTOCOL_REMOTING, _flag(is_system_group(name)))
                counts[key] = counts.get(key, 0) + 1
        for key, n in counts.items():
            f.add(consumers, key, n)
        yield from (producers, consumers)

    # -- storage and OrbitMQ's own -----------------------------------------------------------
    def _storage(self) -> Iterator[Any]:
        f, store = self.families, self.store
        labels = ["storage_type", "storage_medium"]
        size = f.gauge("rocketmq_storage_size", "bytes used on the store's file system", labels)
        try:
            st = os.statvfs(self.config.store.store_path)
            f.add(size, _STORAGE, (st.f_blocks - st.f_bfree) * st.f_frsize)
        except OSError:
            pass
        flush = f.gauge("rocketmq_storage_flush_behind_bytes", "bytes appended, not yet synced",
                        labels)
        f.add(flush, _STORAGE, max(0, store.max_physical_offset() - store.flushed_physical_offset()))
        dispatch = f.gauge("rocketmq_storage_dispatch_behind_bytes",
                           "bytes appended, not yet in the consume queues", labels)
        f.add(dispatch, _STORAGE, store.dispatch_behind_bytes())
        reserve = f.gauge("rocketmq_storage_message_reserve_time",
                          "age in ms of the oldest stored message", labels)
        if store.max_physical_offset() > store.min_physical_offset():
            oldest = store.commit_log.store_timestamp_at(store.min_physical_offset())
            if oldest > 0:
                f.add(reserve, _STORAGE, max(0, int(time.time() * 1000) - oldest))
        perm = f.gauge("rocketmq_broker_permission", "PermName bits of the broker (6 = rw)")
        f.add(perm, [], self.config.broker_permission)
        yield from (size, flush, dispatch, reserve, perm)

    def _orbitmq(self) -> Iterator[Any]:
        f, stats = self.families, self.stats
        sync = f.histogram("orbitmq_group_commit_sync_latency",
                           "ms of one commit log sync that SYNC_FLUSH sends waited for")
        f.add_buckets(sync, [], stats.flush_latency)
        sends = f.counter("orbitmq_send_requests_total", "send requests stored, by path",
                          ["path"])
        f.add(sends, ["encoded"], stats.encoded_sends)
        f.add(sends, ["general"], stats.general_sends)
        pulls = f.counter("orbitmq_pull_requests_total", "pulls answered", ["result"])
        f.add(pulls, ["found"], stats.get_found)
        f.add(pulls, ["empty"], stats.get_miss)
        native = f.gauge("orbitmq_native_speedups", "1 when the C speedups are in use")
        f.add(native, [], 1 if NATIVE is not None else 0)
        held = f.gauge("orbitmq_long_poll_held_pulls", "pulls held by long polling now")
        f.add(held, [], self.held_pulls())
        corrupt = f.counter("orbitmq_store_corrupt_messages_total",
                            "corrupt messages met in the store's own commit log (never served)",
                            ["role"])
        for role, count in self.store.corruption.counts.items():
            f.add(corrupt, [role], count)
        yield from (sync, sends, pulls, native, held, corrupt)

    def _replication(self) -> Iterator[Any]:
        if self.replication is None:
            return
        f = self.families
        status = self.replication.ha_status()
        lag = f.gauge("orbitmq_replication_lag_bytes",
                      "bytes of the master's commit log a slave does not hold yet", ["slave"])
        latency = f.gauge("orbitmq_replication_lag_latency",
                          "ms since the oldest message a slave does not hold was stored", ["slave"])
        for link in status["haConnectionInfo"]:
            f.add(lag, [link["addr"]], link["diff"])
            f.add(latency, [link["addr"]], link["lagMs"])
        in_sync = f.gauge("orbitmq_replication_in_sync_slaves",
                          "slaves within ha_max_gap_not_in_sync bytes of the master")
        f.add(in_sync, [], status["inSyncSlaveNums"])
        connected = f.gauge("orbitmq_replication_master_connected",
                            "1 while a slave's HA connection to its master is open")
        client = status["haClientRuntimeInfo"]
        f.add(connected, [], 1 if client and client.get("connected") else 0)
        yield from (lag, latency, in_sync, connected)
