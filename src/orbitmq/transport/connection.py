"""One remoting connection, either side: frames in, commands dispatched, responses matched by opaque.

Both ends of a RocketMQ connection may send requests (the broker asks producers about transactions
and tells consumers that their group changed), so the server's and the client's connections share
this class. Request handling is delegated to a :class:`Dispatcher`.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from orbitmq.errors import ClientError, ConnectionClosedError, RemoteProtocolError, TimeoutError
from orbitmq.protocol.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand, encode_header
from orbitmq.protocol.frame import FrameDecoder
from orbitmq.transport.limits import FrameBudget

__all__ = ["Dispatcher", "RemotingConnection", "HandlerResult", "FastReader", "LimitHost"]

log = logging.getLogger(__name__)

HandlerResult = RemotingCommand | None | Awaitable[RemotingCommand | None]

# Opaques are unique per process: responses are matched per connection, but a process-wide counter
# makes logs and captured traffic easier to follow.
_opaques = itertools.count(1)


def next_opaque() -> int:
    return next(_opaques) & 0x7FFFFFFF


RECEIVE_BUFFER_BYTES = 256 * 1024  # what one socket read may bring (uvloop reads as much)
_receive = threading.local()


def _lent_buffer() -> memoryview:
    """The buffer this thread's connections read into, one read at a time (an event loop runs
    one callback at a time): frames are handled where the read put them."""
    lent = getattr(_receive, "buffer", None)
    if lent is None:
        lent = _receive.buffer = memoryview(bytearray(RECEIVE_BUFFER_BYTES))
    return lent


class FastReader(Protocol):
    """Handles whole frames of a connection's received bytes itself, from ``pos`` on, and
    returns where it stopped (the broker's native fast path, broker/fast_path.py): the frame
    there is decoded and dispatched as usual before it is asked again. It writes its answers
    with ``send_ordered`` / ``send_ordered_later``. ``buffer`` is lent for the call only."""

    def __call__(self, conn: RemotingConnection, buffer: memoryview, pos: int, /) -> int: ...


class _Slot:
    """An answer's place in a connection's request order, filled once it is known."""

    __slots__ = ("parts", "ready")

    def __init__(self, parts: tuple[bytes | memoryview, ...] = (), ready: bool = False) -> None:
        self.parts = parts
        self.ready = ready


class Dispatcher(Protocol):
    def dispatch(self, cmd: RemotingCommand, conn: RemotingConnection) -> HandlerResult: ...

    def connection_lost(self, conn: RemotingConnection) -> None: ...


class LimitHost(Protocol):
    """What a server's connections ask of it (transport/limits.py): whether a connection just
    accepted may stay, and what to do with one whose partial frame would pass the budget."""

    budget: FrameBudget

    def admit(self, conn: RemotingConnection, fd: int) -> bool: ...

    def over_budget(self, conn: RemotingConnection, held: int) -> None: ...


class RemotingConnection(asyncio.BufferedProtocol):
    """An asyncio protocol speaking RemotingCommand frames.

    The socket reads into a buffer this thread lends to one read at a time, and the frames are
    handled where they lie (FrameDecoder.recv_buffer): the bytes of a read are copied once, by
    the kernel, before the fast path stores them or the decoder copies a body out.

    Args:
        dispatcher: answers incoming requests (may be None for a pure client).
        max_frame_size: a frame declaring more is refused and the connection closed.
        max_in_flight: requests being handled at once; past it reading pauses (back-pressure to the
            peer through TCP) until some finish.
        fast_reader: takes the frames it handles itself (see FastReader). With one, answers
            leave in request order: an answer waiting for something (a sync, a route) holds back
            the answers of later requests, the fast reader's included, except those of
            ``unordered_codes`` (pulls held by long polling), which leave when they are ready.
        limits: the server whose limits this connection lives under (None for a client's):
            asked once accepted whether it may stay, and charged for what its partial frame
            holds, read by read.
    """

    def __init__(
        self,
        dispatcher: Dispatcher | None,
        *,
        max_frame_size: int = 16 * 1024 * 1024,
        max_in_flight: int = 256,
        fast_reader: FastReader | None = None,
        unordered_codes: frozenset[int] = frozenset(),
        limits: LimitHost | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._take = functools.partial(fast_reader, self) if fast_reader is not None else None
        self._lent: memoryview  # the loop thread's (connection_made)
        self._unordered = unordered_codes
        # Answers waiting for their turn (request order), only with a fast reader: empty while
        # nothing waits, when every answer leaves at once.
        self._order: collections.deque[_Slot] | None = (
            collections.deque() if fast_reader is not None else None)
        self._decoder = FrameDecoder(max_frame_size)
        self._max_in_flight = max_in_flight
        self._in_flight = 0
        self._paused = False
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._transport: asyncio.Transport | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._out: list[bytes | memoryview] = []
        self._flush_scheduled = False
        # In a read callback (buffer_updated): what is written meanwhile leaves at its end, with
        # no callback scheduled for it (one write, in the read's own wake-up).
        self._in_read = False
        self.closed: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop it was made on
        self.peer: str = "?"
        self.peer_host: str = "?"  # the peer's address without its port (access rules, limits)
        self.attributes: dict[str, Any] = {}  # per-connection state for handlers (client id, ...)
        self.last_received = 0.0  # time.monotonic() of the last bytes read (or of the accept)
        # When the partial frame held began to arrive (see FrameDecoder.received): a server's
        # sweep closes a connection whose frame takes longer than frame_read_timeout_ms.
        self.frame_started = 0.0
        self._limits = limits
        self._held = 0  # bytes charged to the limits' frame budget
        self.admitted = False  # counted by the server's accept gate (released when lost)
        self._limited = False  # closed by a limit (logged by the server)
        # Signs each request this side sends (a client's credentials), None for unsigned.
        self.signer: Callable[[RemotingCommand], None] | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self._lent = _lent_buffer()
        self._loop = loop = asyncio.get_running_loop()  # asked once: each ask costs a getpid(2)
        self.closed = loop.create_future()
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"{peer[0]}:{peer[1]}"
            self.peer_host = str(peer[0])
        self.last_received = time.monotonic()
        if self._limits is not None:
            sock = transport.get_extra_info("socket")
            fd = sock.fileno() if sock is not None else -1
            if not self._limits.admit(self, fd):
                self.abort()  # refused at accept: closed before a byte is read

    def get_buffer(self, sizehint: int) -> memoryview:
        buf = self._decoder.recv_buffer(self._lent)
        if (self._limits is not None and self._decoder.held_bytes != self._held
                and not self._charge(in_get_buffer=True)):
            return self._lent  # the read is thrown away: the connection is closing
        return buf

    def buffer_updated(self, nbytes: int) -> None:
        now = self.last_received = time.monotonic()
        self._in_read = True
        try:
            if self._decoder.received(nbytes, self._lent, self._take, self._received):
                self.frame_started = now
        except RemoteProtocolError as e:
            if not self._limited:  # (closed by a limit: said so already)
                log.warning("protocol error from peer=%s: %s; closing", self.peer, e)
                self.close()
            return
        finally:
            self._in_read = False
            if self._out or self._flush_scheduled:
                self._flush_out()  # the read's answers, in one write, in this wake-up
        if self._limits is not None and self._decoder.held_bytes != self._held:
            self._charge()

    def _charge(self, *, in_get_buffer: bool = False) -> bool:
        """Charge the frame budget for what the decoder holds now; past the budget the
        connection is closed and its partial frame dropped (the server logs and counts it).
        In get_buffer the close waits for the read to end: uvloop's read callback must not
        see its handle closed under it."""
        limits = self._limits
        assert limits is not None
        held = self._decoder.held_bytes
        if limits.budget.charge(held - self._held):
            self._held = held
            return True
        self._limited = True
        self._decoder.discard("closed: partial frames over the server's frame buffer budget")
        limits.budget.charge(-self._held)
        self._held = 0
        limits.over_budget(self, held)
        if in_get_buffer:
            asyncio.get_running_loop().call_soon(self.abort)
        else:
            self.abort()
        return False

    def limit_close(self) -> None:
        """Close for a limit (idle, slow frame): drop the partial frame and its charge now."""
        self._limited = True
        self._decoder.discard("closed by a limit")
        if self._limits is not None and self._held:
            self._limits.budget.charge(-self._held)
            self._held = 0
        self.abort()

    @property
    def holds_partial_frame(self) -> bool:
        return self._decoder.buffered_bytes > 0

    @property
    def waiting(self) -> bool:
        """Not reading for reasons of our own (requests in flight, a peer that reads its
        answers slowly), or holding requests: its silence is not the peer's idleness."""
        return self._paused or self._in_flight > 0

    def connection_lost(self, exc: Exception | None) -> None:
        if self._held and self._limits is not None:
            self._limits.budget.charge(-self._held)
            self._held = 0
        self._transport = None
        err = ConnectionClosedError(f"connection to {self.peer} closed")
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        if self.closed is not None and not self.closed.done():
            self.closed.set_result(None)
        if self._dispatcher is not None:
            self._dispatcher.connection_lost(self)

    def pause_writing(self) -> None:  # the peer reads slowly: stop reading its requests too
        self._pause_reading()

    def resume_writing(self) -> None:
        self._maybe_resume_reading()

    # -- frames from the peer ---------------------------------------------------------------
    def received_request(self, cmd: RemotingCommand) -> None:
        """A request the fast reader read itself, handled as a decoded frame would be (in the
        read, in order)."""
        self._received(cmd)

    def _received(self, cmd: RemotingCommand) -> None:
        """Each decoded frame, as the decoder reaches it: a response completes its request's
        future, a request goes to the dispatcher. One call a frame and the flag read in place:
        this runs for every frame the Python path takes."""
        if cmd.flag & RESPONSE_FLAG:
            fut = self._pending.pop(cmd.opaque, None)
            if fut is not None and not fut.done():
                fut.set_result(cmd)
            return
        if self._dispatcher is None:
            return
        try:
            result = self._dispatcher.dispatch(cmd, self)
        except Exception as e:  # the dispatcher turns expected errors into responses itself
            log.error("handler failed code=%s peer=%s", cmd.code, self.peer, exc_info=e)
            result = _system_error(cmd)
        if isinstance(result, RemotingCommand) or result is None:
            self._reply(cmd, result)
            return
        self._in_flight += 1
        if self._in_flight >= self._max_in_flight:
            self._pause_reading()
        slot = None
        if self._order is not None and cmd.code not in self._unordered:
            slot = _Slot()  # later answers wait for this one
            self._order.append(slot)
        task = asyncio.ensure_future(result)
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._request_done, cmd, slot=slot))

    def _request_done(self, req: RemotingCommand, task: asyncio.Future[RemotingCommand | None],
                      slot: _Slot | None = None) -> None:
        self._tasks.discard(task)
        self._in_flight -= 1
        self._maybe_resume_reading()
        if task.cancelled():
            resp = None
        elif (exc := task.exception()) is not None:
            log.error("handler failed code=%s peer=%s", req.code, self.peer, exc_info=exc)
            resp = _system_error(req)
        else:
            resp = task.result()
        if slot is None:
            self._reply(req, resp)
        else:
            self._fill(slot, self._answer_parts(req, resp))

    def _reply(self, req: RemotingCommand, resp: RemotingCommand | None) -> None:
        if self._order is not None and req.code not in self._unordered:
            parts = self._answer_parts(req, resp)
            if parts:
                self.send_ordered(*parts)
            return
        if resp is None or req.is_oneway:
            return
        if self._transport is None or self._transport.is_closing():
            return  # the peer left while its request was being handled: nobody to answer
        try:
            self.send(resp)
        except ClientError as e:  # our answer does not fit the request's serialize type
            log.error("cannot encode the answer to code=%s peer=%s: %s", req.code, self.peer, e)
            self.send(_system_error(req))

    def _answer_parts(self, req: RemotingCommand,
                      resp: RemotingCommand | None) -> tuple[bytes | memoryview, ...]:
        """The bytes of ``resp`` as ``_reply`` would write them (none for a oneway request)."""
        if resp is None or req.is_oneway:
            return ()
        try:
            header = encode_header(resp)
        except ClientError as e:  # our answer does not fit the request's serialize type
            log.error("cannot encode the answer to code=%s peer=%s: %s", req.code, self.peer, e)
            resp = _system_error(req)
            header = encode_header(resp)
        return (header, resp.body) if resp.body else (header,)

    # -- request order (with a fast reader) ---------------------------------------------------
    def send_ordered(self, *parts: bytes | memoryview) -> None:
        """Write an answer after every answer still awaited for an earlier request."""
        order = self._order
        if order:
            order.append(_Slot(parts, True))
        elif self._transport is not None and not self._transport.is_closing():
            self._write(*parts)

    def send_ordered_now(self, *parts: bytes | memoryview) -> None:
        """``send_ordered``, written in this call rather than at the end of the loop iteration
        when nothing earlier is awaited (with what else waits to be written, in order): an
        answer that waited for a sync leaves an iteration sooner."""
        if self._order:
            self._order.append(_Slot(parts, True))
        elif self._transport is not None and not self._transport.is_closing():
            self._out.extend(parts)
            self._flush_out()

    def send_ordered_later(self, answer: asyncio.Future[bytes] | asyncio.Future[bytes | None],
                           requests: int) -> None:
        """Keep the place of the answers to ``requests`` requests that ``answer`` will give
        (their bytes, or None for no answer); later answers wait for them. They count as in
        flight until then."""
        slot = _Slot()
        assert self._order is not None, "ordered answers need a fast reader"
        self._order.append(slot)
        self._in_flight += requests
        if self._in_flight >= self._max_in_flight:
            self._pause_reading()

        def done(f: asyncio.Future[Any]) -> None:
            self._in_flight -= requests
            self._maybe_resume_reading()
            data = None
            if f.cancelled():
                pass
            elif (exc := f.exception()) is not None:
                log.error("answers lost peer=%s", self.peer, exc_info=exc)
            else:
                data = f.result()
            self._fill(slot, (data,) if data else ())

        answer.add_done_callback(done)

    def _fill(self, slot: _Slot, parts: tuple[bytes | memoryview, ...]) -> None:
        slot.parts, slot.ready = parts, True
        order = self._order
        assert order is not None
        if self._transport is None or self._transport.is_closing():
            order.clear()  # nobody to answer
            return
        wrote = False
        while order and order[0].ready:
            ready = order.popleft().parts
            if ready:
                self._out.extend(ready)
                wrote = True
        if wrote:  # (a callback of its own: one write for every answer it released, now)
            self._flush_out()

    def _pause_reading(self) -> None:
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def _maybe_resume_reading(self) -> None:
        if (
            self._paused
            and self._transport is not None
            and self._in_flight < self._max_in_flight
            and not self._transport.is_closing()
            and self._transport.get_write_buffer_size() < 4 * 1024 * 1024
        ):
            self._paused = False
            self._transport.resume_reading()

    # -- sending ----------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def send(self, cmd: RemotingCommand) -> None:
        """Queue one command for writing; the body goes out as given (a memoryview is not copied)."""
        if self._transport is None or self._transport.is_closing():
            raise ConnectionClosedError(f"connection to {self.peer} is closed")
        body = cmd.body
        self._write(encode_header(cmd), body) if body else self._write(encode_header(cmd))

    def send_parts(self, cmd: RemotingCommand, parts: list[bytes | memoryview]) -> None:
        """Queue ``cmd`` whose body is the concatenation of ``parts`` (pull responses: file slices).

        ``cmd.body`` must be empty; the header's length fields account for the parts.
        """
        if self._transport is None or self._transport.is_closing():
            raise ConnectionClosedError(f"connection to {self.peer} is closed")
        total = sum(len(p) for p in parts)
        self._write(encode_header(cmd, body_length=total), *parts)

    def flush(self) -> None:
        """Write what waits to be written now rather than at the end of the loop iteration (a
        held pull answered from the dispatch of its message: no loop iteration in between)."""
        if self._out:
            self._flush_out()

    def _write(self, *parts: bytes | memoryview) -> None:
        # Everything written while handling one read (and the loop iteration it runs in) leaves in
        # one writelines call: one syscall for a whole pipeline of answers instead of one each.
        # The answers a read's handlers give at once leave at the end of that read's callback
        # (buffer_updated); what is written elsewhere leaves at the latest one iteration on.
        self._out.extend(parts)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            if not self._in_read:
                assert self._loop is not None, "written to before connection_made"
                self._loop.call_soon(self._flush_out)

    def _flush_out(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out and self._transport is not None and not self._transport.is_closing():
            self._transport.writelines(out)

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response (``timeout`` in seconds)."""
        cmd.opaque = next_opaque()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        self._pending[cmd.opaque] = fut
        # A timer that fails the future, not asyncio.timeout (its context manager cost a tenth of
        # a client's send) nor wait_for (on 3.11 it can swallow a cancellation that races with the
        # answer): a cancelled caller cancels the future it awaits and stops right there.
        timer = loop.call_later(timeout, _expire, fut, cmd.code, self.peer, timeout)
        try:
            if self.signer is not None:
                self.signer(cmd)
            self.send(cmd)
            return await fut
        finally:
            timer.cancel()
            self._pending.pop(cmd.opaque, None)

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        """Send a request that expects no response."""
        cmd.opaque = next_opaque()
        cmd.flag |= ONEWAY_FLAG
        if self.signer is not None:
            self.signer(cmd)
        self.send(cmd)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


def _expire(fut: asyncio.Future[RemotingCommand], code: int, peer: str, timeout: float) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError(
            f"no answer to request code={code} from {peer} within {timeout:.3g}s"))


def _system_error(req: RemotingCommand) -> RemotingCommand:
    """The answer to a request whose handling failed in a way the dispatcher did not turn into an
    answer itself (logged by the caller); the same words as the server's internal errors."""
    from orbitmq.protocol.codes import ResponseCode

    return req.response(ResponseCode.SYSTEM_ERROR,
                        f"internal error while handling request code {req.code} "
                        "(the server log has the details)")


Handler = Callable[[RemotingCommand, RemotingConnection], HandlerResult]
