"""The asyncio remoting server: accepts connections and dispatches requests by request code."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from orbitmq.errors import BrokerError, RemoteProtocolError
from orbitmq.protocol.codes import ResponseCode, bad_request_code
from orbitmq.protocol.command import RemotingCommand
from orbitmq.rate_limited_log import RateLimitedLog
from orbitmq.security.tls import ServerTls
from orbitmq.transport.connection import FastReader, HandlerResult, RemotingConnection
from orbitmq.transport.limits import AcceptGate, ConnectionLimits, FrameBudget, LimitCounters
from orbitmq.transport.tls import listen

__all__ = ["RemotingServer", "Handler", "Guard", "INTERNAL_ERROR_REMARK", "internal_error_response",
           "call_guarded"]

log = logging.getLogger(__name__)

SWEEP_LATE_MAX_S = 1.0  # a sweep later (or earlier) than its interval by more: see ``discount``

INTERNAL_ERROR_REMARK = "internal error"  # how every answer to one of our own bugs starts

Handler = Callable[[RemotingCommand, RemotingConnection], HandlerResult]
# The access check of every request (security.AccessGuard.check): None lets the request through
# to its handler, a command is the refusal sent instead. Given the request and the peer's host.
# (request, the peer's host, the connection's attributes) -> None, or the refusal to answer
Guard = Callable[[RemotingCommand, str, dict[str, Any]], RemotingCommand | None]
# (request code, response code or None when the handler wrote its answer itself, seconds)
TimingRecorder = Callable[[int, int | None, float], None]
_NEVER = 1 << 62  # a sampling countdown that no server lives long enough to run down


class RemotingServer:
    """Serves RemotingCommand requests on one TCP port.

    Handlers return a response, None (no answer, e.g. for oneway requests) or an awaitable of one.
    A handler that raises :class:`BrokerError` is answered with its code and remark; a malformed
    header or body, or a value out of range (:class:`RemoteProtocolError`, whose message names the
    field), with the request family's code (``codes.bad_request_code``: MESSAGE_ILLEGAL for sends,
    INVALID_PARAMETER otherwise); an unknown request code with REQUEST_CODE_NOT_SUPPORTED. Any other
    exception is a bug: it is logged once with its traceback and answered SYSTEM_ERROR with a
    remark starting ``internal error`` (no exception text goes to the client). Nothing a client
    sends stops the server.

    ``limits`` (transport/limits.py) bound what peers may hold: a connection past a count or the
    descriptor reserve is closed as it is accepted; partial frames share ``frame_buffer_budget``;
    one sweep task closes idle connections and frames read too slowly. Each limit that bites is
    counted in ``limit_counters`` and logged (one line per limit every 10 s at most).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        name: str = "server",
        max_frame_size: int = 16 * 1024 * 1024,
        max_in_flight_per_connection: int = 256,
        limits: ConnectionLimits | None = None,
        limit_counters: LimitCounters | None = None,
        tls: ServerTls | None = None,
    ) -> None:
        self.host = host
        self.tls = tls  # tls_server_mode and its certificates (transport/tls.py); None: plaintext
        self.port = port
        self.name = name
        self._max_frame_size = max_frame_size
        self._max_in_flight = max_in_flight_per_connection
        self._handlers: dict[int, Handler] = {}
        self._server: asyncio.AbstractServer | None = None
        self.connections: set[RemotingConnection] = set()
        self._close_listeners: list[Callable[[RemotingConnection], None]] = []
        self._discount_listeners: list[Callable[[float], None]] = []
        self._sweep_interval_s: float | None = None
        self._swept_at = 0.0  # monotonic time of the last sweep (check_stall)
        self._sample_every = _NEVER
        self._sample_countdown = _NEVER
        self._record_timing: TimingRecorder | None = None
        self._fast_reader: FastReader | None = None
        self._unordered: frozenset[int] = frozenset()
        self._guard: Guard | None = None
        self.limits = limits if limits is not None else ConnectionLimits()
        self.limit_counters = limit_counters if limit_counters is not None else LimitCounters()
        self.budget = FrameBudget(self.limits.frame_buffer_budget_bytes)
        self.gate = AcceptGate(self.limits)
        self._limit_log = RateLimitedLog(log)
        self._sweep_task: asyncio.Task[None] | None = None

    def set_guard(self, guard: Guard | None) -> None:
        """Every request from now on passes ``guard`` before its handler (and before the
        handler table is even looked at: an unknown code from an unknown user learns nothing)."""
        self._guard = guard

    @property
    def guarded(self) -> bool:
        return self._guard is not None

    def set_fast_reader(self, reader: FastReader | None, unordered_codes: frozenset[int]) -> None:
        """Connections accepted from now on let ``reader`` take the frames it handles itself,
        and answer in request order but for ``unordered_codes`` (see RemotingConnection)."""
        self._fast_reader = reader
        self._unordered = unordered_codes

    def sample_requests(self, every: int, record: TimingRecorder) -> None:
        """Time one request in ``every`` (from dispatch to its answer) and give each timing to
        ``record`` (on the event loop). The others pay one integer decrement: metrics must not
        cost the hot path."""
        if every < 1:
            raise ValueError("every must be at least 1")
        self._sample_every = self._sample_countdown = every
        self._record_timing = record

    def note_answered(self, code: int, response_code: int, count: int, seconds: float) -> None:
        """``count`` requests of ``code`` answered outside ``dispatch`` (the broker's native fast
        path), ``seconds`` each: sampled for the timings as dispatched requests are."""
        countdown = self._sample_countdown
        if count < countdown:
            self._sample_countdown = countdown - count
            return
        every = self._sample_every
        self._sample_countdown = every - (count - countdown) % every
        record = self._record_timing
        if record is not None:
            for _ in range(1 + (count - countdown) // every):
                record(code, response_code, seconds)

    def register(self, code: int, handler: Handler) -> None:
        self._handlers[int(code)] = handler

    def on_connection_closed(self, listener: Callable[[RemotingConnection], None]) -> None:
        self._close_listeners.append(listener)

    def on_discount(self, listener: Callable[[float], None]) -> None:
        """``listener(seconds)`` after :meth:`discount`: other silences measured on this loop's
        clock (heartbeats) take the same time out."""
        self._discount_listeners.append(listener)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        """Listen (OSError: the port is taken; TlsError: TLS settings that cannot work)."""
        loop = asyncio.get_running_loop()
        self._server, self.port = await listen(self._new_connection, self.host, self.port,
                                               self.tls, name=self.name)
        interval = self._sweep_interval_s = self.limits.sweep_interval_s()
        if interval is not None:
            self._swept_at = time.monotonic()
            self._sweep_task = loop.create_task(self._sweep_loop(interval))

    def _new_connection(self) -> RemotingConnection:
        conn = RemotingConnection(
            self, max_frame_size=self._max_frame_size, max_in_flight=self._max_in_flight,
            fast_reader=self._fast_reader, unordered_codes=self._unordered, limits=self,
        )
        self.connections.add(conn)
        return conn

    # -- limits (transport/limits.py) ---------------------------------------------------------
    def admit(self, conn: RemotingConnection, fd: int) -> bool:
        """Whether a connection just accepted may stay (RemotingConnection.connection_made)."""
        refused = self.gate.refusal(conn.peer_host, fd)
        if refused is None:
            self.gate.admit(conn.peer_host)
            conn.admitted = True
            return True
        self.connections.discard(conn)
        self.limit_counters.hit(refused)
        if refused == "fd_reserve":
            self._limit_log.warning(
                refused, "server=%s refused a connection from %s: the descriptor reserve for "
                "the store is reached (descriptor %d of RLIMIT_NOFILE %d, fd_reserve %d)",
                self.name, conn.peer, fd, self.gate.fd_ceiling + self.limits.fd_reserve,
                self.limits.fd_reserve)
        else:
            self._limit_log.warning(
                refused, "server=%s refused a connection from %s: %s = %d reached",
                self.name, conn.peer, refused, getattr(self.limits, refused))
        return False

    def over_budget(self, conn: RemotingConnection, held: int) -> None:
        """A connection's partial frame would pass the frame buffer budget: it is closed."""
        self.limit_counters.hit("frame_buffer_budget")
        self._limit_log.warning(
            "frame_buffer_budget", "server=%s closed %s: its partial frame (%d bytes) would pass "
            "frame_buffer_budget_mb (%d MiB held by partial frames)", self.name, conn.peer, held,
            self.budget.held_bytes >> 20)

    async def _sweep_loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            late = now - self._swept_at - interval
            if abs(late) > SWEEP_LATE_MAX_S:
                self.discount(late)
            self._swept_at = now
            self.sweep(now)

    def check_stall(self) -> None:
        """Discount a stall (or a forward clock step) the sweep has not met yet: asked by a
        scan about to judge silences on this loop's clock (heartbeats), whose timer may come
        due before the sweep's in the iteration after the stall."""
        interval = self._sweep_interval_s
        if interval is None:
            return
        now = time.monotonic()
        late = now - self._swept_at - interval
        if late > SWEEP_LATE_MAX_S:
            self.discount(late)
            self._swept_at = now - interval  # the sweep due now finds nothing left to discount

    def discount(self, seconds: float) -> None:
        """Take ``seconds`` out of every connection's idle time and frame time: the loop stood
        still that long (the process was paused) or its clock stepped, and what peers sent
        meanwhile waits unread in the socket, so no silence can be told from it. Without this
        the first sweep after a pause longer than ``channel_max_idle_ms`` closed every
        connection, live ones included; a clock stepped back kept idle ones open as long."""
        log.warning("server=%s: the event loop's clock moved %.1f s past its sweep interval "
                    "(a pause or a clock step); that time counts for no connection's limits",
                    self.name, seconds)
        for conn in self.connections:
            conn.last_received += seconds
            conn.frame_started += seconds
        for listener in self._discount_listeners:
            try:
                listener(seconds)
            except Exception:
                log.exception("server=%s: a discount listener failed", self.name)

    def sweep(self, now: float) -> None:
        """Close connections idle past ``channel_max_idle_ms`` and those whose frame has taken
        longer than ``frame_read_timeout_ms``; a connection we stopped reading (requests in
        flight, a peer slow to read its answers) is neither. Also reads RLIMIT_NOFILE again."""
        self.gate.refresh()
        idle_s = self.limits.channel_max_idle_ms / 1000
        frame_s = self.limits.frame_read_timeout_ms / 1000
        for conn in list(self.connections):
            if not conn.is_open:
                continue
            if conn.waiting:
                conn.last_received = conn.frame_started = now
                continue
            if idle_s and now - conn.last_received > idle_s:
                self._limit_close(conn, "channel_idle", "nothing received for %.0f ms "
                                  "(server_channel_max_idle_ms)", (now - conn.last_received) * 1000)
            elif frame_s and conn.holds_partial_frame and now - conn.frame_started > frame_s:
                self._limit_close(conn, "frame_read_timeout", "a frame begun %.0f ms ago is "
                                  "not whole (frame_read_timeout_ms)",
                                  (now - conn.frame_started) * 1000)

    def _limit_close(self, conn: RemotingConnection, limit: str, why: str, ms: float) -> None:
        self.limit_counters.hit(limit)
        self._limit_log.warning(limit, "server=%s closed %s: " + why, self.name, conn.peer, ms)
        conn.limit_close()

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, give in-flight requests ``grace`` seconds, then close every connection."""
        if self._server is None:
            return
        if self._sweep_task is not None:
            self._sweep_task.cancel()
            await asyncio.gather(self._sweep_task, return_exceptions=True)
            self._sweep_task = None
        self._server.close()
        for conn in list(self.connections):
            conn.close()
        closing = [c.closed for c in self.connections if c.closed is not None]
        if closing:
            await asyncio.wait(closing, timeout=grace)
        for conn in list(self.connections):
            conn.abort()
        try:
            await asyncio.wait_for(self._server.wait_closed(), grace)
        except TimeoutError:
            log.warning("server=%s stop: connections still open after %.1fs", self.name, grace)
        self._server = None

    # -- Dispatcher ---------------------------------------------------------------------------
    def dispatch(self, cmd: RemotingCommand, conn: RemotingConnection) -> HandlerResult:
        guard = self._guard
        if guard is not None:
            refusal = guard(cmd, conn.peer_host, conn.attributes)
            if refusal is not None:
                return refusal
        handler = self._handlers.get(cmd.code)
        if handler is None:
            return cmd.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f"request code {cmd.code} not supported by {self.name}",
            )
        countdown = self._sample_countdown - 1
        if countdown:
            self._sample_countdown = countdown
            return call_guarded(handler, cmd, conn)
        return self._timed(handler, cmd, conn)

    def _timed(self, handler: Handler, cmd: RemotingCommand, conn: RemotingConnection) -> HandlerResult:
        """``call_guarded`` for a sampled request, its time to answer recorded."""
        self._sample_countdown = self._sample_every
        record = self._record_timing
        assert record is not None
        code, start = cmd.code, time.perf_counter()
        result = call_guarded(handler, cmd, conn)
        if result is None or type(result) is RemotingCommand:
            record(code, None if result is None else result.code, time.perf_counter() - start)
            return result
        if isinstance(result, asyncio.Future):
            def done(f: asyncio.Future[RemotingCommand | None]) -> None:
                answer = None if f.cancelled() or f.exception() else f.result()
                record(code, None if answer is None else answer.code, time.perf_counter() - start)

            result.add_done_callback(done)
            return result
        if isinstance(result, RemotingCommand):  # a subclass's answer: an answer, not awaited
            record(code, result.code, time.perf_counter() - start)
            return result
        return _timed_awaitable(result, code, start, record)

    def connection_lost(self, conn: RemotingConnection) -> None:
        self.connections.discard(conn)
        if conn.admitted:
            conn.admitted = False
            self.gate.release(conn.peer_host)
        else:
            return  # refused at accept: no listener heard of it
        for listener in self._close_listeners:
            try:
                listener(conn)
            except Exception:
                log.exception("connection close listener failed")


def call_guarded(handler: Handler, cmd: RemotingCommand, conn: RemotingConnection) -> HandlerResult:
    """``handler(cmd, conn)`` with its exceptions, raised now or by the awaitable it returns,
    turned into answers (see RemotingServer); the client's dispatcher uses it too."""
    try:
        result = handler(cmd, conn)
    except Exception as e:
        return _error_response(cmd, e)
    if result is None or type(result) is RemotingCommand:  # the usual case, checked first
        return result
    if isinstance(result, asyncio.Future):
        return _guard_future(cmd, result)  # no task and no coroutine per request
    if inspect.isawaitable(result):
        return _guard(cmd, result)
    return result


async def _timed_awaitable(aw: Awaitable[RemotingCommand | None], code: int, start: float,
                           record: TimingRecorder) -> RemotingCommand | None:
    answer = await aw
    record(code, None if answer is None else answer.code, time.perf_counter() - start)
    return answer


async def _guard(cmd: RemotingCommand, aw: Awaitable[RemotingCommand | None]) -> RemotingCommand | None:
    try:
        return await aw
    except Exception as e:
        return _error_response(cmd, e)


def _guard_future(cmd: RemotingCommand, fut: asyncio.Future[RemotingCommand | None],
                  ) -> asyncio.Future[RemotingCommand | None]:
    """``_guard`` for a handler that answers with a future: the same answers, through a callback."""
    out: asyncio.Future[RemotingCommand | None] = fut.get_loop().create_future()

    def done(f: asyncio.Future[RemotingCommand | None]) -> None:
        if out.done():
            return
        if f.cancelled():
            out.cancel()
            return
        exc = f.exception()
        if exc is None:
            out.set_result(f.result())
        elif isinstance(exc, Exception):
            out.set_result(_error_response(cmd, exc))
        else:
            out.set_exception(exc)

    fut.add_done_callback(done)
    return out


def _error_response(cmd: RemotingCommand, e: Exception) -> RemotingCommand:
    """The answer to a handler's exception (see RemotingServer)."""
    if isinstance(e, BrokerError):
        return cmd.response(e.code, e.remark)
    if isinstance(e, RemoteProtocolError):
        return cmd.response(bad_request_code(cmd.code), f"bad request: {e}")
    return internal_error_response(cmd, e)


def internal_error_response(cmd: RemotingCommand, e: BaseException) -> RemotingCommand:
    """SYSTEM_ERROR for a failure that is our bug, logged here with its traceback; the client
    learns the request code and that the log has the rest, not our internals."""
    log.error("handler failed code=%s", cmd.code, exc_info=e)
    return cmd.response(ResponseCode.SYSTEM_ERROR,
                        f"{INTERNAL_ERROR_REMARK} while handling request code {cmd.code} "
                        "(the server log has the details)")
