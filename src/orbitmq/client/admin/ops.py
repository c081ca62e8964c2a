"""The operations calls of the admin client: broker status, settings and stats,
connections, group offsets and raw queue reads: what RocketMQ's mqadmin, dashboard and exporter
ask a cluster, and what the ``orbitmq`` CLI's operations commands print.

:class:`OpsAdminMixin` adds the coroutines to :class:`~orbitmq.client.AsyncAdmin` and
:class:`BlockingOpsAdminMixin` their blocking twins to :class:`~orbitmq.client.Admin`.
Calls that take ``broker`` accept a broker name (its master is asked) or a ``host:port``.
Answers are parsed in :mod:`orbitmq.client.admin.ops_models`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from orbitmq.client.admin import queues
from orbitmq.client.admin.ops_models import (
    BrokerConsumeStats,
    BrokerStatsData,
    ClusterBroker,
    Connection,
    ConsumeQueueView,
    QueueTimeSpan,
    parse_broker_consume_stats,
    parse_broker_stats,
    parse_connections,
    parse_consume_queue,
    parse_group_list,
    parse_kv_table,
    parse_time_spans,
)
from orbitmq.client.admin.replication import BrokerMember, HAStatus, member_rows, parse_ha_status
from orbitmq.client.instance import check_response
from orbitmq.client.validation import check_group, check_topic
from orbitmq.errors import BrokerError, ClientError, OrbitMQError
from orbitmq.protocol.admin_headers import (
    CloneGroupOffsetRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetProducerConnectionListRequestHeader,
    QueryConsumeQueueRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from orbitmq.protocol.bodies import MessageQueue, TopicList, loads_lenient
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.headers import (
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
)
from orbitmq.protocol.message import MessageExt
from orbitmq.protocol.properties_text import format_properties_text, parse_properties_text

if TYPE_CHECKING:
    from orbitmq.client.admin.core import AdminCore

__all__ = ["OpsAdminMixin", "BlockingOpsAdminMixin", "QUEUE_READ_MAX"]

QUEUE_READ_MAX = queues.QUEUE_READ_MAX  # messages one queue_messages call returns at most


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class OpsAdminMixin:
    """Operations coroutines of AsyncAdmin (see the module docstring)."""

    if TYPE_CHECKING:  # what the mixin uses of AsyncAdmin: its core
        _core: AdminCore

    async def broker_address(self, broker: str) -> str:
        """``broker`` as an address: a broker name's master, or ``host:port`` as given.

        Raises:
            ClientError: a name no name server knows, or a broker without a master.
        """
        return await self._core.broker_address(broker)

    # -- cluster and brokers -----------------------------------------------------------------
    async def cluster_brokers(self, cluster: str | None = None) -> list[ClusterBroker]:
        """Every broker address of ``cluster`` (of all clusters when None), sorted."""
        info = await self._core.cluster_info()
        if cluster is not None and cluster not in info.cluster_addr_table:
            raise ClientError(f"no cluster named {cluster!r}; known: "
                              f"{sorted(info.cluster_addr_table)}")
        out = []
        for name, clusters in ((n, c) for c, names in info.cluster_addr_table.items()
                               for n in names):
            bd = info.broker_addr_table.get(name)
            if bd is None or (cluster is not None and clusters != cluster):
                continue
            out += [ClusterBroker(clusters, name, int(bid), addr)
                    for bid, addr in bd.broker_addrs.items()]
        return sorted(out, key=lambda b: (b.cluster, b.broker_name, b.broker_id))

    async def broker_runtime_info(self, broker: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO: RocketMQ's runtime keys (``putTps``...), values as text."""
        addr = await self.broker_address(broker)
        resp = await self._core.broker_call(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return parse_kv_table(resp.body)

    async def broker_ha_status(self, broker: str) -> HAStatus:
        """GET_BROKER_HA_STATUS (RocketMQ 5): a master's slaves and how far each one is behind;
        on a slave, its side of the connection."""
        addr = await self.broker_address(broker)
        resp = await self._core.broker_call(addr, RequestCode.GET_BROKER_HA_STATUS)
        return parse_ha_status(resp.body)

    async def broker_members(self, cluster: str | None = None) -> list[BrokerMember]:
        """Every broker of ``cluster`` (all when None) with its role and, for a slave, its
        replication lag in bytes and seconds (see replication_admin.py); a broker that does
        not answer carries the error."""
        brokers = await self.cluster_brokers(cluster)
        members: list[BrokerMember] = []
        for b in brokers:
            try:
                info = await self.broker_runtime_info(b.addr)
            except (OrbitMQError, OSError) as e:
                members.append(BrokerMember(b.cluster, b.broker_name, b.broker_id, b.addr,
                                            error=str(e)))
                continue
            role = info.get("brokerRole") or ("ASYNC_MASTER" if b.broker_id == 0 else "SLAVE")
            members.append(BrokerMember(b.cluster, b.broker_name, b.broker_id, b.addr, role,
                                        int(info.get("commitLogMaxOffset", -1)), runtime=info))
        statuses: dict[str, HAStatus] = {}
        for m in members:
            if m.broker_id == 0 and not m.error:
                try:
                    statuses[m.broker_name] = await self.broker_ha_status(m.addr)
                except (OrbitMQError, OSError):
                    pass  # an older broker without the request: lags from the runtime info
        return member_rows(members, statuses)

    async def broker_config(self, broker: str) -> dict[str, str]:
        """GET_BROKER_CONFIG: every setting under RocketMQ's name, as text."""
        addr = await self.broker_address(broker)
        resp = await self._core.broker_call(addr, RequestCode.GET_BROKER_CONFIG)
        return parse_properties_text(resp.body)

    async def update_broker_config(self, broker: str,
                                   settings: Mapping[str, object]) -> None:
        """UPDATE_BROKER_CONFIG: change runtime settings (RocketMQ's or OrbitMQ's names; ratios
        under RocketMQ's names are percentages). The broker keeps them across restarts.

        Raises:
            BrokerError: INVALID_PARAMETER naming a setting that is unknown, cannot change while
                the broker runs, or refuses the value; nothing was changed then.
        """
        if not settings:
            raise ClientError("no setting to change")
        addr = await self.broker_address(broker)
        body = format_properties_text({k: _text(v) for k, v in settings.items()})
        await self._core.broker_call(addr, RequestCode.UPDATE_BROKER_CONFIG, body=body)

    async def broker_stats(self, broker: str, stats_name: str,
                           stats_key: str) -> BrokerStatsData:
        """VIEW_BROKER_STATS_DATA: one counter (``TOPIC_PUT_NUMS`` of a topic,
        ``GROUP_GET_NUMS`` of ``topic@group``...) over the last minute, hour and day."""
        addr = await self.broker_address(broker)
        resp = await self._core.broker_call(addr, RequestCode.VIEW_BROKER_STATS_DATA,
                                            ViewBrokerStatsDataRequestHeader(stats_name, stats_key))
        return parse_broker_stats(resp.body)

    async def broker_consume_stats(self, broker: str, *,
                                   order_only: bool = False) -> BrokerConsumeStats:
        """GET_BROKER_CONSUME_STATS: every group's progress on every topic of one broker."""
        addr = await self.broker_address(broker)
        resp = await self._core.broker_call(addr, RequestCode.GET_BROKER_CONSUME_STATS,
                                            GetConsumeStatsInBrokerHeader(order_only))
        return parse_broker_consume_stats(resp.body)

    async def topics_by_cluster(self, cluster: str) -> list[str]:
        """GET_TOPICS_BY_CLUSTER (a name server): topics with queues in ``cluster``."""
        resp = check_response(await self._core.namesrv_call(
            RequestCode.GET_TOPICS_BY_CLUSTER, GetTopicsByClusterRequestHeader(cluster)))
        return sorted(TopicList.from_json(resp.body).topic_list)

    # -- clients and groups ------------------------------------------------------------------
    async def producer_connections(self, group: str) -> list[Connection]:
        """GET_PRODUCER_CONNECTION_LIST on every master, merged: the group's live producers."""
        masters = await self._core.masters(None)
        header = GetProducerConnectionListRequestHeader(group)
        answers = await asyncio.gather(*(self._core.broker_call(
            a, RequestCode.GET_PRODUCER_CONNECTION_LIST, header,
            ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR)) for a in masters.values()))
        merged = {(c.client_id, c.client_addr): c for r in answers
                  if r.code == ResponseCode.SUCCESS and r.body for c in parse_connections(r.body)}
        return sorted(merged.values(), key=lambda c: (c.client_id, c.client_addr))

    async def consumer_running_info(self, group: str, client_id: str, *,
                                    jstack: bool = False) -> dict[str, Any]:
        """GET_CONSUMER_RUNNING_INFO, asked of the client through a broker it is connected to:
        its ConsumerRunningInfo as parsed JSON (``properties``, ``subscriptionSet``,
        ``mqTable``, ``statusTable``).

        Raises:
            BrokerError: CONSUMER_NOT_ONLINE when no master has the client connected.
        """
        check_group(group)
        header = GetConsumerRunningInfoRequestHeader(group, client_id, jstack)
        last: BrokerError | None = None
        for addr in (await self._core.masters(None)).values():
            try:
                resp = await self._core.broker_call(addr, RequestCode.GET_CONSUMER_RUNNING_INFO,
                                                    header)
            except BrokerError as e:
                last = e
                continue
            data = loads_lenient(bytes(resp.body)) if resp.body else {}
            return data if isinstance(data, dict) else {}
        raise last or BrokerError(ResponseCode.CONSUMER_NOT_ONLINE,
                                  f"client {client_id} of group {group} is not online")

    async def topic_consumer_groups(self, topic: str) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO on the topic's masters: groups subscribing to it or with
        offsets on it."""
        _route, masters = await self._core.route_masters(check_topic(topic))
        answers = await asyncio.gather(*(self._core.broker_call(
            a, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, QueryTopicConsumeByWhoRequestHeader(topic))
            for a in masters.values()))
        return sorted({g for r in answers for g in parse_group_list(r.body)})

    async def consume_time_span(self, topic: str, group: str) -> list[QueueTimeSpan]:
        """QUERY_CONSUME_TIME_SPAN on the topic's masters: per queue, the store times of its
        oldest, newest and last consumed message."""
        _route, masters = await self._core.route_masters(check_topic(topic))
        header = QueryConsumeTimeSpanRequestHeader(topic, check_group(group))
        answers = await asyncio.gather(*(self._core.broker_call(
            a, RequestCode.QUERY_CONSUME_TIME_SPAN, header) for a in masters.values()))
        return sorted((s for r in answers for s in parse_time_spans(r.body)),
                      key=lambda s: s.queue)

    async def clone_group_offset(self, src_group: str, dest_group: str, *,
                                 topic: str | None = None, offline: bool = False) -> list[str]:
        """CLONE_GROUP_OFFSET on every master: ``dest_group`` starts where ``src_group`` is.
        Returns the brokers that had offsets to copy.

        Raises:
            ClientError: no broker had an offset of ``src_group`` (on ``topic``) to copy.
        """
        check_group(src_group)
        check_group(dest_group)
        masters = await self._core.masters(None)
        header = CloneGroupOffsetRequestHeader(src_group, dest_group, topic, offline)
        names = list(masters)
        answers = await asyncio.gather(*(self._core.broker_call(
            masters[n], RequestCode.CLONE_GROUP_OFFSET, header,
            ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND)) for n in names))
        cloned = sorted(n for n, r in zip(names, answers, strict=True)
                        if r.code == ResponseCode.SUCCESS)
        if not cloned:
            where = f" on topic {topic}" if topic else ""
            raise ClientError(f"group {src_group} has no committed offsets{where} to clone")
        return cloned

    async def group_config(self, group: str) -> dict[str, dict[str, Any]]:
        """The group's SubscriptionGroupConfig on each master that has it (broker name ->
        RocketMQ's fields: ``retryMaxTimes``, ``consumeEnable``...)."""
        check_group(group)
        masters = await self._core.masters(None)
        out: dict[str, dict[str, Any]] = {}
        for name, addr in sorted(masters.items()):
            resp = await self._core.broker_call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            data = loads_lenient(bytes(resp.body)) if resp.body else {}
            table = data.get("subscriptionGroupTable") if isinstance(data, dict) else None
            if isinstance(table, dict) and isinstance(table.get(group), dict):
                out[name] = table[group]
        return out

    async def delete_group(self, group: str, *, remove_offset: bool = True,
                           cluster: str | None = None) -> list[str]:
        """DELETE_SUBSCRIPTIONGROUP on every master of ``cluster`` (None: of the only cluster;
        refused when there are several): the group's settings and, with ``remove_offset``, its
        committed offsets. Returns the broker names."""
        check_group(group)
        masters = await self._core.write_masters(cluster)
        header = DeleteSubscriptionGroupRequestHeader(group, remove_offset)
        await asyncio.gather(*(
            self._core.broker_call(a, RequestCode.DELETE_SUBSCRIPTIONGROUP, header)
            for a in masters.values()))
        return sorted(masters)

    # -- queues ------------------------------------------------------------------------------
    async def query_consume_queue(self, topic: str, broker: str, queue_id: int,
                                  index: int, count: int = 10, *,
                                  group: str | None = None) -> ConsumeQueueView:
        """QUERY_CONSUME_QUEUE: ``count`` raw entries of one queue from ``index``."""
        addr = await self.broker_address(broker)
        header = QueryConsumeQueueRequestHeader(check_topic(topic), queue_id, index, count, group)
        resp = await self._core.broker_call(addr, RequestCode.QUERY_CONSUME_QUEUE, header)
        name = broker if ":" not in broker else await self._broker_name_of(addr)
        return parse_consume_queue(MessageQueue(topic, name, queue_id), index, resp.body,
                                   resp.remark)

    async def _broker_name_of(self, addr: str) -> str:
        for b in await self.cluster_brokers():
            if b.addr == addr:
                return b.broker_name
        return addr

    async def queue_messages(self, mq: MessageQueue, start: int = 0,
                             limit: int = 32) -> list[MessageExt]:
        """Up to ``limit`` (at most QUEUE_READ_MAX) messages of one queue from offset ``start``,
        read without committing any offset."""
        return await queues.queue_messages(self._core, mq, start, limit)

    async def queue_offset_at(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: the first offset of one queue stored at or after
        ``timestamp_ms`` (its max offset when none is)."""
        return await queues.queue_offset_at(self._core, mq, timestamp_ms)

    async def message_at(self, mq: MessageQueue, offset: int) -> MessageExt:
        """The message at ``offset`` of one queue (mqadmin's queryMsgByOffset).

        Raises:
            BrokerError: QUERY_NOT_FOUND when the queue holds no message there.
        """
        found = await self.queue_messages(mq, offset, 1)
        if not found or found[0].queue_offset != offset:
            raise BrokerError(ResponseCode.QUERY_NOT_FOUND,
                              f"no message at offset {offset} of {mq.topic} queue "
                              f"{mq.broker_name}:{mq.queue_id}")
        return found[0]


class BlockingOpsAdminMixin:
    """The blocking twins of :class:`OpsAdminMixin`'s coroutines (for ``Admin``)."""

    _client: Any
    _call: Any  # BlockingClient's: runs a coroutine on the client's loop and waits

    def broker_address(self, broker: str) -> str:
        return self._call(self._client.broker_address(broker))

    def cluster_brokers(self, cluster: str | None = None) -> list[ClusterBroker]:
        return self._call(self._client.cluster_brokers(cluster))

    def broker_runtime_info(self, broker: str) -> dict[str, str]:
        return self._call(self._client.broker_runtime_info(broker))

    def broker_config(self, broker: str) -> dict[str, str]:
        return self._call(self._client.broker_config(broker))

    def broker_ha_status(self, broker: str) -> HAStatus:
        return self._call(self._client.broker_ha_status(broker))

    def broker_members(self, cluster: str | None = None) -> list[BrokerMember]:
        return self._call(self._client.broker_members(cluster))

    def update_broker_config(self, broker: str, settings: Mapping[str, object]) -> None:
        self._call(self._client.update_broker_config(broker, settings))

    def broker_stats(self, broker: str, stats_name: str, stats_key: str) -> BrokerStatsData:
        return self._call(self._client.broker_stats(broker, stats_name, stats_key))

    def broker_consume_stats(self, broker: str, *, order_only: bool = False) -> BrokerConsumeStats:
        return self._call(self._client.broker_consume_stats(broker, order_only=order_only))

    def topics_by_cluster(self, cluster: str) -> list[str]:
        return self._call(self._client.topics_by_cluster(cluster))

    def producer_connections(self, group: str) -> list[Connection]:
        return self._call(self._client.producer_connections(group))

    def consumer_running_info(self, group: str, client_id: str, *,
                              jstack: bool = False) -> dict[str, Any]:
        return self._call(self._client.consumer_running_info(group, client_id, jstack=jstack))

    def topic_consumer_groups(self, topic: str) -> list[str]:
        return self._call(self._client.topic_consumer_groups(topic))

    def consume_time_span(self, topic: str, group: str) -> list[QueueTimeSpan]:
        return self._call(self._client.consume_time_span(topic, group))

    def clone_group_offset(self, src_group: str, dest_group: str, *, topic: str | None = None,
                           offline: bool = False) -> list[str]:
        return self._call(self._client.clone_group_offset(src_group, dest_group, topic=topic,
                                                          offline=offline))

    def group_config(self, group: str) -> dict[str, dict[str, Any]]:
        return self._call(self._client.group_config(group))

    def delete_group(self, group: str, *, remove_offset: bool = True,
                     cluster: str | None = None) -> list[str]:
        return self._call(self._client.delete_group(group, remove_offset=remove_offset,
                                                    cluster=cluster))

    def query_consume_queue(self, topic: str, broker: str, queue_id: int, index: int,
                            count: int = 10, *, group: str | None = None) -> ConsumeQueueView:
        return self._call(self._client.query_consume_queue(topic, broker, queue_id, index, count,
                                                           group=group))

    def queue_messages(self, mq: MessageQueue, start: int = 0, limit: int = 32) -> list[MessageExt]:
        return self._call(self._client.queue_messages(mq, start, limit))

    def queue_offset_at(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._call(self._client.queue_offset_at(mq, timestamp_ms))

    def message_at(self, mq: MessageQueue, offset: int) -> MessageExt:
        return self._call(self._client.message_at(mq, offset))
