"""``orbitmq consume``: print a topic's messages, committing the group's offsets as it goes.

Every readable queue gets its own long-polling pull loop, so an idle queue never delays a busy
one; their results meet in one bounded asyncio queue (the bound is the flow control: a loop waits
while the printer is behind). Offsets are committed per *printed* message, so that stopping in the
middle of a batch (``--count``, Ctrl-C, a closed pipe) never skips what was not shown: the next
run of the same group starts exactly after the last line printed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click

from orbitmq.cli.common import (
    Position,
    body_json_fields,
    body_text,
    cli_credentials,
    cli_tls,
    echo_json,
    format_option,
    handles_errors,
    namesrv_option,
    parse_timestamp,
    silence_stdout,
    value_callback,
)
from orbitmq.protocol.namespaces import wrap
from orbitmq.security.signature import Credentials
from orbitmq.security.tls import ClientTls

__all__ = ["consume_cmd", "ConsumeSettings", "message_line", "message_json"]

log = logging.getLogger("orbitmq.cli")

SUSPEND_MAX_S = 15.0  # RocketMQ's broker-side long-poll limit (brokerSuspendMaxTimeMillis)
RETRY_BACKOFF_S = 1.0  # after a retriable pull failure (broker restarting, connection lost)
STOP_WAIT_MAX_S = 5.0  # for the pull loops to end after the run stops
SIGNAL_EXIT_BASE = 128  # a shell's exit status for a command ended by signal N is 128 + N
ROUTE_WAIT_S = 3.0  # for a topic the name servers do not know yet (see _fetch_queues)
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class ConsumeSettings:
    """What one ``orbitmq consume`` run does.

    Attributes:
        start: where queues without a committed offset of the group begin: EARLIEST, LATEST or
            the first message stored at or after a timestamp (ms).
        count_max: stop after printing this many messages (None: no limit).
        idle_timeout_s: stop after this many seconds without a message (None: until stopped).
    """

    topic: str
    group: str
    expression: Any = "*"  # a TAG expression or a MessageSelector
    start: int | Position = Position.EARLIEST
    count_max: int | None = None
    idle_timeout_s: float | None = None
    batch_size: int = 32
    namespace: str | None = None  # the topic's and group's (client/namespace.py)

    @property
    def suspend_s(self) -> float:
        """Long-poll time of each pull: no longer than the idle timeout needs."""
        if self.idle_timeout_s is None:
            return SUSPEND_MAX_S
        return max(0.05, min(SUSPEND_MAX_S, self.idle_timeout_s))


def message_line(msg: Any, broker_name: str) -> str:
    """One line of text for a consumed message; the body last, escaped to stay on the line."""
    keys = ",".join(msg.keys) or "-"
    return (
        f"queue={broker_name}:{msg.queue_id} offset={msg.queue_offset} msg_id={msg.msg_id} "
        f"tags={msg.tags or '-'} keys={keys} body={body_text(msg.body)}"
    )


def message_json(msg: Any, broker_name: str | None = None) -> dict[str, Any]:
    """A message as a JSON object (the exact body: text, or base64 when not UTF-8)."""
    extra = {} if broker_name is None else {"broker": broker_name}
    return {
        **extra,
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "msg_id": msg.msg_id,
        "offset_msg_id": msg.offset_msg_id,
        "tags": msg.tags,
        "keys": list(msg.keys),
        "properties": dict(msg.properties),
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
        "born_host": f"{msg.born_host[0]}:{msg.born_host[1]}",
        "store_host": f"{msg.store_host[0]}:{msg.store_host[1]}",
        "reconsume_times": msg.reconsume_times,
        **body_json_fields(msg.body),
    }


Emit = Callable[[Any, Any], None]  # (MessageQueue, MessageExt) -> None; raises to stop


def _tag_selector(text: str) -> Any:
    """``--expression``: tags, parsed now; SQL given as tags is refused with a pointer to --sql."""
    from orbitmq.client import MessageSelector
    from orbitmq.errors import ExpressionError
    from orbitmq.protocol.expressions import sql_like_tag_expression

    why = sql_like_tag_expression(text)
    if why is not None:
        raise ValueError(f"{text!r} is not a tag expression ({why}); to filter on message "
                         f"properties use --sql {text!r}")
    try:
        return MessageSelector.by_tag(text)
    except ExpressionError as e:
        raise ValueError(str(e)) from None


def _sql_selector(text: str) -> Any:
    """``--sql``: an SQL92 condition, parsed now (a bad one fails before anything is sent)."""
    from orbitmq.client import MessageSelector
    from orbitmq.errors import ExpressionError

    try:
        return MessageSelector.by_sql(text)
    except ExpressionError as e:
        raise ValueError(f"{e}") from None


async def _pull_loop(consumer: Any, mq: Any, offset: int, settings: ConsumeSettings,
                     out: asyncio.Queue[tuple[Any, Any]], closing: asyncio.Event) -> None:
    """Long-poll ``mq`` from ``offset`` until ``closing``, handing every result to ``out``.

    Retriable failures (a broker restarting) are retried after a pause; anything else is handed
    over too, for the printer to raise. ``closing`` is checked besides cancellation because on
    Python 3.11 ``asyncio.wait_for`` (under the SDK's requests) swallows a cancellation that
    arrives together with the answer, and the loop would then pull on.
    """
    from orbitmq.errors import OrbitMQError

    while not closing.is_set():
        try:
            result = await consumer.pull(mq, offset, settings.batch_size, settings.expression,
                                         suspend=settings.suspend_s)
        except OrbitMQError as exc:
            if not exc.retriable:
                await out.put((mq, exc))
                return
            log.warning("pull %s:%d failed, retrying: %s", mq.broker_name, mq.queue_id, exc)
            await asyncio.sleep(RETRY_BACKOFF_S)
            continue
        await out.put((mq, result))
        offset = result.next_begin_offset


async def _start_offsets(consumer: Any, admin: Any, settings: ConsumeSettings,
                         queues: list[Any]) -> dict[Any, int]:
    """Where each queue starts: the group's committed offset, else ``settings.start`` (stored as
    the group's offset only when the run ends well: a refused filter commits nothing).

    The broker answers a never-committed queue whose first message is still stored with offset
    0 (as RocketMQ does, so that new groups read from the start), which cannot be told apart from
    a real commit of 0. So for any start other than EARLIEST, the group's committed topics are
    asked first: a group that never committed on this topic starts where ``--from`` says.
    """
    committed_topic = True
    if settings.start is not Position.EARLIEST:
        status = await admin.group_status(wrap(settings.namespace, settings.group))
        stored = wrap(settings.namespace, settings.topic)
        committed_topic = any(q.queue.topic == stored for q in status.queues)

    async def one(mq: Any) -> tuple[Any, int]:
        if committed_topic:
            offset = await consumer.fetch_offset(mq)
            if offset >= 0:
                return mq, offset
        if settings.start is Position.EARLIEST:
            offset = await consumer.min_offset(mq)
        elif settings.start is Position.LATEST:
            offset = await consumer.max_offset(mq)
        else:
            offset = await consumer.search_offset(mq, settings.start)
        return mq, offset

    return dict(await asyncio.gather(*(one(mq) for mq in queues)))


class _Stopper:
    """Ctrl-C and SIGTERM set an event instead of raising, so the run ends by committing what it
    printed; every wait of the run watches the event (the route wait and the start offsets too).
    A second Ctrl-C, while that commit waits for a broker, raises KeyboardInterrupt at once.
    ``signal`` is the first signal received (None: the run ended by its limits)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.signal: int | None = None
        self._installed: list[int] = []

    def __enter__(self) -> _Stopper:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._signalled, sig)
            except (ValueError, RuntimeError, NotImplementedError):  # not the main thread
                continue
            self._installed.append(sig)
        return self

    def _signalled(self, sig: int) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        self.signal = sig
        self.event.set()

    def __exit__(self, *exc: object) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._installed:
            loop.remove_signal_handler(sig)


