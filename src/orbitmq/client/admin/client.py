"""The admin client behind the ``orbitmq`` CLI: AsyncAdmin (asyncio) and Admin (blocking twin).

Topic and group management spans every broker of a cluster (a topic is created on each master,
deleted from each master and from every name server), so these calls fan out concurrently and
report per broker. The shapes of the admin answers (topic stats, consume stats, connections) are
parsed in :mod:`orbitmq.client.admin.models`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Self

from orbitmq.client._blocking import BlockingClient
from orbitmq.client.admin import browse, dead_letters, groups, topics
from orbitmq.client.admin.auth import AuthAdminMixin, BlockingAuthAdminMixin
from orbitmq.client.admin.core import AdminCore
from orbitmq.client.admin.dead_letters import DeadLetter, ResendReport, Resent
from orbitmq.client.admin.models import (
    ConsumerConnectionInfo,
    GroupStatus,
    QueueConsumeStatus,
    TopicQueueStatus,
    parse_consume_stats,
    parse_offset_groups,
    parse_subscription_groups,
)
from orbitmq.client.admin.ops import BlockingOpsAdminMixin, OpsAdminMixin
from orbitmq.client.admin.transactions import PendingTransactions, parse_pending_transactions
from orbitmq.client.instance import check_response
from orbitmq.client.route import subscribe_queues_from_route
from orbitmq.client.trace import journey
from orbitmq.client.trace.journey import MessageTrace
from orbitmq.client.validation import check_group, check_topic
from orbitmq.errors import BrokerError, ClientError, RemoteProtocolError
from orbitmq.protocol.bodies import (
    ClusterInfo,
    MessageQueue,
    TopicList,
    TopicRouteData,
)
from orbitmq.protocol.codes import OrbitMQRequestCode, RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    DeleteTopicFromNamesrvRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumeStatsRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    QueryMessageRequestHeader,
    SearchOffsetByTimestampRequestHeader,
    SearchOffsetByTimestampResponseHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from orbitmq.protocol.message import MessageExt
from orbitmq.protocol.msgid import decode_offset_msg_id
from orbitmq.protocol.stored import decode_stored_message, iter_stored_messages
from orbitmq.security.signature import Credentials
from orbitmq.security.tls import ClientTls

__all__ = ["AsyncAdmin", "Admin"]

QUERY_MAX_NUM_DEFAULT = 64
# How VIEW_MESSAGE_BY_ID's remark starts when no message starts at the offset: OrbitMQ answers it
# QUERY_NOT_FOUND, RocketMQ SYSTEM_ERROR.
_NO_MESSAGE_AT_OFFSET = "can not find message by the offset"


class AsyncAdmin(OpsAdminMixin, AuthAdminMixin):
    """Cluster administration (asyncio); the operations calls come from OpsAdminMixin, the
    user and ACL calls from AuthAdminMixin (client/admin/auth.py).

    Args: ``namesrv`` addresses, ``timeout`` per request, ``credentials`` every request is signed
    with (:class:`orbitmq.Credentials`; None: unsigned), ``tls`` for every connection
    (:class:`orbitmq.ClientTls`; True: the system's roots; None: ``ORBITMQ_TLS_*``).
    """

    def __init__(self, namesrv: str | Sequence[str] | None = None, *, timeout: float = 5.0,
                 credentials: Credentials | None = None,
                 tls: ClientTls | bool | None = None) -> None:
        self._core = AdminCore(namesrv, timeout=timeout, credentials=credentials, tls=tls)

    @property
    def timeout(self) -> float:
        """Seconds each request may take."""
        return self._core.timeout

    async def start(self) -> Self:
        await self._core.start()
        return self

    async def shutdown(self) -> None:
        await self._core.shutdown()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    # -- cluster and topics ------------------------------------------------------------------
    async def cluster_info(self) -> ClusterInfo:
        """Brokers by name and broker names by cluster, as a name server knows them."""
        return await self._core.cluster_info()

    async def list_topics(self) -> list[str]:
        """Every topic a name server has a route for (system topics included)."""
        resp = check_response(
            await self._core.namesrv_call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        return sorted(TopicList.from_json(resp.body).topic_list)

    async def topic_route(self, topic: str) -> TopicRouteData:
        """The topic's route. Raises BrokerError(TOPIC_NOT_EXIST) when there is none."""
        return await self._core.topic_route(topic)

    async def create_topic(
        self,
        topic: str,
        *,
        cluster: str | None = None,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = 6,
        order: bool = False,
        attributes: str | None = None,
        exist_ok: bool = False,
    ) -> list[str]:
        """Create ``topic`` on every master of ``cluster`` (None: of the only cluster the name
        servers know; refused when they know several).
        ``attributes`` sets RocketMQ 5's topic attributes as mqadmin's ``-a`` does
        (``+message.type=FIFO``; docs/rocketmq5.md). A topic one of them has already is refused
        (:meth:`update_topic` changes it), unless ``exist_ok``: then its settings are
        overwritten with these, as RocketMQ's UPDATE_AND_CREATE_TOPIC does.

        Returns the names of the brokers that now have it.

        Raises:
            ClientError: bad name or queue counts, no broker to create it on, or several
                clusters and none named.
            TopicExistsError: a master has the topic already (and not ``exist_ok``).
            BrokerError: a broker refused (the others may have it already: run again).
        """
        header = topics.topic_settings(topic, read_queue_nums=read_queue_nums,
                                            write_queue_nums=write_queue_nums, perm=perm,
                                            order=order, attributes=attributes)
        masters = await self._core.write_masters(cluster)
        if not masters:
            raise ClientError("no master broker to create the topic on")
        await topics.create_new(self._core, masters, header, exist_ok=exist_ok)
        return sorted(masters)

    async def update_topic(self, topic: str, **options: Any) -> list[str]:
        """Change settings of an existing topic, keeping what is not given; lowering the read
        queue count below queues that hold unconsumed messages is refused unless
        ``force=True``. See :func:`orbitmq.client.admin.topics.update_topic` for the options."""
        return await topics.update_topic(self._core, topic, **options)

    async def create_topic_on_brokers(self, broker_addrs: Sequence[str], topic: str,
                                      **settings: Any) -> list[str]:
        """Create or update ``topic`` on the brokers at ``broker_addrs``, with the settings of
        :meth:`create_topic`; see :func:`orbitmq.client.admin.topics.create_topic_on_brokers`."""
        return await topics.create_topic_on_brokers(self._core, broker_addrs, topic, **settings)

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """Delete ``topic`` from the masters of ``cluster`` (or those of its route) and from every
        name server. Returns the broker names it was deleted from."""
        check_topic(topic)
        if cluster is not None:
            masters = await self._core.masters(cluster)
        else:
            try:
                masters = (await self._core.route_masters(topic))[1]
            except BrokerError:
                masters = await self._core.masters(None)
        await asyncio.gather(*(self._core.broker_call(addr, RequestCode.DELETE_TOPIC_IN_BROKER,
                                                      DeleteTopicRequestHeader(topic))
                               for addr in masters.values()))
        header = DeleteTopicFromNamesrvRequestHeader(topic, cluster)
        for ns in self._core.instance.namesrv_addrs:
            cmd = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV,
                                          header.to_ext_fields())
            check_response(await self._core.invoke(ns, cmd))
        return sorted(masters)

    async def topic_status(self, topic: str) -> list[TopicQueueStatus]:
        """Per queue: min and max offsets and the store time of the last message."""
        return await topics.topic_status(self._core, topic)

    # -- groups ------------------------------------------------------------------------------
    async def group_status(self, group: str, topic: str | None = None) -> GroupStatus:
        """Per queue of the group's topics (or of ``topic``): broker offset, committed consumer
        offset and lag, from every master broker."""
        check_group(group)
        masters = ((await self._core.route_masters(topic))[1] if topic
                   else await self._core.masters(None))
        header = GetConsumeStatsRequestHeader(group, topic)
        answers = await asyncio.gather(
            *(self._core.broker_call(addr, RequestCode.GET_CONSUME_STATS, header,
                                     ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE,
                               ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST))
              for addr in masters.values()))
        queues: list[QueueConsumeStatus] = []
        for resp in answers:
            if resp.code == ResponseCode.SUCCESS and resp.body:
                queues.extend(parse_consume_stats(resp.body))
        if topic:
            queues = [q for q in queues if q.queue.topic == topic]
        return GroupStatus(group, sorted(queues, key=lambda q: q.queue))

    async def consumer_connections(self, group: str) -> ConsumerConnectionInfo:
        """The group's live clients and subscriptions, merged over every master broker.

        A broker without GET_CONSUMER_CONNECTION_LIST is asked GET_CONSUMER_LIST_BY_GROUP
        instead, which gives the client ids only.
        """
        return await groups.consumer_connections(self._core, group)

    async def list_groups(self) -> list[str]:
        """Consumer groups known to any master: subscription groups and groups with offsets."""
        masters = await self._core.masters(None)
        found: set[str] = set()
        for addr in masters.values():
            subs = await self._core.broker_call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            found.update(parse_subscription_groups(subs.body))
            offsets = await self._core.broker_call(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
            found.update(parse_offset_groups(offsets.body))
        return sorted(found)

    async def reset_offset(self, group: str, topic: str, timestamp_ms: int) -> dict[MessageQueue, int]:
        """Move the group's committed offsets of ``topic`` to the first message stored at or after
        ``timestamp_ms`` (queue by queue: SEARCH_OFFSET_BY_TIMESTAMP then UPDATE_CONSUMER_OFFSET).

        Consumers running meanwhile may commit over it: stop them first.
        """
        check_group(group)
        route, masters = await self._core.route_masters(topic)

        async def reset(mq: MessageQueue) -> tuple[MessageQueue, int]:
            addr = masters[mq.broker_name]
            search = SearchOffsetByTimestampRequestHeader(topic, mq.queue_id, timestamp_ms)
            resp = await self._core.broker_call(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                                search)
            offset = SearchOffsetByTimestampResponseHeader.from_ext_fields(resp.ext_fields).offset
            update = UpdateConsumerOffsetRequestHeader(group, topic, mq.queue_id, offset)
            await self._core.broker_call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, update)
            return mq, offset

        queues = [mq for mq in subscribe_queues_from_route(topic, route) if mq.broker_name in masters]
        return dict(await asyncio.gather(*(reset(mq) for mq in queues)))

    async def consumer_offset(self, group: str, mq: MessageQueue) -> int:
        """The group's committed offset of one queue (-1 when none)."""
        _route, masters = await self._core.route_masters(mq.topic)
        header = QueryConsumerOffsetRequestHeader(group, mq.topic, mq.queue_id)
        resp = await self._core.broker_call(
            masters[mq.broker_name], RequestCode.QUERY_CONSUMER_OFFSET, header,
            ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        return QueryConsumerOffsetResponseHeader.from_ext_fields(resp.ext_fields).offset

    async def max_offset(self, mq: MessageQueue) -> int:
        """One past the newest message of one queue."""
        _route, masters = await self._core.route_masters(mq.topic)
        resp = await self._core.broker_call(masters[mq.broker_name], RequestCode.GET_MAX_OFFSET,
                                            GetMaxOffsetRequestHeader(mq.topic, mq.queue_id))
        return GetMaxOffsetResponseHeader.from_ext_fields(resp.ext_fields).offset

    async def update_group(self, group: str, *, cluster: str | None = None,
                           **settings: Any) -> list[str]:
        """Change subscription group settings (``retry_max_times``, ``consume_enable``,
        ``consume_broadcast_enable``, ``retry_queue_nums``) on every master of ``cluster`` (None:
        of the only cluster; refused when there are several), creating the group when needed;
        other settings keep their values. Returns the broker names."""
        return await groups.update_group(self._core, group, settings, cluster=cluster)

    async def dead_letters(self, group: str, max_messages: int = 1000) -> list[MessageExt]:
        """The group's dead letters (``%DLQ%{group}``), oldest first; read, never consumed."""
        return await groups.dead_letters(self._core, group, max_messages)

    async def dead_letter_entries(self, group: str, max_messages: int = 1000, *,
                                  unresent_only: bool = False) -> list[DeadLetter]:
        """The group's dead letters with their DLQ queue and whether they were resent already
        (see :mod:`orbitmq.client.admin.dead_letters`); oldest first."""
        return await dead_letters.dead_letter_entries(self._core, group, max_messages,
                                                      unresent_only=unresent_only)

    async def resend_dead_letters(self, group: str, *, msg_id: str | None = None,
                                  force: bool = False, max_messages: int = 1000) -> list[Resent]:
        """Send the group's dead letters back to the group's retry topic ``%RETRY%{group}`` (that
        group only consumes them again, never the topic's other groups), each once: those resent
        before are skipped unless ``force`` (the broker keeps a resend mark per DLQ queue under
        the reserved group ``%RESENT%{group}``). ``msg_id`` picks one.

        Raises:
            ClientError: ``msg_id`` names no dead letter of the group.
        """
        return await dead_letters.resend_dead_letters(self._core, group, msg_id=msg_id, force=force,
                                                      max_messages=max_messages)

    async def resend_report(self, group: str, *, msg_id: str | None = None, force: bool = False,
                            max_messages: int = 1000) -> ResendReport:
        """:meth:`resend_dead_letters` with the counts of what was passed over (resent before)
        and not reached (past ``max_messages``)."""
        return await dead_letters.resend_report(self._core, group, msg_id=msg_id, force=force,
                                                max_messages=max_messages)

    async def queue_holders(self, group: str) -> dict[MessageQueue, str]:
        """Which client of the group holds each queue (GET_CONSUMER_RUNNING_INFO through the
        brokers); best effort, queues of clients that do not answer are missing."""
        return await groups.queue_holders(self._core, group)

    # -- messages ----------------------------------------------------------------------------
    async def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """A message by id: an offset message id is looked up on the broker it names
        (VIEW_MESSAGE_BY_ID); anything else is taken as a UNIQ_KEY and searched in ``topic``.

        Raises:
            ClientError: a UNIQ_KEY without ``topic``.
            BrokerError: not found (QUERY_NOT_FOUND, the remark naming the id and where it was
                looked for; also from a RocketMQ broker, which answers SYSTEM_ERROR) or refused.
        """
        addr = await self._offset_id_broker(msg_id)
        if addr is not None:
            _host, _port, offset = decode_offset_msg_id(msg_id)
            try:
                resp = await self._core.broker_call(addr, RequestCode.VIEW_MESSAGE_BY_ID,
                                                    ViewMessageRequestHeader(offset, topic))
            except BrokerError as e:
                if not (e.code == ResponseCode.QUERY_NOT_FOUND or e.code == ResponseCode.SYSTEM_ERROR
                        and e.remark.startswith(_NO_MESSAGE_AT_OFFSET)):
                    raise
                raise BrokerError(ResponseCode.QUERY_NOT_FOUND, f"no message {msg_id}: nothing "
                                  f"starts at commit log offset {offset} of {addr}") from None
            return decode_stored_message(resp.body, decompress=True)
        if topic is None:
            raise ClientError(f"{msg_id!r} is not the offset id of a known broker; "
                              "give the topic to look it up as a message key (UNIQ_KEY)")
        found = [m for m in await self.query_messages(topic, msg_id) if m.msg_id == msg_id]
        if not found:
            raise BrokerError(ResponseCode.QUERY_NOT_FOUND, f"no message {msg_id} in {topic!r}")
        return min(found, key=lambda m: m.store_timestamp)

    async def _offset_id_broker(self, msg_id: str) -> str | None:
        """The address of the broker an offset message id names, if it names a known one (a
        UNIQ_KEY has the same length, so the address decides)."""
        try:
            host, port, _offset = decode_offset_msg_id(msg_id)
        except RemoteProtocolError:
            return None
        addr = f"{host}:{port}"
        info = await self.cluster_info()
        known = {a for bd in info.broker_addr_table.values() for a in bd.broker_addrs.values()}
        return addr if addr in known else None

    async def query_messages(
        self,
        topic: str,
        key: str,
        max_num: int = QUERY_MAX_NUM_DEFAULT,
        begin_ms: int = 0,
        end_ms: int | None = None,
    ) -> list[MessageExt]:
        """Messages of ``topic`` whose KEYS (or UNIQ_KEY) include ``key``, from every broker of the
        topic (its master, or a slave while the master is gone), oldest first."""
        _route, masters = await self._core.route_readers(topic)
        end = int(time.time() * 1000) + 1 if end_ms is None else end_ms
        header = QueryMessageRequestHeader(topic, key, max_num, begin_ms, end)
        answers = await asyncio.gather(*(
            self._core.broker_call(addr, RequestCode.QUERY_MESSAGE, header,
                                   ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
            for addr in masters.values()))
        found: dict[str, MessageExt] = {}
        for resp in answers:
            if resp.code != ResponseCode.SUCCESS or not resp.body:
                continue
            for msg in iter_stored_messages(resp.body, decompress=True):
                # The index matches key hashes: keep only real matches.
                if msg.topic == topic and (key in msg.keys or msg.uniq_key == key):
                    found.setdefault(msg.offset_msg_id, msg)
        return sorted(found.values(), key=lambda m: (m.store_timestamp, m.commit_log_offset))

    async def messages_between(self, topic: str, begin_ms: int, end_ms: int, limit: int, *,
                               queue_id: int | None = None) -> list[MessageExt]:
        """Messages of ``topic`` (of one queue id when given) stored from ``begin_ms`` to
        ``end_ms`` (both included), oldest first; at most ``limit`` (1..10,000), the oldest kept
        when more are found. Read without committing any offset."""
        return await browse.messages_between(self._core, topic, begin_ms, end_ms, limit,
                                             queue_id=queue_id)

    async def committed_offsets(self, topic: str) -> dict[str, dict[MessageQueue, int]]:
        """Group -> queue -> committed offset (the next message the group will consume), for
        every group that committed one on ``topic``, over the masters of the topic's route; see
        :func:`orbitmq.client.consumed_by`."""
        return await browse.committed_offsets(self._core, topic)

    async def message_trace(self, msg_id: str, *, topic: str | None = None,
                            trace_topic: str | None = None, max_num: int = 64) -> MessageTrace:
        """One message's journey: its trace records (from ``trace_topic``, RMQ_SYS_TRACE_TOPIC by
        default) merged with where it is stored and each consumer group's progress, retries and
        dead letter (see :mod:`orbitmq.client.trace.journey`). ``topic`` is needed only when
        no trace record names it."""
        return await journey.message_trace(self, msg_id, topic=topic,
                                           trace_topic=trace_topic or journey.TRACE_TOPIC,
                                           max_num=max_num)

    # -- transactions --------------------------------------------------------------------------
    async def list_transactions(self, limit: int = 1000) -> PendingTransactions:
        """Unresolved transactions (half messages neither committed, rolled back nor discarded)
        of every master broker, oldest first (OrbitMQ's LIST_PENDING_TRANSACTIONS)."""
        masters = await self._core.masters(None)

        async def ask(addr: str) -> RemotingCommand:
            cmd = RemotingCommand.request(OrbitMQRequestCode.LIST_PENDING_TRANSACTIONS,
                                          {"limit": str(limit)})
            return check_response(await self._core.invoke(addr, cmd))

        answers = [parse_pending_transactions(r.body)
                   for r in await asyncio.gather(*(ask(a) for a in masters.values()))]
        items = sorted((t for a in answers for t in a.transactions),
                       key=lambda t: (t.born_timestamp, t.broker_name, t.half_offset))
        return PendingTransactions(tuple(items), any(a.truncated for a in answers))


class Admin(BlockingOpsAdminMixin, BlockingAuthAdminMixin, BlockingClient[AsyncAdmin]):
    """Cluster administration (blocking); the methods of :class:`AsyncAdmin`."""

    _thread_name = "orbitmq-admin"

    def __init__(self, namesrv: str | Sequence[str] | None = None, *, timeout: float = 5.0,
                 credentials: Credentials | None = None,
                 tls: ClientTls | bool | None = None) -> None:
        super().__init__(AsyncAdmin(namesrv, timeout=timeout, credentials=credentials, tls=tls))

    def cluster_info(self) -> ClusterInfo:
        return self._call(self._client.cluster_info())

    def list_topics(self) -> list[str]:
        return self._call(self._client.list_topics())

    def topic_route(self, topic: str) -> TopicRouteData:
        return self._call(self._client.topic_route(topic))

    def create_topic(self, topic: str, **options: Any) -> list[str]:
        return self._call(self._client.create_topic(topic, **options))

    def update_topic(self, topic: str, **options: Any) -> list[str]:
        return self._call(self._client.update_topic(topic, **options))

    def create_topic_on_brokers(self, broker_addrs: Sequence[str], topic: str,
                                **settings: Any) -> list[str]:
        return self._call(self._client.create_topic_on_brokers(broker_addrs, topic, **settings))

    def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        return self._call(self._client.delete_topic(topic, cluster=cluster))

    def topic_status(self, topic: str) -> list[TopicQueueStatus]:
        return self._call(self._client.topic_status(topic))

    def group_status(self, group: str, topic: str | None = None) -> GroupStatus:
        return self._call(self._client.group_status(group, topic))

    def consumer_connections(self, group: str) -> ConsumerConnectionInfo:
        return self._call(self._client.consumer_connections(group))

    def list_groups(self) -> list[str]:
        return self._call(self._client.list_groups())

    def reset_offset(self, group: str, topic: str, timestamp_ms: int) -> dict[MessageQueue, int]:
        return self._call(self._client.reset_offset(group, topic, timestamp_ms))

    def consumer_offset(self, group: str, mq: MessageQueue) -> int:
        return self._call(self._client.consumer_offset(group, mq))

    def max_offset(self, mq: MessageQueue) -> int:
        return self._call(self._client.max_offset(mq))

    def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        return self._call(self._client.view_message(msg_id, topic))

    def query_messages(self, topic: str, key: str, max_num: int = QUERY_MAX_NUM_DEFAULT,
                       begin_ms: int = 0, end_ms: int | None = None) -> list[MessageExt]:
        return self._call(self._client.query_messages(topic, key, max_num, begin_ms, end_ms))

    def update_group(self, group: str, **settings: Any) -> list[str]:
        return self._call(self._client.update_group(group, **settings))

    def dead_letters(self, group: str, max_messages: int = 1000) -> list[MessageExt]:
        return self._call(self._client.dead_letters(group, max_messages))

    def dead_letter_entries(self, group: str, max_messages: int = 1000, *,
                            unresent_only: bool = False) -> list[DeadLetter]:
        return self._call(self._client.dead_letter_entries(group, max_messages,
                                                           unresent_only=unresent_only))

    def resend_dead_letters(self, group: str, *, msg_id: str | None = None, force: bool = False,
                            max_messages: int = 1000) -> list[Resent]:
        return self._call(self._client.resend_dead_letters(group, msg_id=msg_id, force=force,
                                                           max_messages=max_messages))

    def resend_report(self, group: str, *, msg_id: str | None = None, force: bool = False,
                      max_messages: int = 1000) -> ResendReport:
        return self._call(self._client.resend_report(group, msg_id=msg_id, force=force,
                                                     max_messages=max_messages))

    def queue_holders(self, group: str) -> dict[MessageQueue, str]:
        return self._call(self._client.queue_holders(group))

    def messages_between(self, topic: str, begin_ms: int, end_ms: int, limit: int, *,
                         queue_id: int | None = None) -> list[MessageExt]:
        return self._call(self._client.messages_between(topic, begin_ms, end_ms, limit,
                                                        queue_id=queue_id))

    def message_trace(self, msg_id: str, **options: Any) -> MessageTrace:
        """See :meth:`AsyncAdmin.message_trace`."""
        return self._call(self._client.message_trace(msg_id, **options))

    def committed_offsets(self, topic: str) -> dict[str, dict[MessageQueue, int]]:
        return self._call(self._client.committed_offsets(topic))

    def list_transactions(self, limit: int = 1000) -> PendingTransactions:
        return self._call(self._client.list_transactions(limit))
