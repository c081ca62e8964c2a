"""The producer: AsyncProducer (asyncio) and Producer (blocking twin).

A send picks a write queue round robin over the topic's route, sends SEND_MESSAGE_V2 to that
queue's master and, when the broker cannot be reached or answers a retriable code, tries again up
to ``retry_times_when_send_failed`` times on a queue of another broker, all within one
``send_timeout`` budget (RocketMQ's behaviour). A topic without a route is sent over TBW102's
brokers, which then create it. Every message gets a UNIQ_KEY, its ``msg_id`` for consumers.

With ``auto_batch=True``, concurrent plain sends to one topic are collected by a
:class:`~orbitmq.client.producer.accumulator.SendAccumulator` and leave as one SEND_BATCH_MESSAGE (RocketMQ
5's ``setAutoBatch``), each caller still getting its own SendResult.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import math
import time
from collections.abc import Coroutine, Sequence
from typing import Any, Self, TypeVar

from orbitmq.client._blocking import BlockingClient
from orbitmq.client.instance import ClientInstance
from orbitmq.client.namespace import client_namespace, unwrap, unwrap_queue, wrap
from orbitmq.client.producer.accumulator import SendAccumulator
from orbitmq.client.producer.column_send import (
    check_chunk_limits,
    check_send_topic,
    message_columns,
    prepare_columns,
    send_in_chunks,
)
from orbitmq.client.producer.selectors import MessageQueueSelector
from orbitmq.client.producer.send_codec import (
    PreparedMessage,
    build_send_request,
    check_batch,
    encode_message,
    parse_send_response,
    prepare_batch,
    prepare_message,
    split_batch_result,
)
from orbitmq.client.results import SendResult
from orbitmq.client.route import TopicPublishInfo, publish_info_from_route
from orbitmq.client.trace.dispatcher import (
    TraceConfig,
    TraceDispatcher,
    TraceSender,
    TraceStats,
    trace_topic_of,
)
from orbitmq.client.trace.records import pub_record, pub_records
from orbitmq.client.validation import body_size, check_group, check_message, check_topic
from orbitmq.errors import (
    BrokerError,
    ClientError,
    ConnectionClosedError,
    TimeoutError,
    TopicNotFoundError,
    broker_error,
)
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.column_batch import IdBlock, MessageColumns
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import RecallMessageRequestHeader
from orbitmq.protocol.message import Message
from orbitmq.protocol.msgid import UniqIdGenerator
from orbitmq.protocol.recall_handle import decode_recall_handle
from orbitmq.security.signature import Credentials
from orbitmq.security.tls import ClientTls

__all__ = ["AsyncProducer", "Producer", "MAX_MESSAGE_SIZE"]

log = logging.getLogger(__name__)

ROUTE_RETRY_S = 0.1  # a send waiting for a broker set's new master asks the name server this often

MAX_MESSAGE_SIZE = 4 * 1024 * 1024
BATCH_MAX_BYTES = 64 * 1024
BATCH_MAX_MESSAGES = 256
COLUMNS_BATCH_BYTES_MAX = 512 * 1024  # send_columns: one request's target size
COLUMNS_IN_FLIGHT_MAX = 8
_INT32 = range(-0x80000000, 0x80000000)  # a batch entry's flag field
T = TypeVar("T")


class AsyncProducer:
    """Sends messages (asyncio). Use ``async with AsyncProducer(...) as p`` or start/shutdown.

    Args:
        group: the producer group (RocketMQ uses it for transaction checks and statistics).
        namesrv: name server addresses, ``"host:port;host:port"``.
        send_timeout: seconds for one send, retries included.
        retry_times_when_send_failed: extra attempts after a failed one (each on another broker
            when the topic has one).
        compress_over: bodies larger than this many bytes are zlib-compressed.
        max_message_size: the largest body (or batch encoding) accepted, in bytes.
        default_topic_queue_nums: queues per broker for a topic that does not exist yet.
        poll_name_server_interval, heartbeat_broker_interval: seconds between route refreshes
            and between heartbeats.
        unreachable_broker_backoff: seconds during which round robin skips a broker that could
            not be reached or did not answer in time (while other brokers have queues), so that
            one dead or hung broker costs one failed attempt, not one per send until the route
            changes (RocketMQ's latency fault tolerance, simplified); 0 turns it off.
        auto_batch: collect concurrent :meth:`send` calls to one topic into one batch request
            (only sends without selector, delay level or a body over ``compress_over``); each
            still gets its own SendResult, but a batch goes to one queue and fails as a whole.
        batch_max_delay: seconds a batch waits for more messages; 0 sends it at the end of
            the current event-loop iteration.
        batch_max_bytes: the largest batch encoding (a message that does not fit starts the
            next batch); ``max_message_size`` when that is smaller.
        batch_max_messages: the most messages in one batch.
        credentials: an access key and its secret (:class:`orbitmq.Credentials`) every request
            is signed with, for brokers and name servers with authentication on; None: unsigned.
        tls: TLS for every connection (:class:`orbitmq.ClientTls`; True: the system's roots;
            False: plaintext; None: ``ORBITMQ_TLS_ENABLE`` and ``ORBITMQ_TLS_CLIENT_*``).
        namespace: the namespace the group and every topic sent to live in (RocketMQ's
            ``NAMESPACE%name``, docs/rocketmq5.md "Namespaces"); results show bare topics.
            None: names are used as given.
        enable_msg_trace: write a trace record of every answered send to the trace topic
            (RocketMQ's ``enableMsgTrace``; docs/trace.md): in batches, from a bounded buffer,
            never slowing or failing the send (``trace_stats`` counts what was dropped).
        customized_trace_topic: the trace topic (RocketMQ's ``customizedTraceTopic``; default
            RMQ_SYS_TRACE_TOPIC, which brokers create with ``trace_topic_enable``).
        trace_config: the trace buffer's and batches' bounds (:class:`orbitmq.TraceConfig`).
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        send_timeout: float = 3.0,
        retry_times_when_send_failed: int = 2,
        compress_over: int = 4096,
        max_message_size: int = MAX_MESSAGE_SIZE,
        default_topic_queue_nums: int = 4,
        poll_name_server_interval: float = 30.0,
        heartbeat_broker_interval: float = 30.0,
        unreachable_broker_backoff: float = 10.0,
        auto_batch: bool = False,
        batch_max_delay: float = 0.0,
        batch_max_bytes: int = BATCH_MAX_BYTES,
        batch_max_messages: int = BATCH_MAX_MESSAGES,
        credentials: Credentials | None = None,
        tls: ClientTls | bool | None = None,
        namespace: str | None = None,
        enable_msg_trace: bool = False,
        customized_trace_topic: str | None = None,
        trace_config: TraceConfig | None = None,
    ) -> None:
        self.namespace = client_namespace(namespace)
        self.group = check_group(wrap(self.namespace, group))
        if send_timeout <= 0 or retry_times_when_send_failed < 0 or default_topic_queue_nums < 1:
            raise ClientError("send_timeout must be > 0, retries >= 0, default queue nums >= 1")
        _check_batch_options(auto_batch, batch_max_delay, batch_max_bytes, batch_max_messages,
                             send_timeout)
        self.send_timeout = send_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.compress_over = compress_over
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.unreachable_broker_backoff = unreachable_broker_backoff
        self._unreachable: dict[str, float] = {}  # broker name -> loop time it may be tried again
        self._instance = ClientInstance(
            namesrv,
            poll_name_server_interval=poll_name_server_interval,
            heartbeat_broker_interval=heartbeat_broker_interval,
            credentials=credentials,
            tls=tls,
        )
        self._instance.producer_groups.add(self.group)
        self._ids = UniqIdGenerator(self._instance.ip)
        self._publish: dict[str, TopicPublishInfo] = {}
        self._inflight: set[asyncio.Task[Any]] = set()
        self._started = False
        self._accumulator = SendAccumulator(
            self._send_prepared, max_delay=batch_max_delay,
            max_bytes=min(batch_max_bytes, max_message_size),
            max_messages=batch_max_messages, compress_over=compress_over) if auto_batch else None
        self._trace = trace_dispatcher(enable_msg_trace, self.group, "PRODUCER", namesrv,
                                       customized_trace_topic, trace_config, credentials, tls)

    @property
    def client_id(self) -> str:
        return self._instance.client_id

    @property
    def instance(self) -> ClientInstance:
        """The connections, routes and heartbeats underneath."""
        return self._instance

    @property
    def auto_batch(self) -> bool:
        return self._accumulator is not None

    @property
    def trace_stats(self) -> TraceStats | None:
        """The message trace's counters (records sent, dropped, lost); None without tracing."""
        return self._trace.stats if self._trace is not None else None

    async def start(self) -> Self:
        await self._instance.start()
        if self._trace is not None:
            await self._trace.start()
        if self._accumulator is not None:
            self._accumulator.open()
        self._started = True
        return self

    async def shutdown(self) -> None:
        """Wait for asynchronous sends still under way (each within its timeout), send the
        messages auto-batching holds and wait for their answers, unregister from the brokers and
        close the connections."""
        acc = self._accumulator
        if acc is not None:
            acc.flush_all()
        if self._inflight:
            await asyncio.wait(list(self._inflight), timeout=self.send_timeout + 1)
        if acc is not None:
            await acc.drain(self.send_timeout + 1)
        self._started = False
        if self._trace is not None:
            await self._trace.shutdown()
        await self._instance.shutdown()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    # -- public sends ------------------------------------------------------------------------
    async def send(
        self,
        msg: Message,
        selector: MessageQueueSelector | None = None,
        arg: object = None,
        *,
        timeout: float | None = None,
    ) -> SendResult:
        """Send one message and wait for the broker's receipt.

        With ``selector``, the queue is ``selector(queues, msg, arg)`` and there is no retry on
        another queue (that would break the order the selector keeps).

        With ``auto_batch``, a send without selector, delay level or priority and with a body
        of at most ``compress_over`` bytes may share one request (and so one queue and one fate) with
        other sends to the same topic; its SendResult is its own all the same.

        Raises:
            ClientError: invalid message or producer not started.
            BrokerError: the broker refused it, or the topic has no route (TOPIC_NOT_EXIST).
            TimeoutError, ConnectionClosedError: every attempt failed to get an answer.
        """
        self._check_started()
        msg = self._in_namespace(msg)
        check_message(msg, self.max_message_size)
        trace = self._trace
        started = time.time() if trace is not None else 0.0
        acc = self._accumulator
        if (acc is not None and selector is None and msg.delay_level == 0 and msg.priority is None
                and not msg.lite_topic
                and msg.flag in _INT32 and body_size(msg.body) <= self.compress_over):
            loop = asyncio.get_running_loop()
            deadline = loop.time() + (self.send_timeout if timeout is None else timeout)
            result = await acc.add(msg.topic, encode_message(msg, self._ids.next()), deadline, loop)
        else:
            prepared = prepare_message(msg, self._ids.next(), self.compress_over)
            sent = await self._dispatch(prepared, msg, selector, arg, timeout, oneway=False)
            assert sent is not None
            result = sent
        if trace is not None:
            try:
                pub_record(trace, unwrap(self.group, self.namespace), msg, result,
                           self._instance.broker_addr(result.queue.broker_name) or "", started,
                           max(0, int((time.time() - started) * 1000)), namespace=self.namespace)
            except Exception as e:  # a bug in tracing must not turn a stored message into an error
                log.warning("trace record of a send to %s not written: %r", msg.topic, e)
        return self._shown(result)

    def _trace_sent(self, trace: TraceDispatcher, messages: Sequence[Message],
                    results: Sequence[SendResult], started: float) -> None:
        """The Pub records of answered sends (never raises: a trace does not fail a send)."""
        try:
            addr = self._instance.broker_addr(results[0].queue.broker_name) or ""
            pub_records(trace, unwrap(self.group, self.namespace), messages, results, addr,
                        started, namespace=self.namespace)
        except Exception as e:  # a bug in tracing must not turn a stored message into an error
            log.warning("trace record of a send to %s not written: %r", messages[0].topic, e)

    def send_async(
        self, msg: Message, selector: MessageQueueSelector | None = None, arg: object = None
    ) -> asyncio.Task[SendResult]:
        """Start sending ``msg`` and return at once; await the task (or add a callback) for the
        SendResult. Shutdown waits for these sends."""
        return asyncio.ensure_future(self.tracked(self.send(msg, selector, arg)))

    async def send_oneway(
        self, msg: Message, selector: MessageQueueSelector | None = None, arg: object = None
    ) -> None:
        """Send without waiting for any answer: one attempt, no receipt, lowest latency."""
        self._check_started()
        msg = self._in_namespace(msg)
        check_message(msg, self.max_message_size)
        prepared = prepare_message(msg, self._ids.next(), self.compress_over)
        await self._dispatch(prepared, msg, selector, arg, None, oneway=True)

    async def send_batch(
        self, messages: Sequence[Message], *, timeout: float | None = None
    ) -> SendResult:
        """Send messages of one topic as one request (SEND_BATCH_MESSAGE): one queue, one
        write on the broker. ``msg_id`` of the result joins the messages' ids with commas.

        Raises:
            ClientError: empty, several topics, delayed messages, or over ``max_message_size``.
        """
        self._check_started()
        messages = [self._in_namespace(m) for m in messages]
        for msg in messages:
            check_message(msg, self.max_message_size)
        started = time.time() if self._trace is not None else 0.0
        topic = check_batch(messages)
        columns = message_columns(messages)
        if columns is None:  # reserved property names: the per-Message encoder places them
            prepared = prepare_batch(messages, [self._ids.next() for _ in messages],
                                     self.max_message_size)
        else:
            size_max = self.max_message_size
            prepared, rows = prepare_columns(topic, columns, 0, IdBlock(*self._ids.next_block(
                len(messages))), len(messages), size_max, size_max)
            if rows < len(messages):
                raise ClientError(f"batch of {len(messages)} messages exceeds the maximum "
                                  f"{size_max} bytes (the first {rows} fit)")
        result = await self._dispatch(prepared, messages[0], None, None, timeout, oneway=False)
        assert result is not None
        if self._trace is not None:
            self._trace_sent(self._trace, messages,
                             split_batch_result(result, result.msg_id.split(",")), started)
        return self._shown(result)

    async def send_columns(
        self, topic: str, columns: MessageColumns, *, timeout: float | None = None,
        batch_rows_max: int = BATCH_MAX_MESSAGES, batch_bytes_max: int = COLUMNS_BATCH_BYTES_MAX,
        in_flight_max: int = COLUMNS_IN_FLIGHT_MAX,
    ) -> list[SendResult]:
        """Send rows given as columns (``protocol.column_batch``: lists, or Arrow-layout
        buffers read in place), without a Message object per row: for bulk writers.

        The rows go out as SEND_BATCH_MESSAGE requests of up to ``batch_rows_max`` rows and
        ``batch_bytes_max`` bytes (a larger row alone), ``in_flight_max`` at a time, each to a
        queue of the round robin with the retries of :meth:`send`; one SendResult per request,
        in row order (``msg_id`` joins the ids of its rows). No rows: no request.

        Raises:
            ClientError: a bad topic or row (named: earlier requests may have been sent), or
                limits out of range.
            BrokerError, TimeoutError, ConnectionClosedError: a request failed (the first in
                row order; nothing more was sent after it, earlier ones were stored).
        """
        self._check_started()
        topic = wrap(self.namespace, topic)
        check_send_topic(topic)
        check_chunk_limits(batch_rows_max, batch_bytes_max, in_flight_max)
        size_max = self.max_message_size
        bytes_max = min(batch_bytes_max, size_max)
        rows = len(columns)
        loop = asyncio.get_running_loop()
        budget = self.send_timeout if timeout is None else timeout

        def encode(start: int) -> tuple[PreparedMessage, int]:
            ids = IdBlock(*self._ids.next_block(min(batch_rows_max, rows - start)))
            return prepare_columns(topic, columns, start, ids, batch_rows_max, bytes_max, size_max)

        async def send(prepared: PreparedMessage) -> SendResult:
            return await self._send_prepared(prepared, loop.time() + budget)

        return [self._shown(r) for r in await send_in_chunks(rows, encode, send, in_flight_max)]

    async def recall_message(self, topic: str, recall_handle: str, *,
                             timeout: float | None = None) -> str:
        """Cancel a timer message that has not been delivered yet (RocketMQ 5.3's
        RECALL_MESSAGE); the recalled message's id.

        ``recall_handle`` is the :attr:`SendResult.recall_handle` of its send; it names the
        broker that holds the message, which the broker needs ``recall_message_enable`` for.

        Raises:
            ClientError: the handle is not one (it cannot be decoded), or its broker is in no
                route of ``topic``.
            BrokerError: the broker refused, with RocketMQ's code and remark: e.g.
                ILLEGAL_OPERATION "recall failed, timestamp invalid" when the message's time
                has come (it may have been delivered), NO_PERMISSION with recall off.
        """
        self._check_started()
        check_topic(topic)
        try:
            handle = decode_recall_handle(recall_handle)
        except BrokerError as e:
            raise ClientError(f"recall handle refused: {e.remark}") from None
        budget = self.send_timeout if timeout is None else timeout
        addr = await self._instance.find_broker_addr(handle.broker_name, topic)
        header = RecallMessageRequestHeader(topic=topic, recall_handle=recall_handle,
                                            producer_group=self.group,
                                            broker_name=handle.broker_name)
        cmd = RemotingCommand(int(RequestCode.RECALL_MESSAGE), ext_fields=header.to_ext_fields())
        resp = await self._instance.remoting.invoke(addr, cmd, budget)
        if resp.code != ResponseCode.SUCCESS:
            raise broker_error(resp.code, resp.remark)
        return resp.ext_fields.get("msgId") or handle.message_id

    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's write queues after a fresh route lookup (TBW102's if it has none)."""
        self._check_started()
        topic = wrap(self.namespace, topic)
        await self._instance.update_route(topic)
        return [unwrap_queue(q, self.namespace) for q in (await self._publish_info(topic)).queues]

    async def tracked(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` as an asynchronous send that shutdown waits for."""
        task = asyncio.current_task()
        assert task is not None
        self._inflight.add(task)
        try:
            return await coro
        finally:
            self._inflight.discard(task)

    # -- internals ---------------------------------------------------------------------------
    def _in_namespace(self, msg: Message) -> Message:
        """``msg`` addressed to its topic in the producer's namespace (a copy: the caller's
        message keeps its bare topic)."""
        if not self.namespace:
            return msg
        topic = wrap(self.namespace, msg.topic)
        return msg if topic == msg.topic else dataclasses.replace(msg, topic=topic)

    def _shown(self, result: SendResult) -> SendResult:
        """``result`` with its queue's topic bare (as the application named it)."""
        if not self.namespace:
            return result
        return dataclasses.replace(result, queue=unwrap_queue(result.queue, self.namespace))

    def _check_started(self) -> None:
        if not self._started:
            raise ClientError("producer is not started; call start() or use `async with`")

    async def _publish_info(self, topic: str, deadline: float | None = None) -> TopicPublishInfo:
        """The topic's write queues. With a ``deadline``, a route without a writable queue (a
        broker set between two masters: the old one gone, the new one not registered yet) is
        fetched again every ROUTE_RETRY_S until one appears or the deadline passes."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                return await self._publish_info_once(topic)
            except BrokerError as e:
                if (deadline is None or e.code != ResponseCode.NO_PERMISSION
                        or loop.time() + ROUTE_RETRY_S >= deadline):
                    raise
            await asyncio.sleep(ROUTE_RETRY_S)
            await self._instance.update_route(topic)

    async def _publish_info_once(self, topic: str) -> TopicPublishInfo:
        route = await self._instance.route_for_publish(topic, self.default_topic_queue_nums)
        if route is None:
            raise TopicNotFoundError(f"no route for topic {topic!r} nor for the default topic")
        info = self._publish.get(topic)
        if info is None or info.route is not route:
            info = publish_info_from_route(
                topic, route, from_default=self._instance.is_default_route(topic))
            self._publish[topic] = info
        if not info.ok:
            raise BrokerError(ResponseCode.NO_PERMISSION, f"topic {topic!r} has no writable queue")
        return info

    async def _send_prepared(self, prepared: PreparedMessage, deadline: float) -> SendResult:
        """A batch (or a lone message) of the accumulator: round robin, retries, backoff."""
        info = await self._publish_info(prepared.topic, deadline)
        result = await self._send_with_retries(prepared, info, deadline, oneway=False)
        assert result is not None
        return result

    async def _dispatch(
        self,
        prepared: PreparedMessage,
        msg: Message,
        selector: MessageQueueSelector | None,
        arg: object,
        timeout: float | None,
        *,
        oneway: bool,
    ) -> SendResult | None:
        budget = self.send_timeout if timeout is None else timeout
        deadline = asyncio.get_running_loop().time() + budget
        info = await self._publish_info(prepared.topic, deadline)
        if selector is None:
            return await self._send_with_retries(prepared, info, deadline, oneway=oneway)
        mq = selector(list(info.queues), msg, arg)
        if not isinstance(mq, MessageQueue):
            raise ClientError(f"selector returned {type(mq).__name__}, not a MessageQueue")
        return await self._send_to(prepared, mq, deadline, oneway=oneway)

    async def _send_with_retries(
        self, prepared: PreparedMessage, info: TopicPublishInfo, deadline: float, *, oneway: bool
    ) -> SendResult | None:
        attempts = 1 if oneway else 1 + self.retry_times_when_send_failed
        loop = asyncio.get_running_loop()
        failed_broker: str | None = None
        last: Exception | None = None
        for attempt in range(attempts):
            mq = info.select_queue(self._brokers_to_avoid(failed_broker, loop.time()))
            try:
                result = await self._send_to(prepared, mq, deadline, oneway=oneway)
                self._unreachable.pop(mq.broker_name, None)
                return result
            except (ConnectionClosedError, TimeoutError, BrokerError) as e:
                if not e.retriable:
                    raise
                last, failed_broker = e, mq.broker_name
                if not isinstance(e, BrokerError) and self.unreachable_broker_backoff > 0:
                    self._unreachable[mq.broker_name] = loop.time() + self.unreachable_broker_backoff
                log.info("send topic=%s broker=%s attempt=%d failed: %s",
                         prepared.topic, mq.broker_name, attempt + 1, e)
                if loop.time() >= deadline:
                    break
                # The route may be changing (a new master of that broker set, controller mode):
                # fetch it before the next attempt, and leave a broker that refused the
                # connection, or said it is busy (SYSTEM_BUSY: its flow control), a moment
                # instead of spending every attempt at once.
                await self._instance.update_route(prepared.topic)
                if not isinstance(e, BrokerError) or e.code == ResponseCode.SYSTEM_BUSY:
                    await asyncio.sleep(min(ROUTE_RETRY_S * (attempt + 1),
                                            max(0.0, deadline - loop.time() - ROUTE_RETRY_S)))
                info = await self._publish_info(prepared.topic, deadline)
        assert last is not None
        last.add_note(f"send to topic {prepared.topic!r} failed after {attempt + 1} attempt(s)")
        raise last

    def _brokers_to_avoid(self, failed_broker: str | None, now: float) -> set[str]:
        for name in [n for n, until in self._unreachable.items() if until <= now]:
            del self._unreachable[name]
        avoid = set(self._unreachable)
        if failed_broker is not None:
            avoid.add(failed_broker)
        return avoid

    async def _send_to(
        self, prepared: PreparedMessage, mq: MessageQueue, deadline: float, *, oneway: bool
    ) -> SendResult | None:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise TimeoutError(f"send to topic {prepared.topic!r} ran out of its send timeout")
        addr = await self._instance.find_broker_addr(mq.broker_name, mq.topic)
        cmd = build_send_request(prepared, mq, self.group, self.default_topic_queue_nums)
        if oneway:
            await self._instance.remoting.invoke_oneway(addr, cmd)
            return None
        resp = await self._instance.remoting.invoke(addr, cmd, remaining)
        return parse_send_response(resp, prepared, mq)


def trace_dispatcher(enable: object, group: str, role: str, namesrv: str | Sequence[str] | None,
                     customized_trace_topic: str | None, config: TraceConfig | None,
                     credentials: Credentials | None, tls: ClientTls | bool | None
                     ) -> TraceDispatcher | None:
    """The message trace's dispatcher of a producer or consumer ``group`` (``role`` PRODUCER or
    CONSUMER), or None when ``enable`` (the client's ``enable_msg_trace``) is False. Here, beside
    AsyncProducer, because the dispatcher sends its records with producers of its own."""
    if not isinstance(enable, bool):
        raise ClientError(f"enable_msg_trace must be True or False, not {enable!r}")
    if not enable:
        return None

    def sender(trace_group: str, timeout: float, size_max: int) -> TraceSender:
        return AsyncProducer(trace_group, namesrv, send_timeout=timeout,
                             max_message_size=size_max, credentials=credentials, tls=tls)

    return TraceDispatcher(group, role, sender, trace_topic=trace_topic_of(customized_trace_topic),
                           config=config)


def _check_batch_options(auto_batch: object, max_delay: float, max_bytes: int, max_messages: int,
                         send_timeout: float) -> None:
    """Raises ClientError naming the first auto-batching option that makes no sense."""
    if not isinstance(auto_batch, bool):
        raise ClientError(f"auto_batch must be True or False, not {auto_batch!r}")
    if (not isinstance(max_delay, int | float) or isinstance(max_delay, bool)
            or not math.isfinite(max_delay) or not 0 <= max_delay < send_timeout):
        raise ClientError(f"batch_max_delay must be >= 0 seconds and shorter than send_timeout "
                          f"({send_timeout}), got {max_delay!r}")
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
        raise ClientError(f"batch_max_bytes must be an int >= 1, got {max_bytes!r}")
    if not isinstance(max_messages, int) or isinstance(max_messages, bool) or max_messages < 1:
        raise ClientError(f"batch_max_messages must be an int >= 1, got {max_messages!r}")


class Producer(BlockingClient[AsyncProducer]):
    """Sends messages (blocking). Use ``with Producer(...) as p`` or start/shutdown.

    Takes the arguments of :class:`AsyncProducer`; any thread may call it.
    """

    _thread_name = "orbitmq-producer"

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None, **options: Any) -> None:
        super().__init__(AsyncProducer(group, namesrv, **options))

    @property
    def client_id(self) -> str:
        return self._client.client_id

    @property
    def trace_stats(self) -> TraceStats | None:
        """See :attr:`AsyncProducer.trace_stats`."""
        return self._client.trace_stats

    def send(
        self,
        msg: Message,
        selector: MessageQueueSelector | None = None,
        arg: object = None,
        *,
        timeout: float | None = None,
    ) -> SendResult:
        """See :meth:`AsyncProducer.send`."""
        return self._call(self._client.send(msg, selector, arg, timeout=timeout))

    def send_async(
        self, msg: Message, selector: MessageQueueSelector | None = None, arg: object = None
    ) -> concurrent.futures.Future[SendResult]:
        """Start sending and return a Future of the SendResult (done from the client's thread)."""
        return self._submit(self._client.tracked(self._client.send(msg, selector, arg)))

    def send_oneway(
        self, msg: Message, selector: MessageQueueSelector | None = None, arg: object = None
    ) -> None:
        """See :meth:`AsyncProducer.send_oneway`."""
        self._call(self._client.send_oneway(msg, selector, arg))

    def send_batch(self, messages: Sequence[Message], *, timeout: float | None = None) -> SendResult:
        """See :meth:`AsyncProducer.send_batch`."""
        return self._call(self._client.send_batch(messages, timeout=timeout))

    def send_columns(self, topic: str, columns: MessageColumns, **options: Any) -> list[SendResult]:
        """See :meth:`AsyncProducer.send_columns`."""
        return self._call(self._client.send_columns(topic, columns, **options))

    def recall_message(self, topic: str, recall_handle: str, *,
                       timeout: float | None = None) -> str:
        """See :meth:`AsyncProducer.recall_message`."""
        return self._call(self._client.recall_message(topic, recall_handle, timeout=timeout))

    def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """See :meth:`AsyncProducer.fetch_publish_queues`."""
        return self._call(self._client.fetch_publish_queues(topic))
