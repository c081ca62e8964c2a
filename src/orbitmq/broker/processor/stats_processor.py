"""What a broker says about its own activity: GET_BROKER_RUNTIME_INFO (28),
VIEW_BROKER_STATS_DATA (315) and GET_BROKER_CONSUME_STATS (317), with RocketMQ's body shapes.

GET_BROKER_RUNTIME_INFO answers Java's KVTable, ``{"table": {name: text}}``, every value a
string as RocketMQ sends it. The keys RocketMQ's tools read are there: ``brokerVersionDesc``,
``bootTimestamp``, ``runtime`` (``[ 0 days, 1 hours, 2 minutes, 3 seconds ]``), ``putTps``,
``getFoundTps``, ``getMissTps``, ``getTotalTps`` and ``getTransferedTps`` (each three rates per
second separated by spaces: over the last 10 s, 1 min and 10 min, or since the broker started
when it is younger), ``msgPutTotalTodayNow`` / ``TodayMorning`` / ``YesterdayMorning`` and the
``msgGet...`` three (messages stored and sent to consumers since the broker started, and at the
last two local midnights), ``putMessageTimesTotal``, ``putMessageSizeTotal``,
``putMessageAverageSize``, ``commitLogMinOffset``, ``commitLogMaxOffset``, ``commitLogDiskRatio``,
``consumeQueueDiskRatio``, ``commitLogDirCapacity``, ``dispatchBehindBytes``,
``remainHowManyDataToFlush``, ``earliestMessageTimeStamp``, ``pageCacheLockTimeMills``, the
thread-pool queue sizes (0: OrbitMQ has no such queues), plus OrbitMQ's own ``brokerName``,
``brokerAddr``, ``flushDiskType``, ``topicCount``, ``consumerGroupCount``, ``producerGroupCount``
and ``pullHeldCount``, and replication's (RocketMQ 4.x has none; RocketMQ 5 answers them with
GET_BROKER_HA_STATUS, which OrbitMQ serves too): ``brokerRole``, ``brokerId``; on a master
``haServerAddr``, ``haConnectionCount``, ``inSyncSlaveNums``; on a slave ``haMasterAddr``,
``masterAddr``, ``haConnected``, ``haClientAddr``, ``haRefused``, ``slaveSyncRounds``.

VIEW_BROKER_STATS_DATA (``statsName``, ``statsKey``) answers Java's BrokerStatsData,
``{"statsMinute": {"sum", "tps", "avgpt"}, "statsHour": {...}, "statsDay": {...}}``: the
counter's growth over the last minute, hour and day, its rate per second and its average per
request. Names: TOPIC_PUT_NUMS / TOPIC_PUT_SIZE (key: topic), GROUP_GET_NUMS / GROUP_GET_SIZE
(key: ``topic@group``), BROKER_PUT_NUMS / BROKER_GET_NUMS (key: the cluster name). A key that
never counted answers zeros; an unknown name INVALID_PARAMETER (RocketMQ answers SYSTEM_ERROR for
both).

GET_BROKER_CONSUME_STATS (``isOrder``) answers Java's ConsumeStatsList, ``{"consumeStatsList":
[{group: [ConsumeStats, ...]}, ...], "brokerAddr", "totalDiff", "totalInflightDiff"}``, one
ConsumeStats per topic the group committed offsets on (orderly topics only with ``isOrder``);
ConsumeStats is GET_CONSUME_STATS's shape (see admin_processor) with RocketMQ 5's ``pullOffset``
in each queue's entry.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import orjson

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.observability.broker_stats import STATS_NAMES, BrokerStats
from orbitmq.broker.processor.admin_processor import VERSION_DESC, message_queue_key
from orbitmq.broker.tables.consumer_offset_manager import ConsumerOffsetManager
from orbitmq.protocol.admin_headers import (
    GetConsumeStatsInBrokerHeader,
    ViewBrokerStatsDataRequestHeader,
)
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.store.message_store import MessageStore
from orbitmq.transport.connection import RemotingConnection

__all__ = ["StatsProcessor", "format_runtime", "queue_consume_stats"]

_DAY_S, _HOUR_S = 86_400, 3_600


def format_runtime(ms: int) -> str:
    """RocketMQ's ``runtime`` text: ``[ 0 days, 1 hours, 2 minutes, 3 seconds ]``."""
    s = max(0, ms) // 1000
    return (f"[ {s // _DAY_S} days, {s % _DAY_S // _HOUR_S} hours, {s % _HOUR_S // 60} minutes, "
            f"{s % 60} seconds ]")


