"""Writing trace records to the trace topic without slowing the traced sends and consumption.

A traced producer or push consumer hands each record to :meth:`TraceDispatcher.append`, which
only puts it in a bounded buffer (``buffer_max`` records; when full the record is dropped and
counted, never waited for). A background task takes the buffer in batches of up to
``batch_records_max`` records, as soon as that many wait or ``flush_interval_ms`` after the
last batch, and sends each batch as one message to the trace topic (RocketMQ's
``AsyncTraceDispatcher``: its 2,048-record queue, its batches and 128,000-byte messages, its
5 s flush). The trace message's keys are the traced messages' ids and keys, so that the
broker's index finds a message's trace by its id.

The batches go out through a producer of their own (RocketMQ's inner trace producer, group
``_INNER_TRACE_PRODUCER-{group}``, with the host's name servers, credentials and TLS), which is
never traced itself; at most ``in_flight_max`` trace sends are under way at once, and a send that
fails is logged (rate limited) and its records counted as lost: a trace is best effort, the
traced send never waits for it nor fails with it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import Callable
from typing import Any, Protocol

from orbitmq.client.validation import check_topic
from orbitmq.errors import ClientError, OrbitMQError
from orbitmq.protocol.message import Message
from orbitmq.protocol.topics import TRACE_TOPIC
from orbitmq.protocol.trace_codec import TRACE_PRODUCER_GROUP_PREFIX, TraceRecord, encode_record
from orbitmq.rate_limited_log import RateLimitedLog

__all__ = ["TraceConfig", "TraceStats", "TraceDispatcher", "TraceSender", "trace_topic_of"]

log = logging.getLogger(__name__)

# Characters of one trace message's KEYS (the traced ids and keys, space separated): a batch is
# cut before it would pass this, well inside a message's 32 KiB of properties.
KEYS_CHARS_MAX = 16_000


@dataclasses.dataclass(frozen=True)
class TraceConfig:
    """How a traced client writes its records (RocketMQ's AsyncTraceDispatcher defaults).

    Attributes:
        buffer_max: records waiting to be sent; past it new records are dropped and counted.
        batch_records_max: records per trace message at most.
        batch_bytes_max: a trace message's body is cut past this many bytes.
        flush_interval_ms: a batch smaller than ``batch_records_max`` waits at most this long.
        send_timeout_ms: one trace send's budget.
        in_flight_max: trace sends under way at once.
    """

    buffer_max: int = 2048
    batch_records_max: int = 100
    batch_bytes_max: int = 128_000
    flush_interval_ms: int = 5000
    send_timeout_ms: int = 5000
    in_flight_max: int = 4

    def __post_init__(self) -> None:
        bounds = {"buffer_max": (1, 10_000_000), "batch_records_max": (1, 10_000),
                  "batch_bytes_max": (1024, 4 * 1024 * 1024), "flush_interval_ms": (1, 3_600_000),
                  "send_timeout_ms": (1, 600_000), "in_flight_max": (1, 1024)}
        for name, (low, high) in bounds.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise ClientError(f"trace {name} must be an int within {low}..{high}, "
                                  f"got {value!r}")


@dataclasses.dataclass
class TraceStats:
    """A traced client's counters (read them from ``trace_stats`` of the producer or consumer).

    Attributes:
        appended: records taken into the buffer.
        dropped: records dropped because the buffer was full (RocketMQ's discardCount).
        sent_records, sent_messages: records the broker stored, and the trace messages they
            went in.
        lost: records of trace sends that failed (or still waited at shutdown past its
            timeout).
    """

    appended: int = 0
    dropped: int = 0
    sent_records: int = 0
    sent_messages: int = 0
    lost: int = 0


class TraceSender(Protocol):
    """What the dispatcher sends with: an untraced AsyncProducer of its own."""

    async def start(self) -> Any: ...

    async def shutdown(self) -> None: ...

    async def send(self, msg: Message) -> Any: ...


# group, send timeout in seconds, largest message in bytes -> a sender (the host builds it with
# its name servers, credentials and TLS)
SenderFactory = Callable[[str, float, int], TraceSender]


def trace_topic_of(customized: str | None) -> str:
    """The trace topic: ``customized`` when given (checked), else RMQ_SYS_TRACE_TOPIC."""
    return TRACE_TOPIC if not customized else check_topic(customized)


class TraceDispatcher:
    """See the module docstring. Every method runs on the host client's event loop."""

    def __init__(self, host_group: str, role: str, sender_factory: SenderFactory, *,
                 trace_topic: str = TRACE_TOPIC, config: TraceConfig | None = None) -> None:
        self.trace_topic = trace_topic
        self.config = config or TraceConfig()
        self.stats = TraceStats()
        self.group = f"{TRACE_PRODUCER_GROUP_PREFIX}-{host_group}-{role}"[:255]
        self._sender_factory = sender_factory
        # (encoded record, traced message id, its keys)
        self._buffer: collections.deque[tuple[str, str, str | None]] = collections.deque()
        self._buffer_max = self.config.buffer_max
        self._batch_max = self.config.batch_records_max
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[None]] = set()
        self._slots: asyncio.Semaphore | None = None
        self._producer: TraceSender | None = None
        self._stopping = False
        self._warn = RateLimitedLog(log)

    # -- the hot path -----------------------------------------------------------------------
    def append(self, record: TraceRecord) -> bool:
        """Take ``record`` if the buffer has room (True); else drop and count it (False). A
        record that cannot be encoded (a separator character in a field) is counted as lost:
        tracing never raises into the traced call."""
        try:
            text = encode_record(record)
        except ClientError as e:
            self.stats.lost += 1
            self._warn.warning("trace-encode", "trace record not encoded: %s", e)
            return False
        return self.append_text(text, record.msg_id, record.keys)

    def append_text(self, text: str, msg_id: str, keys: str | None) -> bool:
        """:meth:`append` for a record already encoded (``encode_record``'s text; the traced
        message's id and keys): the hot path of a traced send."""
        buf = self._buffer
        if len(buf) >= self._buffer_max or self._stopping:
            self.stats.dropped += 1
            return False
        buf.append((text, msg_id, keys))
        self.stats.appended += 1
        if len(buf) >= self._batch_max and not self._wake.is_set():
            self._wake.set()
        return True

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        if self._worker is not None:
            return
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(self.config.in_flight_max)
        self._producer = self._sender_factory(
            self.group, self.config.send_timeout_ms / 1000,
            max(self.config.batch_bytes_max * 2, 256 * 1024))
        await self._producer.start()
        self._worker = asyncio.ensure_future(self._run())

    async def shutdown(self, timeout: float | None = None) -> None:
        """Send what the buffer holds and wait for the trace sends, up to ``timeout`` seconds
        (the send timeout by default); what is left then is counted as lost."""
        if self._worker is None:
            return
        self._stopping = True
        budget = self.config.send_timeout_ms / 1000 if timeout is None else timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._worker), budget)
        except TimeoutError:
            pass
        self._worker.cancel()
        if self._sends:
            await asyncio.wait(list(self._sends), timeout=max(0.0, deadline - loop.time()))
        for task in list(self._sends):
            task.cancel()
        self.stats.lost += len(self._buffer)
        self._buffer.clear()
        assert self._producer is not None
        await self._producer.shutdown()
        self._worker = None

    # -- the background side -----------------------------------------------------------------
    async def _run(self) -> None:
        interval = self.config.flush_interval_ms / 1000
        while True:
            if not self._buffer:
                if self._stopping:
                    return
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), interval)
                except TimeoutError:
                    pass
            elif len(self._buffer) < self.config.batch_records_max and not self._stopping:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), interval)
                except TimeoutError:
                    pass
            if not self._buffer:
                continue
            body, count, keys = self._take()
            assert self._slots is not None
            try:
                await self._slots.acquire()
            except asyncio.CancelledError:  # shutdown's timeout passed with every send busy
                self.stats.lost += count
                raise
            task = asyncio.ensure_future(self._send(body, count, keys))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)

    def _take(self) -> tuple[str, int, list[str]]:
        """One trace message off the buffer: its body (up to ``batch_records_max`` records, cut
        once past ``batch_bytes_max``), how many records and its keys (the traced ids and their
        keys, each once; cut before they pass KEYS_CHARS_MAX characters)."""
        cfg = self.config
        buf = self._buffer
        parts: list[str] = []
        keys: dict[str, None] = {}
        size = 0
        key_chars = 0
        while buf and len(parts) < cfg.batch_records_max and size < cfg.batch_bytes_max:
            text, msg_id, msg_keys = buf[0]
            record_keys = len(msg_id) + len(msg_keys or "") + 2
            if parts and key_chars + record_keys > KEYS_CHARS_MAX:
                break
            buf.popleft()
            parts.append(text)
            size += len(text)
            key_chars += record_keys
            if msg_id:
                keys[msg_id] = None
            if msg_keys:
                for key in msg_keys.split(" "):
                    if key:
                        keys[key] = None
        return "".join(parts), len(parts), list(keys)

    async def _send(self, body: str, count: int, keys: list[str]) -> None:
        assert self._slots is not None and self._producer is not None
        try:
            msg = Message(self.trace_topic, body.encode("utf-8"), keys=keys)
            await self._producer.send(msg)
            self.stats.sent_records += count
            self.stats.sent_messages += 1
        except (OrbitMQError, OSError) as e:
            self.stats.lost += count
            self._warn.warning("trace-send", "trace send to %s failed, %d record(s) lost: %s",
                               self.trace_topic, count, e)
        except asyncio.CancelledError:
            self.stats.lost += count
            raise
        finally:
            self._slots.release()

    def describe(self) -> dict[str, Any]:
        """The counters and the topic, for running info and logs."""
        return {"traceTopic": self.trace_topic, **dataclasses.asdict(self.stats),
                "buffered": len(self._buffer)}