class _Interrupted(Exception):
    """The run was stopped before its pull loops started."""


async def _unless_stopped(stop: asyncio.Event, step: Coroutine[Any, Any, T]) -> T:
    """``step``'s result, or _Interrupted as soon as ``stop`` is set (``step`` is cancelled)."""
    task = asyncio.ensure_future(step)
    waiter = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise _Interrupted


async def _next_result(results: asyncio.Queue[tuple[Any, Any]], stop: asyncio.Event,
                       deadline: float | None) -> tuple[Any, Any] | None:
    """The next pull result; None when stopped or when ``deadline`` (monotonic) passed."""
    if stop.is_set():
        return None
    getter = asyncio.ensure_future(results.get())
    stopper = asyncio.ensure_future(stop.wait())
    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        await asyncio.wait({getter, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if not getter.done():
            getter.cancel()
    if getter.done() and not getter.cancelled():
        return getter.result()  # taken from the queue: never drop it
    return None


async def consume(consumer: Any, admin: Any, settings: ConsumeSettings, emit: Emit,
                  stop: asyncio.Event) -> int:
    """Print messages through ``emit`` until a limit or ``stop``; returns how many.

    Offsets go into the consumer's local table as messages are emitted; the caller persists
    them (the consumer's shutdown does too).
    """
    from orbitmq.errors import BrokerError
    from orbitmq.protocol.codes import ResponseCode

    try:
        queues = await _unless_stopped(
            stop, _fetch_queues(consumer, settings.topic, settings.idle_timeout_s))
        if not queues:
            raise BrokerError(ResponseCode.NO_PERMISSION,
                              f"topic {settings.topic!r} has no readable queue")
        offsets = await _unless_stopped(stop, _start_offsets(consumer, admin, settings, queues))
    except _Interrupted:
        return 0
    results: asyncio.Queue[tuple[Any, Any]] = asyncio.Queue(maxsize=len(queues))
    closing = asyncio.Event()
    tasks = [asyncio.create_task(_pull_loop(consumer, mq, offsets[mq], settings, results, closing))
             for mq in queues]
    consumed = 0
    idle = settings.idle_timeout_s
    deadline = None if idle is None else time.monotonic() + idle
    try:
        while settings.count_max is None or consumed < settings.count_max:
            item = await _next_result(results, stop, deadline)
            if item is None:
                break
            mq, result = item
            if isinstance(result, BaseException):
                raise result
            for msg in result.messages:
                try:
                    emit(mq, msg)
                except BrokenPipeError:  # `orbitmq consume ... | head`: the reader has enough
                    stop.set()
                    break
                consumed += 1
                consumer.update_offset(mq, msg.queue_offset + 1)
                if settings.count_max is not None and consumed >= settings.count_max:
                    break
            else:  # the whole batch is shown: skip what the filter left out too
                consumer.update_offset(mq, result.next_begin_offset)
            if result.messages and idle is not None:
                deadline = time.monotonic() + idle
    finally:
        await _stop_pull_loops(tasks, results, closing)
    shown = consumer.local_offsets()
    for mq, offset in offsets.items():
        if mq not in shown:
            consumer.update_offset(mq, offset)  # so the next run starts here too
    return consumed


async def _fetch_queues(consumer: Any, topic: str, idle_timeout_s: float | None) -> list[Any]:
    """The topic's queues, asking again for up to ROUTE_WAIT_S (or the run's idle timeout, if
    shorter) while no name server knows it: a broker that creates a topic on its first send
    registers it with the name servers just after answering that send, so a consumer started
    right after it can ask a moment too early.

    Raises:
        BrokerError: TOPIC_NOT_EXIST when the topic does not show up in that time.
    """
    from orbitmq.errors import BrokerError
    from orbitmq.protocol.codes import ResponseCode

    wait = ROUTE_WAIT_S if idle_timeout_s is None else min(ROUTE_WAIT_S, idle_timeout_s)
    deadline = time.monotonic() + wait
    waiting = False
    while True:
        try:
            return list(await consumer.fetch_queues(topic))
        except BrokerError as e:
            if e.code != ResponseCode.TOPIC_NOT_EXIST or time.monotonic() >= deadline:
                raise
        if not waiting:
            waiting = True
            log.info("waiting up to %.1f s for a route of topic %s", wait, topic)
        await asyncio.sleep(0.05)


async def _stop_pull_loops(tasks: list[asyncio.Task[None]], results: asyncio.Queue[Any],
                           closing: asyncio.Event) -> None:
    """Cancel the pull loops and wait for them, emptying ``results`` so that none stays blocked
    on a full queue (what it holds was never shown, so its offsets were never taken)."""
    closing.set()
    for task in tasks:
        task.cancel()
    deadline = time.monotonic() + STOP_WAIT_MAX_S
    pending: set[asyncio.Task[None]] = set(tasks)
    while pending and time.monotonic() < deadline:
        while not results.empty():
            results.get_nowait()
        _done, pending = await asyncio.wait(pending, timeout=0.05)
    if pending:
        log.warning("%d pull loop(s) did not stop in time", len(pending))


async def _run(namesrv: str, settings: ConsumeSettings, emit: Emit,
               credentials: Credentials | None, tls: ClientTls | bool) -> tuple[int, int | None]:
    """(messages consumed, the signal that stopped the run or None)."""
    from orbitmq.client import AsyncAdmin, AsyncPullConsumer

    consumer = AsyncPullConsumer(settings.group, namesrv, credentials=credentials, tls=tls,
                                 namespace=settings.namespace)
    admin = AsyncAdmin(namesrv, credentials=credentials, tls=tls)
    async with admin, consumer:
        with _Stopper() as stopper:
            consumed = await consume(consumer, admin, settings, emit, stopper.event)
            await consumer.persist_offsets()
    return consumed, stopper.signal


@click.command("consume")
@namesrv_option
@click.option("--topic", "-t", required=True, help="topic to read")
@click.option("--group", "-g", required=True, help="consumer group; its offsets are committed, "
              "so the next run continues where this one stopped")
@click.option("--expression", "-e", default=None, callback=value_callback(_tag_selector),
              help="tag filter: '*' or 'tagA || tagB'  [default: *]")
@click.option("--sql", default=None, callback=value_callback(_sql_selector), metavar="EXPR",
              help="SQL92 filter on message properties, e.g. \"a > 5 AND color = 'red'\" "
              "(the broker needs enable_property_filter)")
@click.option("--from", "start", default="first", show_default=True, metavar="first|last|TIME",
              callback=value_callback(parse_timestamp),
              help="where a group without committed offsets starts: the first stored message, "
              "after the last one, or at a time (ms since the epoch or ISO datetime)")
@click.option("--count", type=click.IntRange(min=1), help="stop after this many messages")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True),
              help="stop after this many seconds without a message [default: run until Ctrl-C]")