def _tps(rates: tuple[float, float, float]) -> str:
    return " ".join(f"{r:.2f}" for r in rates)


def _human_bytes(n: int) -> str:
    """Bytes as RocketMQ's humanReadableByteCount (SI units) prints them: ``1.2 GB``."""
    if n < 1000:
        return f"{n} B"
    exp = 0
    value = float(n)
    while value >= 1000 and exp < 6:
        value /= 1000
        exp += 1
    return f"{value:.1f} {'kMGTPE'[exp - 1]}B"


def queue_consume_stats(store: MessageStore, offsets: ConsumerOffsetManager, stats: BrokerStats,
                        broker_name: str, group: str, topic: str,
                        queue_nums: int) -> dict[str, Any]:
    """One ConsumeStats body (``offsetTable`` keyed by MessageQueue JSON, ``consumeTps``)."""
    table: dict[str, Any] = {}
    for qid in range(queue_nums):
        consumer = max(offsets.query(group, topic, qid), 0)
        last = store.get_message_store_timestamp(topic, qid, consumer - 1) if consumer > 0 else 0
        table[message_queue_key(topic, broker_name, qid)] = {
            "brokerOffset": max(store.get_max_offset_in_queue(topic, qid), 0),
            "consumerOffset": consumer,
            "pullOffset": max(stats.pull_offsets.get((group, topic, qid), consumer), consumer),
            "lastTimestamp": max(last, 0),
        }
    minute = stats.window("GROUP_GET_NUMS", f"{topic}@{group}")[0]
    return {"consumeTps": minute.tps, "offsetTable": table}


