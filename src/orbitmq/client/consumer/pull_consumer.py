"""The pull consumer: AsyncPullConsumer (asyncio) and PullConsumer (blocking twin).

The caller drives everything: which queues, which offsets, when to commit. The consumer adds the
parts that are easy to get wrong: the pull request flags, long polling, decoding the stored
messages (decompressing bodies), re-checking tags on the client (the broker filters by tag *hash*,
so a colliding tag can slip through), and a local offset table persisted to the brokers every
``persist_consumer_offset_interval`` seconds, on ``persist_offsets()`` and at shutdown.

A pull takes a TAG expression (a str) or a :class:`~orbitmq.client.consumer.message_selector.
MessageSelector` (tags or SQL92), parsed before the request is sent: a bad expression raises
ExpressionError and nothing moves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from typing import Any, Self

from orbitmq.client._blocking import BlockingClient
from orbitmq.client.consumer.message_selector import ExpressionLike, MessageSelector, selector_of
from orbitmq.client.consumer.pull_codec import (
    BULK_PULL_NUMS_MAX,
    PULL_BATCH_SIZE_MAX,
    build_pull_request,
    parse_pull_response,
    parse_raw_pull_response,
)
from orbitmq.client.instance import ClientInstance, check_response
from orbitmq.client.namespace import client_namespace, unwrap, unwrap_queue, wrap
from orbitmq.client.results import PullResult, RawPullResult
from orbitmq.client.route import MASTER_ID, subscribe_queues_from_route
from orbitmq.client.validation import check_group, check_topic
from orbitmq.errors import ClientError, ConnectionClosedError, TimeoutError, TopicNotFoundError
from orbitmq.protocol.bodies import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
)
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    SearchOffsetByTimestampRequestHeader,
    SearchOffsetByTimestampResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)
from orbitmq.security.signature import Credentials
from orbitmq.security.tls import ClientTls

__all__ = ["AsyncPullConsumer", "PullConsumer"]

log = logging.getLogger(__name__)

class AsyncPullConsumer:
    """Pulls messages from queues the caller chooses (asyncio).

    Args:
        group: the consumer group, under which offsets are committed.
        namesrv: name server addresses, ``"host:port;host:port"``.
        pull_timeout: seconds to wait for a pull answer (added to a long poll's suspend time).
        persist_consumer_offset_interval: seconds between automatic offset commits.
        poll_name_server_interval, heartbeat_broker_interval: as for the producer.
        credentials: what every request is signed with (:class:`orbitmq.Credentials`; None:
            unsigned).
        tls: TLS for every connection (:class:`orbitmq.ClientTls`; True: the system's roots;
            False: plaintext; None: ``ORBITMQ_TLS_ENABLE`` and ``ORBITMQ_TLS_CLIENT_*``).
        namespace: the namespace the group and every topic live in (RocketMQ's
            ``NAMESPACE%name``, docs/rocketmq5.md "Namespaces"): queues and messages show bare
            topics and are taken back as such. None: names are used as given.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        pull_timeout: float = 10.0,
        persist_consumer_offset_interval: float = 5.0,
        poll_name_server_interval: float = 30.0,
        heartbeat_broker_interval: float = 30.0,
        credentials: Credentials | None = None,
        tls: ClientTls | bool | None = None,
        namespace: str | None = None,
    ) -> None:
        self.namespace = client_namespace(namespace)
        self.group = check_group(wrap(self.namespace, group))
        self.pull_timeout = pull_timeout
        self.persist_consumer_offset_interval = persist_consumer_offset_interval
        self._instance = ClientInstance(
            namesrv,
            poll_name_server_interval=poll_name_server_interval,
            heartbeat_broker_interval=heartbeat_broker_interval,
            credentials=credentials,
            tls=tls,
        )
        self._instance.consumers[self.group] = self._consumer_data
        self._topics: set[str] = set()
        self._offsets: dict[MessageQueue, int] = {}
        self._suggested: dict[MessageQueue, int] = {}  # broker id each queue's last answer named
        self._dirty: set[MessageQueue] = set()
        self._no_bulk: set[str] = set()  # brokers that answered a bulk pull NOT_SUPPORTED
        self._started = False

    @property
    def client_id(self) -> str:
        return self._instance.client_id

    @property
    def instance(self) -> ClientInstance:
        return self._instance

    async def start(self) -> Self:
        await self._instance.start()
        self._instance.schedule_periodic(self.persist_consumer_offset_interval, self._persist_quietly)
        self._started = True
        return self

    async def shutdown(self) -> None:
        """Commit the local offsets, unregister from the brokers and close the connections."""
        if self._started:
            await self._persist_quietly()  # while started: requests check it
            self._started = False
        await self._instance.shutdown()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(
            self.group,
            ConsumeType.CONSUME_ACTIVELY,
            MessageModel.CLUSTERING,
            ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            [SubscriptionData(topic) for topic in sorted(self._topics)],
        )

    def _check_started(self) -> None:
        if not self._started:
            raise ClientError("consumer is not started; call start() or use `async with`")

    def _q(self, mq: MessageQueue) -> MessageQueue:
        """``mq`` as stored: its topic in the consumer's namespace."""
        if not self.namespace:
            return mq
        topic = wrap(self.namespace, mq.topic)
        return mq if topic == mq.topic else dataclasses.replace(mq, topic=topic)

    # -- queues and pulls --------------------------------------------------------------------
    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues, from a fresh route lookup.

        Raises:
            TopicNotFoundError: no name server knows the topic.
        """
        self._check_started()
        topic = wrap(self.namespace, topic)
        check_topic(topic)
        route = await self._instance.update_route(topic)
        if route is None:
            raise TopicNotFoundError(f"no route for topic {topic!r}")
        self._topics.add(topic)
        return [unwrap_queue(q, self.namespace) for q in subscribe_queues_from_route(topic, route)]

    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        expression: ExpressionLike = "*",
        *,
        timeout: float | None = None,
        suspend: float | None = None,
    ) -> PullResult:
        """Pull up to ``max_nums`` messages of ``mq`` from ``offset`` that ``expression``
        selects: a TAG expression (``"*"`` or ``"tagA || tagB"``) or a MessageSelector
        (``MessageSelector.by_sql("a > 5")``).

        Args:
            timeout: seconds to wait for the answer (default ``pull_timeout``).
            suspend: long poll: when nothing is there, the broker holds the request up to this
                many seconds and answers as soon as a message arrives.

        Raises:
            ExpressionError: the expression does not parse (nothing is sent).
            ClientError: negative offset or max_nums out of 1..1024.
            BrokerError: the broker refused the pull, e.g. FILTER_NOT_SUPPORTED for SQL92 on a
                broker without ``enable_property_filter``; ``next_begin_offset`` did not move.
        """
        selector = selector_of(expression)
        resp = await self._pull(self._q(mq), offset, max_nums, selector, timeout, suspend)
        result = parse_pull_response(resp, selector.tags)
        if self.namespace:
            for msg in result.messages:
                msg.topic = unwrap(msg.topic, self.namespace)
        return result

    async def pull_raw(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        expression: ExpressionLike = "*",
        *,
        timeout: float | None = None,
        suspend: float | None = None,
        bulk: bool = False,
    ) -> RawPullResult:
        """The same pull as :meth:`pull`, with the messages left undecoded: the response body
        as the broker sent it, for decoding in bulk (see :class:`RawPullResult`). Nothing is
        checked or filtered on the client; ``result.tags`` says which tags to keep.

        Args:
            bulk: ask with OrbitMQ's PULL_MESSAGE_BULK: ``max_nums`` up to BULK_PULL_NUMS_MAX,
                the answer bounded by the broker's ``bulk_pull_count_max`` and
                ``bulk_pull_bytes_max`` (instead of the 32 messages and 256 KiB of a RocketMQ
                pull). A broker that does not know the code (a RocketMQ broker) is asked with
                PULL_MESSAGE from then on, for at most 1,024 messages.

        Raises:
            as :meth:`pull`.
        """
        selector = selector_of(expression)
        resp = await self._pull(self._q(mq), offset, max_nums, selector, timeout, suspend, bulk)
        return parse_raw_pull_response(resp, selector.tags)

    async def _pull(self, mq: MessageQueue, offset: int, max_nums: int, selector: MessageSelector,
                    timeout: float | None, suspend: float | None,
                    bulk: bool = False) -> RemotingCommand:
        """Send one PULL_MESSAGE (after checking the arguments) to ``mq``'s broker, a slave
        too; the answer as it came."""
        self._check_started()
        if offset < 0:
            raise ClientError(f"offset must not be negative, got {offset}")
        nums_max = BULK_PULL_NUMS_MAX if bulk else PULL_BATCH_SIZE_MAX
        if not 1 <= max_nums <= nums_max:
            raise ClientError(f"max_nums must be within 1..{nums_max}, got {max_nums}")
        if suspend is not None and suspend <= 0:
            suspend = None
        self._topics.add(mq.topic)
        addr, _ = await self._instance.find_read_address(mq.broker_name, mq.topic,
                                                         self._suggested.get(mq, MASTER_ID))
        wait = (self.pull_timeout if timeout is None else timeout) + (suspend or 0.0)
        bulk = bulk and addr not in self._no_bulk
        cmd = build_pull_request(self.group, mq, offset, max_nums if bulk else min(
            max_nums, PULL_BATCH_SIZE_MAX), selector, suspend, bulk=bulk)
        try:
            resp = await self._instance.remoting.invoke(addr, cmd, wait)
        except (ConnectionClosedError, TimeoutError):
            self._instance.broker_failed(addr)  # the next pull reads another broker of the set
            self._suggested.pop(mq, None)
            raise
        if bulk and resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            log.info("broker %s does not serve bulk pulls: PULL_MESSAGE from now on", addr)
            self._no_bulk.add(addr)
            return await self._pull(mq, offset, min(max_nums, PULL_BATCH_SIZE_MAX), selector,
                                    timeout, suspend)
        suggested = resp.ext_fields.get("suggestWhichBrokerId", "0")
        self._suggested[mq] = int(suggested) if suggested.isdigit() else MASTER_ID
        return resp

    # -- committed offsets -------------------------------------------------------------------
    async def fetch_offset(self, mq: MessageQueue, *, from_store: bool = True) -> int:
        """The group's committed offset of ``mq``: from the broker (default), or the local
        table's value when ``from_store`` is False and it has one. -1 when there is none."""
        self._check_started()
        mq = self._q(mq)
        if not from_store and mq in self._offsets:
            return self._offsets[mq]
        header = QueryConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id)
        resp = await self._invoke_broker(mq, RequestCode.QUERY_CONSUMER_OFFSET, header)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        check_response(resp)
        return QueryConsumerOffsetResponseHeader.from_ext_fields(resp.ext_fields).offset

    def update_offset(self, mq: MessageQueue, offset: int) -> None:
        """Set ``mq``'s offset in the local table (the next message to consume); the broker gets
        it at the next persist."""
        if offset < 0:
            raise ClientError(f"offset must not be negative, got {offset}")
        mq = self._q(mq)
        self._offsets[mq] = offset
        self._dirty.add(mq)

    def local_offsets(self) -> dict[MessageQueue, int]:
        """A copy of the local offset table."""
        return {unwrap_queue(mq, self.namespace): off for mq, off in self._offsets.items()}

    async def persist_offsets(self) -> None:
        """Commit every changed local offset to its broker (UPDATE_CONSUMER_OFFSET).

        Raises:
            the first failure, after trying every queue (the failed ones stay to be retried).
        """
        self._check_started()
        await self._persist()

    async def _persist(self) -> None:
        pending = sorted(self._dirty)
        results = await asyncio.gather(
            *(self._commit(mq, self._offsets[mq]) for mq in pending), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    async def _commit(self, mq: MessageQueue, offset: int) -> None:
        header = UpdateConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id, offset)
        check_response(await self._invoke_broker(mq, RequestCode.UPDATE_CONSUMER_OFFSET, header))
        if self._offsets.get(mq) == offset:  # unless it moved on while we were committing
            self._dirty.discard(mq)

    async def _persist_quietly(self) -> None:
        try:
            await self._persist()
        except Exception as e:
            log.warning("group=%s offset persist failed: %r", self.group, e)

    # -- queue bounds ------------------------------------------------------------------------
    async def min_offset(self, mq: MessageQueue) -> int:
        """The offset of the oldest message still stored in ``mq``."""
        mq = self._q(mq)
        header = GetMinOffsetRequestHeader(mq.topic, mq.queue_id)
        resp = check_response(await self._invoke_broker(mq, RequestCode.GET_MIN_OFFSET, header))
        return GetMinOffsetResponseHeader.from_ext_fields(resp.ext_fields).offset

    async def max_offset(self, mq: MessageQueue) -> int:
        """One past the offset of the newest message of ``mq``."""
        mq = self._q(mq)
        header = GetMaxOffsetRequestHeader(mq.topic, mq.queue_id)
        resp = check_response(await self._invoke_broker(mq, RequestCode.GET_MAX_OFFSET, header))
        return GetMaxOffsetResponseHeader.from_ext_fields(resp.ext_fields).offset

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The offset of the first message of ``mq`` stored at or after ``timestamp_ms``."""
        mq = self._q(mq)
        header = SearchOffsetByTimestampRequestHeader(mq.topic, mq.queue_id, timestamp_ms)
        resp = check_response(
            await self._invoke_broker(mq, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header))
        return SearchOffsetByTimestampResponseHeader.from_ext_fields(resp.ext_fields).offset

    async def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        """The store time (ms) of the oldest message still in ``mq``."""
        mq = self._q(mq)
        header = GetEarliestMsgStoretimeRequestHeader(mq.topic, mq.queue_id)
        resp = check_response(
            await self._invoke_broker(mq, RequestCode.GET_EARLIEST_MSG_STORETIME, header))
        return GetEarliestMsgStoretimeResponseHeader.from_ext_fields(resp.ext_fields).timestamp

    async def _invoke_broker(self, mq: MessageQueue, code: int, header: Any) -> RemotingCommand:
        """Offsets and queue bounds: the master when it is there, else a slave."""
        self._check_started()
        addr, _ = await self._instance.find_read_address(mq.broker_name, mq.topic)
        cmd = RemotingCommand.request(code, header.to_ext_fields())
        try:
            return await self._instance.remoting.invoke(addr, cmd, self._instance.rpc_timeout)
        except (ConnectionClosedError, TimeoutError):
            self._instance.broker_failed(addr)
            raise


class PullConsumer(BlockingClient[AsyncPullConsumer]):
    """Pulls messages from queues the caller chooses (blocking); arguments of
    :class:`AsyncPullConsumer`. Any thread may call it."""

    _thread_name = "orbitmq-pull-consumer"

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None, **options: Any) -> None:
        super().__init__(AsyncPullConsumer(group, namesrv, **options))

    @property
    def client_id(self) -> str:
        return self._client.client_id

    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """See :meth:`AsyncPullConsumer.fetch_queues`."""
        return self._call(self._client.fetch_queues(topic))

    def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        expression: ExpressionLike = "*",
        *,
        timeout: float | None = None,
        suspend: float | None = None,
    ) -> PullResult:
        """See :meth:`AsyncPullConsumer.pull` (the expression is parsed here, in the caller's
        thread)."""
        if not isinstance(expression, MessageSelector):
            expression = selector_of(expression)
        return self._call(self._client.pull(mq, offset, max_nums, expression,
                                            timeout=timeout, suspend=suspend))

    def pull_raw(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        expression: ExpressionLike = "*",
        *,
        timeout: float | None = None,
        suspend: float | None = None,
        bulk: bool = False,
    ) -> RawPullResult:
        """See :meth:`AsyncPullConsumer.pull_raw`."""
        if not isinstance(expression, MessageSelector):
            expression = selector_of(expression)
        return self._call(self._client.pull_raw(mq, offset, max_nums, expression,
                                                timeout=timeout, suspend=suspend, bulk=bulk))

    def fetch_offset(self, mq: MessageQueue, *, from_store: bool = True) -> int:
        """See :meth:`AsyncPullConsumer.fetch_offset`."""
        return self._call(self._client.fetch_offset(mq, from_store=from_store))

    def update_offset(self, mq: MessageQueue, offset: int) -> None:
        """See :meth:`AsyncPullConsumer.update_offset`."""
        self._call(_run_sync(self._client.update_offset, mq, offset))

    def local_offsets(self) -> dict[MessageQueue, int]:
        """See :meth:`AsyncPullConsumer.local_offsets`."""
        return self._call(_run_sync(self._client.local_offsets))

    def persist_offsets(self) -> None:
        """See :meth:`AsyncPullConsumer.persist_offsets`."""
        self._call(self._client.persist_offsets())

    def min_offset(self, mq: MessageQueue) -> int:
        return self._call(self._client.min_offset(mq))

    def max_offset(self, mq: MessageQueue) -> int:
        return self._call(self._client.max_offset(mq))

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._call(self._client.search_offset(mq, timestamp_ms))

    def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        return self._call(self._client.earliest_msg_store_time(mq))


async def _run_sync(fn: Any, *args: Any) -> Any:
    """Run a plain method on the client's loop, so the offset table is only touched there."""
    return fn(*args)