@click.option("--batch-size", type=click.IntRange(1, 1024), default=32, show_default=True,
              help="messages per pull request")
@click.option("--namespace", default=None, help="the namespace the topic and group live in "
              "(stored as NAMESPACE%NAME; docs/rocketmq5.md \"Namespaces\")")
@click.option("--lite", "lites", multiple=True, metavar="NAME",
              help="read this lite topic of the LITE topic --topic (repeat for several; each in "
              "order, from the group's committed offset or its oldest message)")
@format_option
@handles_errors
def consume_cmd(namesrv: str, topic: str, group: str, expression: Any, sql: Any,
                start: int | Position, count: int | None, timeout: float | None, batch_size: int,
                namespace: str | None, lites: tuple[str, ...], fmt: str) -> None:
    """Consume a topic with a pull consumer over all its queues, printing one line per message.

    Text lines read 'queue=BROKER:QUEUE offset=N msg_id=ID tags=T keys=K1,K2 body=...' (newlines
    and non-UTF-8 bytes in bodies escaped); --format json prints one object per line with every
    field and the exact body. Offsets are committed to the brokers under the group when the
    command stops (Ctrl-C included) and every few seconds meanwhile. Stopped by Ctrl-C (or
    SIGTERM), it exits 130 (143), as a shell reports an interrupted command; by --count or
    --timeout, 0. A filter the broker refuses
    (an SQL92 one on a broker without enable_property_filter) fails at once and commits nothing.
    """
    from orbitmq.client import run

    if lites:
        if expression is not None or sql is not None or start != parse_timestamp("first"):
            raise click.UsageError("--lite reads whole lite topics: no --expression, --sql or --from")
        if namespace is not None:
            raise click.UsageError("--lite does not take --namespace: name the parent topic and "
                                   "the group as stored (NAMESPACE%NAME)")
        _consume_lite(namesrv, topic, group, lites, count, timeout, batch_size, fmt)
        return
    if expression is not None and sql is not None:
        raise click.UsageError("give --expression (tags) or --sql, not both")
    selector = sql if sql is not None else expression if expression is not None else "*"
    settings = ConsumeSettings(topic, group, selector, start, count, timeout, batch_size, namespace)

    output_closed = [False]

    def emit(mq: Any, msg: Any) -> None:
        try:
            if fmt == "json":
                echo_json(message_json(msg, mq.broker_name))
            else:
                click.echo(message_line(msg, mq.broker_name))
        except BrokenPipeError:
            output_closed[0] = True
            raise

    consumed, stopped_by = run(_run(namesrv, settings, emit, cli_credentials(), cli_tls()))
    if output_closed[0]:
        silence_stdout()
    click.echo(f"consumed {consumed} message(s); offsets of group {group} committed", err=True)
    if stopped_by is not None:  # as a shell reports a command a signal ended: 130 for Ctrl-C
        sys.exit(SIGNAL_EXIT_BASE + stopped_by)