class StatsProcessor:
    """Runtime info, stats items and every group's consume stats.

    Args:
        ctx: the broker's context (settings, address, stats, store, tables, clients).
        held_pulls: how many pulls long polling holds now.
        replication_info: the replication keys of the runtime info (ReplicationService).
    """

    def __init__(self, ctx: BrokerContext, held_pulls: Callable[[], int],
                 replication_info: Callable[[], dict[str, str]] | None = None) -> None:
        self.ctx = ctx
        self.replication_info = replication_info
        self.config = ctx.config
        self.stats = ctx.stats
        self.store = ctx.store
        self.topics = ctx.topics
        self.offsets = ctx.offsets
        self.sub_groups = ctx.sub_groups
        self.clients = ctx.clients
        self.held_pulls = held_pulls

    # -- runtime info ------------------------------------------------------------------------
    def runtime_info(self) -> dict[str, str]:
        """The KVTable of GET_BROKER_RUNTIME_INFO (see the module docstring)."""
        stats, store, cfg = self.stats, self.store, self.config
        now = int(time.time() * 1000)
        boot = self.ctx.host.boot_timestamp_ms
        flushed_behind = max(0, store.max_physical_offset() - store.flushed_physical_offset())
        table = {
            "brokerVersionDesc": VERSION_DESC,
            "brokerName": cfg.broker_name,
            "brokerAddr": self.ctx.host.address,
            "bootTimestamp": str(boot),
            "runtime": format_runtime(now - boot),
            "putTps": _tps(stats.rates(1)),
            "getTransferedTps": _tps(stats.rates(2)),
            "getFoundTps": _tps(stats.rates(3)),
            "getMissTps": _tps(stats.rates(4)),
            "getTotalTps": _tps(tuple(a + b for a, b in zip(stats.rates(3), stats.rates(4),
                                                            strict=True))),  # type: ignore[arg-type]
            "msgPutTotalTodayNow": str(stats.put_msgs),
            "msgPutTotalTodayMorning": str(stats.put_today_morning),
            "msgPutTotalYesterdayMorning": str(stats.put_yesterday_morning),
            "msgGetTotalTodayNow": str(stats.get_msgs),
            "msgGetTotalTodayMorning": str(stats.get_today_morning),
            "msgGetTotalYesterdayMorning": str(stats.get_yesterday_morning),
            "putMessageTimesTotal": str(stats.put_times),
            "putMessageSizeTotal": str(stats.put_bytes),
            "putMessageAverageSize": str(stats.put_bytes / max(stats.put_msgs, 1)),
            "commitLogMinOffset": str(store.min_physical_offset()),
            "commitLogMaxOffset": str(store.max_physical_offset()),
            "dispatchBehindBytes": str(store.dispatch_behind_bytes()),
            "remainHowManyDataToFlush": _human_bytes(flushed_behind),
            "earliestMessageTimeStamp": str(self._earliest()),
            "pageCacheLockTimeMills": "0",
            "sendThreadPoolQueueSize": "0", "sendThreadPoolQueueCapacity": "0",
            "pullThreadPoolQueueSize": "0", "pullThreadPoolQueueCapacity": "0",
            "queryThreadPoolQueueSize": "0", "queryThreadPoolQueueCapacity": "0",
            "flushDiskType": str(cfg.store.flush_disk_type),
            "topicCount": str(len(self.topics.table)),
            "consumerGroupCount": str(len(self.clients.consumers)),
            "producerGroupCount": str(len(self.clients.producers)),
            "pullHeldCount": str(self.held_pulls()),
        }
        table.update(self._disk())
        if self.replication_info is not None:
            table.update(self.replication_info())
        return table

    def _earliest(self) -> int:
        store = self.store
        if store.max_physical_offset() <= store.min_physical_offset():
            return 0
        return max(store.commit_log.store_timestamp_at(store.min_physical_offset()), 0)

    def _disk(self) -> dict[str, str]:
        """The disk keys: RocketMQ's used ratios (0..1 as text) and capacity line."""
        try:
            st = os.statvfs(self.config.store.store_path)
        except OSError:
            return {}
        used, usable = st.f_blocks - st.f_bfree, st.f_blocks - st.f_bfree + st.f_bavail
        ratio = str(used / usable if usable > 0 else 0.0)
        return {"commitLogDiskRatio": ratio, "consumeQueueDiskRatio": ratio,
                "commitLogDirCapacity": f"Total : {_human_bytes(st.f_blocks * st.f_frsize)}, "
                                        f"Free : {_human_bytes(st.f_bavail * st.f_frsize)}."}

    def get_broker_runtime_info(self, cmd: RemotingCommand,
                                conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"table": self.runtime_info()}))

    # -- stats items -------------------------------------------------------------------------
    def view_broker_stats_data(self, cmd: RemotingCommand,
                               conn: RemotingConnection) -> RemotingCommand:
        h = ViewBrokerStatsDataRequestHeader.from_ext_fields(cmd.ext_fields)
        if h.stats_name not in STATS_NAMES:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                f"statsName {h.stats_name!r} is not one of {', '.join(STATS_NAMES)}")
        minute, hour, day = self.stats.window(h.stats_name, h.stats_key)
        body = {name: {"sum": w.sum, "tps": w.tps, "avgpt": w.avgpt}
                for name, w in (("statsMinute", minute), ("statsHour", hour), ("statsDay", day))}
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    # -- every group's consume stats ---------------------------------------------------------
    def get_broker_consume_stats(self, cmd: RemotingCommand,
                                 conn: RemotingConnection) -> RemotingCommand:
        h = GetConsumeStatsInBrokerHeader.from_ext_fields(cmd.ext_fields)
        groups = sorted(set(self.sub_groups.table) | {
            k.rpartition("@")[2] for k in list(self.offsets.table)})
        listing: list[dict[str, list[dict[str, Any]]]] = []
        total_diff = total_inflight = 0
        for group in groups:
            per_topic = []
            for topic in self.offsets.topics_of_group(group):
                tc = self.topics.get(topic)
                if tc is None or (h.is_order and not tc.order):
                    continue
                entry = queue_consume_stats(self.store, self.offsets, self.stats,
                                            self.config.broker_name, group, topic,
                                            tc.write_queue_nums)
                for row in entry["offsetTable"].values():
                    total_diff += max(0, row["brokerOffset"] - row["consumerOffset"])
                    total_inflight += max(0, row["pullOffset"] - row["consumerOffset"])
                per_topic.append(entry)
            if per_topic:
                listing.append({group: per_topic})
        body = {"consumeStatsList": listing, "brokerAddr": self.ctx.host.address,
                "totalDiff": total_diff, "totalInflightDiff": total_inflight}
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))
