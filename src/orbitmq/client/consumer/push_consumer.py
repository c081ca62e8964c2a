"""The push consumer: AsyncPushConsumer (asyncio) and PushConsumer (blocking twin).

The consumer the application does not drive: it joins its group, takes its share of the
subscribed topics' queues, pulls them with long polling and calls the listener with the messages,
retrying failed ones through the broker. Moving parts, one module each (as aiokafka's consumer/
splits fetcher and coordinator):

- :mod:`rebalance_service` + :mod:`rebalance`: which queues this member holds;
- :mod:`pull_service`: one long-polling pull loop per held queue, with flow control;
- :mod:`process_queue`: a held queue's pulled, unacknowledged messages;
- :mod:`consume_concurrently` / :mod:`consume_orderly`: calling the listener, acknowledging,
  sending failed messages back (or suspending an orderly queue);
- :mod:`offset_store`: offsets on the brokers (clustering) or in a local file (broadcasting);
- :mod:`running_info`: the answer to GET_CONSUMER_RUNNING_INFO.

Everything runs on one event loop; plain-function listeners run on a thread pool of
``consume_thread_nums`` threads, coroutine listeners on the loop.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Self

import orjson

from orbitmq.client._blocking import BlockingClient
from orbitmq.client.consumer.consume_concurrently import ConcurrentConsumeService
from orbitmq.client.consumer.consume_orderly import OrderlyConsumeService
from orbitmq.client.consumer.consume_types import (
    PUSH_RENAMES,
    ConsumeFrom,
    ConsumeResult,
    Listener,
    ListenerRunner,
    PushConsumerConfig,
    cancel_and_wait,
    retry_topic,
)
from orbitmq.client.consumer.message_selector import ExpressionLike, selector_of
from orbitmq.client.consumer.offset_store import LocalOffsetStore, OffsetStore, RemoteOffsetStore
from orbitmq.client.consumer.pull_service import PullService
from orbitmq.client.consumer.rebalance import AllocateAveragely, AllocateStrategy
from orbitmq.client.consumer.rebalance_service import RebalanceService
from orbitmq.client.consumer.running_info import build_running_info
from orbitmq.client.instance import ClientInstance, check_response
from orbitmq.client.namespace import client_namespace, wrap
from orbitmq.client.producer.producer import trace_dispatcher
from orbitmq.client.renamed import renamed_options
from orbitmq.client.trace.consume import TracedListenerRunner
from orbitmq.client.trace.dispatcher import (
    TraceConfig,
    TraceStats,
)
from orbitmq.client.validation import check_group, check_topic
from orbitmq.errors import ClientError, ConnectionClosedError, TimeoutError
from orbitmq.protocol.bodies import (
    CheckClientRequestBody,
    ConsumerData,
    ConsumeType,
    ExpressionType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
)
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    GetConsumerRunningInfoRequestHeader,
)
from orbitmq.protocol.message import MessageExt, java_string_hash
from orbitmq.protocol.msgid import UniqIdGenerator
from orbitmq.security.signature import Credentials
from orbitmq.security.tls import ClientTls
from orbitmq.transport.connection import RemotingConnection

__all__ = ["AsyncPushConsumer", "PushConsumer", "build_subscription"]

log = logging.getLogger(__name__)


def build_subscription(topic: str, expression: ExpressionLike) -> SubscriptionData:
    """The SubscriptionData of an expression: a TAG one (``*`` or ``"a || b"``, with its tags and
    their hash codes) or a MessageSelector (SQL92: no tags).

    Raises:
        ExpressionError: the expression does not parse.
    """
    selector = selector_of(expression)
    tags = sorted(selector.tags or ())
    return SubscriptionData(topic, selector.expression, tags, [java_string_hash(t) for t in tags],
                            sub_version=int(time.time() * 1000),
                            expression_type=selector.expression_type.value)


def _enum_member(enum_cls: Any, value: Any) -> Any:
    """An enum member from a member or its name (``"BROADCASTING"``, ``"first"``)."""
    if isinstance(value, str):
        try:
            return enum_cls[value.strip().upper()]
        except KeyError:
            names = ", ".join(enum_cls.__members__)
            raise ClientError(f"{value!r} is not one of {names}") from None
    return enum_cls(value)


def _timestamp_ms(value: int | float | datetime.datetime | None) -> int | None:
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)


class AsyncPushConsumer:
    """Consumes a group's share of its subscriptions and calls listeners (asyncio).

    Args:
        group: the consumer group.
        namesrv: name server addresses, ``"host:port;host:port"`` (None: the environment).
        orderly: consume each queue in order, one batch at a time (locks queues on the brokers).
        message_model: CLUSTERING (the group shares the queues) or BROADCASTING (every member
            gets every message; offsets in a local file; no retries).
        consume_from: where to start when the group has no offset yet (see ConsumeFrom).
        consume_timestamp: the TIMESTAMP start (epoch ms or a datetime); default 30 min ago.
        consume_thread_nums: listener calls at once (threads for plain functions).
        consume_message_batch_max_size: messages per listener call.
        pull_batch_size: messages per pull.
        pull_threshold_for_queue, pull_threshold_size_for_queue_mib,
        consume_concurrently_max_span: flow control per queue: pulling pauses past this many
            cached messages, MiB of bodies, or offset span between the lowest and highest.
        rebalance_strategy: an AllocateStrategy (default AllocateAveragely).
        max_reconsume_times: retries before the dead letter queue; -1: 16 for concurrent
            consumers, unlimited for orderly ones (RocketMQ's defaults).
        suspend_current_queue_time_ms: orderly: pause after a failed batch.
        offset_store_dir, instance_name: broadcasting offsets live in
            ``{offset_store_dir}/{instance_name}/{group}/offsets.json``.
        persist_consumer_offset_interval_ms: milliseconds between offset commits.
        rebalance_interval_ms: milliseconds between rebalances (also on membership changes).
        poll_name_server_interval, heartbeat_broker_interval: as for the producer.
        credentials: what every request is signed with (:class:`orbitmq.Credentials`; None:
            unsigned).
        tls: TLS for every connection (:class:`orbitmq.ClientTls`; True: the system's roots;
            False: plaintext; None: ``ORBITMQ_TLS_ENABLE`` and ``ORBITMQ_TLS_CLIENT_*``).
        enable_msg_trace: write SubBefore and SubAfter trace records around every listener
            call (RocketMQ's ``enableMsgTrace``; docs/trace.md), in batches from a bounded
            buffer that never holds consumption up (``trace_stats`` counts what was dropped).
        customized_trace_topic: the trace topic (default RMQ_SYS_TRACE_TOPIC).
        trace_config: the trace buffer's and batches' bounds (:class:`orbitmq.TraceConfig`).
        tuning: further PushConsumerConfig fields (lock_renew_interval_ms,
            lock_max_live_time_ms, pull_suspend_time_ms, pull_timeout_ms,
            pull_delay_on_exception_ms, await_termination_ms). The times' names without their
            unit (``rebalance_interval=10.0``, in seconds) still work, with a
            DeprecationWarning.
        namespace: the namespace the group and every subscribed topic live in (RocketMQ's
            ``NAMESPACE%name``, docs/rocketmq5.md "Namespaces"); listeners see bare topics.
            None: names are used as given.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        orderly: bool = False,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from: ConsumeFrom = ConsumeFrom.LAST,
        consume_timestamp: int | datetime.datetime | None = None,
        rebalance_strategy: AllocateStrategy | None = None,
        poll_name_server_interval: float = 30.0,
        heartbeat_broker_interval: float = 30.0,
        credentials: Credentials | None = None,
        tls: ClientTls | bool | None = None,
        namespace: str | None = None,
        enable_msg_trace: bool = False,
        customized_trace_topic: str | None = None,
        trace_config: TraceConfig | None = None,
        **tuning: Any,
    ) -> None:
        self.namespace = client_namespace(namespace)
        try:
            self.config = PushConsumerConfig(
                check_group(wrap(self.namespace, group)), orderly=orderly,
                message_model=_enum_member(MessageModel, message_model),
                consume_from=_enum_member(ConsumeFrom, consume_from),
                consume_timestamp_ms=_timestamp_ms(consume_timestamp),
                **renamed_options(tuning, PUSH_RENAMES, "PushConsumer"))
        except TypeError as e:
            raise ClientError(f"bad push consumer option: {e}") from None
        self.group = self.config.group
        self.strategy: AllocateStrategy = rebalance_strategy or AllocateAveragely()
        self._instance = ClientInstance(namesrv, poll_name_server_interval=poll_name_server_interval,
                                        heartbeat_broker_interval=heartbeat_broker_interval,
                                        credentials=credentials, tls=tls)
        self._subscriptions: dict[str, SubscriptionData] = {}
        self._listeners: dict[str, Listener] = {}
        self._started = False
        self._started_ms = 0
        self._tasks: set[asyncio.Task[object]] = set()
        self._offsets: OffsetStore | None = None
        self._rebalance: RebalanceService | None = None
        self._pull: PullService | None = None
        self._consume: ConcurrentConsumeService | OrderlyConsumeService | None = None
        self._runner: ListenerRunner | None = None
        self._trace = trace_dispatcher(enable_msg_trace, self.group, "CONSUMER", namesrv,
                                       customized_trace_topic, trace_config, credentials, tls)

    @property
    def client_id(self) -> str:
        return self._instance.client_id

    @property
    def trace_stats(self) -> TraceStats | None:
        """The message trace's counters (records sent, dropped, lost); None without tracing."""
        return self._trace.stats if self._trace is not None else None

    @property
    def instance(self) -> ClientInstance:
        return self._instance

    # -- subscriptions ---------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: ExpressionLike = "*",
                  listener: Listener | None = None) -> Any:
        """Subscribe to ``topic``'s messages that ``expression`` selects: a TAG expression
        (``"*"``, ``"a || b"``) or a MessageSelector (``MessageSelector.by_sql("a > 5")``).
        Without ``listener``, returns a decorator that registers the function::

            @consumer.subscribe("OrderTopic", "created || paid")
            def on_orders(messages, context):
                return ConsumeResult.SUCCESS

        The listener gets ``(list[MessageExt], ConsumeContext)`` and returns a ConsumeResult
        (may be a coroutine function). May be called after start (call it on the consumer's loop).

        Raises:
            ExpressionError: the expression does not parse (raised here, before anything is sent).
        """
        topic = wrap(self.namespace, topic)
        check_topic(topic)
        expression = selector_of(expression)
        if listener is None:
            def register(fn: Listener) -> Listener:
                self.subscribe(topic, expression, fn)
                return fn

            return register
        if not callable(listener):
            raise ClientError(f"listener must be callable, got {type(listener).__name__}")
        self._subscriptions[topic] = build_subscription(topic, expression)
        self._listeners[topic] = listener
        if self._started:
            self._spawn(self._after_subscription_change(topic))
        return listener

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` (its queues are let go at the next rebalance)."""
        topic = wrap(self.namespace, topic)
        self._subscriptions.pop(topic, None)
        self._listeners.pop(topic, None)
        if self._started:
            self._spawn(self._after_subscription_change(None))

    async def _after_subscription_change(self, topic: str | None) -> None:
        if topic is not None:
            await self._instance.update_route(topic)
        await self._instance.send_heartbeat_to_all()
        if self._rebalance is not None:
            self._rebalance.request()

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, ConsumeType.CONSUME_PASSIVELY, self.config.message_model,
                            self.config.consume_from.where,
                            [s for _, s in sorted(self._subscriptions.items())])

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> Self:
        """Join the group and start consuming.

        Raises:
            ClientError: no subscription, or already shut down.
        """
        if self._started:
            return self
        if not self._listeners:
            raise ClientError("subscribe to at least one topic (with a listener) before start()")
        cfg = self.config
        if cfg.clustering:
            self._subscriptions[retry_topic(self.group)] = build_subscription(
                retry_topic(self.group), "*")
        self._build_services()
        assert self._offsets is not None and self._rebalance is not None
        await self._offsets.load()
        await self._instance.start()
        if self._trace is not None:
            await self._trace.start()
        self._instance.consumers[self.group] = self._consumer_data
        self._instance.on_consumer_ids_changed(self.group, lambda _g: self._on_ids_changed())
        self._instance.on_connection_lost(self._on_connection_lost)
        self._instance.register_request_handler(RequestCode.GET_CONSUMER_RUNNING_INFO,
                                                self._on_running_info)
        self._started = True
        self._started_ms = int(time.time() * 1000)
        for topic in list(self._subscriptions):
            try:
                await self._instance.update_route(topic)
            except Exception as e:  # the rebalance asks again
                log.warning("route of topic=%s unavailable at start: %r", topic, e)
        try:
            await self._check_client_config()
        except BaseException:
            await self.shutdown()
            raise
        await self._instance.send_heartbeat_to_all()
        self._instance.schedule_periodic(cfg.persist_consumer_offset_interval_ms / 1000,
                                         self.persist_offsets)
        if cfg.orderly and cfg.clustering:
            self._instance.schedule_periodic(cfg.lock_renew_interval_ms / 1000, self._renew_locks)
        self._rebalance.start()
        log.info("push consumer started group=%s client=%s model=%s orderly=%s", self.group,
                 self.client_id, cfg.message_model.name, cfg.orderly)
        return self

    async def _check_client_config(self) -> None:
        """CHECK_CLIENT_CONFIG for each SQL92 subscription, to one broker of its topic (as Java
        consumers do at start): a broker that cannot filter by it refuses now, not every pull.

        Raises:
            BrokerError: FILTER_NOT_SUPPORTED or SUBSCRIPTION_PARSE_FAILED from the broker.
        """
        for topic, sub in sorted(self._subscriptions.items()):
            if sub.expression_type != ExpressionType.SQL92:
                continue
            route = self._instance.cached_route(topic)
            names = sorted({bd.broker_name for bd in route.broker_datas}) if route else []
            for name in names:
                addr = self._instance.broker_addr(name)
                if addr is None:
                    continue
                body = CheckClientRequestBody(self.client_id, self.group, sub).to_json()
                cmd = RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, body=body)
                check_response(await self._instance.remoting.invoke(addr, cmd,
                                                                     self._instance.rpc_timeout))

    def _build_services(self) -> None:
        cfg = self.config
        self._offsets = (RemoteOffsetStore(self.group, self._invoke_read) if cfg.clustering
                         else LocalOffsetStore(self.group, cfg.local_offset_path()))
        failure = (ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT if cfg.orderly
                   else ConsumeResult.RECONSUME_LATER)
        if self._trace is not None:
            self._runner = TracedListenerRunner(
                self._listeners, cfg.consume_thread_nums, failure, namespace=self.namespace,
                dispatcher=self._trace, ids=UniqIdGenerator(self._instance.ip))
        else:
            self._runner = ListenerRunner(self._listeners, cfg.consume_thread_nums, failure,
                                          namespace=self.namespace)
        service_cls = OrderlyConsumeService if cfg.orderly else ConcurrentConsumeService
        self._consume = service_cls(cfg, self._runner, self._offsets, self._send_back)
        self._rebalance = RebalanceService(cfg, self._instance, self.strategy, self._subscriptions,
                                           self._offsets, self._invoke_read)
        self._pull = PullService(cfg, self._instance, self._subscriptions, self._offsets,
                                 self._consume, self._rebalance.forget)
        self._rebalance.pull = self._pull
        if isinstance(self._consume, OrderlyConsumeService):
            self._rebalance.kick = self._consume.kick

    async def shutdown(self) -> None:
        """Stop pulling, let running listener calls finish (up to ``await_termination_ms``),
        commit offsets, unlock orderly queues, leave the group and close the connections."""
        if not self._started:
            await self._instance.shutdown()
            return
        self._started = False
        assert self._rebalance and self._pull and self._consume and self._runner
        await self._rebalance.stop()
        await self._pull.shutdown()
        await self._consume.shutdown(self.config.await_termination_ms / 1000)
        await self.persist_offsets()
        if self.config.orderly and self.config.clustering:
            await self._rebalance.unlock_all()
        await cancel_and_wait(list(self._tasks))
        if self._trace is not None:
            await self._trace.shutdown()
        await self._instance.shutdown()
        self._runner.shutdown()
        log.info("push consumer shut down group=%s client=%s", self.group, self.client_id)

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    # -- what the services need ------------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[object] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_connection_lost(self, addr: str) -> None:
        if self._started and self._rebalance is not None:
            self._rebalance.broker_lost(addr)

    def _on_ids_changed(self) -> None:
        if self._started and self._rebalance is not None:
            self._rebalance.request()

    async def _renew_locks(self) -> None:
        if self._started and self._rebalance is not None:
            await self._rebalance.lock_all()

    async def _invoke(self, mq: MessageQueue, code: int, header: Any) -> RemotingCommand:
        addr = await self._instance.find_broker_addr(mq.broker_name, mq.topic)
        cmd = RemotingCommand.request(code, header.to_ext_fields())
        return await self._instance.remoting.invoke(addr, cmd, self._instance.rpc_timeout)

    async def _invoke_read(self, mq: MessageQueue, code: int, header: Any) -> RemotingCommand:
        """Offsets and queue bounds: the master when it is there, else a slave (RocketMQ's
        clients commit offsets to a slave while the master is gone; the master's copy wins
        again once it is back)."""
        addr, _ = await self._instance.find_read_address(mq.broker_name, mq.topic)
        cmd = RemotingCommand.request(code, header.to_ext_fields())
        try:
            return await self._instance.remoting.invoke(addr, cmd, self._instance.rpc_timeout)
        except (ConnectionClosedError, TimeoutError):
            self._instance.broker_failed(addr)
            raise

    async def _send_back(self, msg: MessageExt, mq: MessageQueue, delay_level: int) -> bool:
        """CONSUMER_SEND_MSG_BACK: the broker re-stores the failed message for a later retry."""
        header = ConsumerSendMsgBackRequestHeader(
            offset=msg.commit_log_offset, group=self.group, delay_level=delay_level,
            origin_msg_id=msg.msg_id, origin_topic=wrap(self.namespace, msg.topic),
            max_reconsume_times=self.config.effective_max_reconsume_times)
        try:
            check_response(await self._invoke(mq, RequestCode.CONSUMER_SEND_MSG_BACK, header))
            return True
        except Exception as e:
            log.warning("send back failed group=%s msg=%s queue=%s: %r", self.group, msg.msg_id,
                        mq, e)
            return False

    async def persist_offsets(self) -> None:
        """Commit the offsets of the held queues now (also done periodically and at shutdown)."""
        if self._offsets is None or self._rebalance is None:
            return
        try:
            await self._offsets.persist(list(self._rebalance.table))
        except Exception as e:
            log.warning("offset persist failed group=%s: %r", self.group, e)

    # -- introspection ---------------------------------------------------------------------------
    def assigned_queues(self, topic: str | None = None) -> list[MessageQueue]:
        """The queues this member holds now (of ``topic``, or of every subscription)."""
        table = self._rebalance.table if self._rebalance is not None else {}
        return sorted(mq for mq in table if topic is None or mq.topic == topic)

    def running_info(self) -> dict[str, Any]:
        """What GET_CONSUMER_RUNNING_INFO answers (see :mod:`orbitmq.client.consumer.running_info`)."""
        if self._rebalance is None or self._offsets is None or self._consume is None:
            raise ClientError("consumer is not started")
        status: dict[str, Any] = {"pulledTotal": self._pull.pulled_messages if self._pull else 0}
        status.update(self._consume.stats.as_dict())
        return build_running_info(self.config, self.client_id, self.strategy.name,
                                  self._started_ms, self._subscriptions, self._rebalance.table,
                                  self._offsets, status, self._rebalance.rounds)

    def _on_running_info(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        header = GetConsumerRunningInfoRequestHeader.from_ext_fields(cmd.ext_fields)
        if header.consumer_group != self.group or not self._started:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"The Consumer Group <{header.consumer_group}> not exist in this "
                                "consumer")
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(self.running_info()))


class PushConsumer(BlockingClient[AsyncPushConsumer]):
    """Consumes a group's share of its subscriptions and calls listeners (blocking); takes the
    arguments of :class:`AsyncPushConsumer`. Listeners run on the consume thread pool."""

    _thread_name = "orbitmq-push-consumer"

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None,
                 **options: Any) -> None:
        super().__init__(AsyncPushConsumer(group, namesrv, **options))

    @property
    def client_id(self) -> str:
        return self._client.client_id

    @property
    def group(self) -> str:
        return self._client.group

    @property
    def trace_stats(self) -> TraceStats | None:
        """See :attr:`AsyncPushConsumer.trace_stats`."""
        return self._client.trace_stats

    def subscribe(self, topic: str, expression: ExpressionLike = "*",
                  listener: Listener | None = None) -> Any:
        """See :meth:`AsyncPushConsumer.subscribe` (decorator form too)."""
        expression = selector_of(expression)  # a bad expression raises in the caller's thread
        if listener is None:
            check_topic(topic)

            def register(fn: Listener) -> Listener:
                self.subscribe(topic, expression, fn)
                return fn

            return register
        if self._loop is None:
            return self._client.subscribe(topic, expression, listener)
        return self._call(_on_loop(self._client.subscribe, topic, expression, listener))

    def unsubscribe(self, topic: str) -> None:
        """See :meth:`AsyncPushConsumer.unsubscribe`."""
        if self._loop is None:
            self._client.unsubscribe(topic)
        else:
            self._call(_on_loop(self._client.unsubscribe, topic))

    def assigned_queues(self, topic: str | None = None) -> list[MessageQueue]:
        """See :meth:`AsyncPushConsumer.assigned_queues`."""
        if self._loop is None:
            return []
        return self._call(_on_loop(self._client.assigned_queues, topic))

    def running_info(self) -> dict[str, Any]:
        """See :meth:`AsyncPushConsumer.running_info`."""
        return self._call(_on_loop(self._client.running_info))

    def persist_offsets(self) -> None:
        """See :meth:`AsyncPushConsumer.persist_offsets`."""
        self._call(self._client.persist_offsets())


async def _on_loop(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a plain method on the consumer's loop, where its state lives."""
    return fn(*args)