def _consume_lite(namesrv: str, parent: str, group: str, lites: tuple[str, ...],
                  count: int | None, timeout: float | None, batch_size: int, fmt: str) -> None:
    """``consume --lite``: the lite topics through the SDK's LiteConsumer (offsets committed
    after each batch printed and at the end; Ctrl-C exits 130)."""
    from orbitmq.client import LiteConsumer

    consumed = 0
    consumer = LiteConsumer(group, parent, namesrv, credentials=cli_credentials(), tls=cli_tls())
    for name in lites:
        consumer.subscribe_lite(name)  # ClientError for a bad name, before anything connects
    consumer.start()
    interrupted = False
    try:
        idle_since = time.monotonic()
        while count is None or consumed < count:
            step = 1.0 if timeout is None else max(0.0, min(1.0, timeout - (time.monotonic() - idle_since)))
            batch = consumer.poll(min(batch_size, count - consumed) if count else batch_size, step)
            if batch:
                idle_since = time.monotonic()
            for msg in batch:
                if fmt == "json":
                    echo_json(message_json(msg, consumer.parent))
                else:
                    click.echo(f"lite={msg.properties.get('__LITE_TOPIC', '-')} "
                               f"offset={msg.queue_offset} msg_id={msg.msg_id} "
                               f"tags={msg.tags or '-'} body={body_text(msg.body)}")
                consumed += 1
            consumer.commit()
            if timeout is not None and not batch and time.monotonic() - idle_since >= timeout:
                break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        consumer.shutdown()
    click.echo(f"consumed {consumed} message(s); offsets of group {group} committed", err=True)
    if interrupted:
        sys.exit(130)
