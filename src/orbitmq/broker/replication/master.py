"""The master's HA server: streams the commit log to each slave that connects (RocketMQ 4.x's
HA framing, protocol/ha.py), on ``ha_listen_port``.

Per connection:

1. The slave's first report says where to stream from: the start of its last message (it
   compares that message with the master's before it takes anything: slave.py), its end when it
   has no message, or 0 when it is empty (then the master streams from its oldest segment). A
   first report beyond the master's end, or below its oldest data, is answered with one
   heartbeat naming where the master stands (the slave's error says what is wrong) and the
   connection is closed. A master that holds no bytes at all counts the slave as holding
   everything (nothing to send, nothing lacking).
2. The master streams frames of whole entries (``MessageStore.replication_frame``) up to
   ``ha_transfer_batch_size`` bytes, whenever something was appended (``pump``), and a size-0
   heartbeat after ``ha_send_heartbeat_interval_ms`` of silence, only when it has nothing to
   send (a heartbeat at offset X means "my log ends at X now").
3. Every later report must be plausible, or the connection is closed with a log line and the
   master's idea of the slave does not move: not below the slave's previous report, and exactly
   the end of a frame this connection sent (a slave reports after storing whole frames). Only
   such a report acknowledges bytes (progress.py), so a slave can never acknowledge what it was
   not sent (RocketMQ 4.x once released SYNC_MASTER sends on a slave's bare word).

With authentication on (``HAServer.auth`` set: the broker's ``authentication_enabled``), a
connection starts with the handshake of protocol/ha.py before any of this: the master reads
nothing but the slave's request (answered with its challenge) and then its proof, at most
``AUTH_FRAME_MAX`` bytes each, all within ``HANDSHAKE_TIME_MAX_S``. A proof by a Super user
(ha_auth.py) is answered with the master's acceptance; anything else (a report first, another
version, a bad mac, an unknown or Normal user, silence) closes the connection with one audit
line and no answer: a client that does not authenticate receives not one byte. Only an accepted connection gets a link in the
progress table (so only it is shown, streamed to, or counted toward SYNC_MASTER).

In controller mode (``HAServer.hello`` set, docs/failover.md) a connection starts with the
slave's hello (protocol/ha.py): the master admits it only from a member that follows its own
epoch, names the link after the member and answers with its epoch frame; anything else closes
the connection.

Memory is bounded: a connection writes only while its transport holds less than
``WRITE_BUFFER_HIGH`` bytes (a stalled slave stops the pump, it does not grow the master), keeps
at most one report's bytes and the ends of the frames in flight (bounded by the same buffer). A
connection silent for ``ha_housekeeping_interval_ms`` is closed.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Protocol, cast

from orbitmq.broker.replication.ha_auth import HANDSHAKE_TIME_MAX_S, HAAuth, master_mac
from orbitmq.broker.replication.progress import ReplicaProgress, SlaveLink
from orbitmq.config import BrokerConfig
from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol import stored
from orbitmq.protocol.ha import (
    HELLO_MARK,
    ReportReader,
    auth_frame_body,
    encode_auth_accept,
    encode_auth_challenge,
    encode_confirm_frame,
    encode_epoch_frame,
    encode_transfer_header,
    parse_auth_proof,
    parse_auth_request,
    unpack_identity,
)
from orbitmq.protocol.stored import BLANK_ENTRY_SIZE
from orbitmq.security.tls import ServerTls
from orbitmq.store.message_store import MessageStore
from orbitmq.transport.tls import listen

__all__ = ["HAServer", "MasterHello", "WRITE_BUFFER_HIGH", "WRITE_BUFFER_LOW"]

log = logging.getLogger(__name__)

WRITE_BUFFER_HIGH = 4 * 1024 * 1024  # bytes a connection's transport may hold before it pauses
WRITE_BUFFER_LOW = 1024 * 1024
FRAMES_IN_FLIGHT_MAX = 1 << 16  # frame ends remembered; a slave this far behind is closed


class MasterHello(Protocol):
    """Controller mode's side of the hello on a master (the failover service)."""

    def identity(self) -> tuple[int, int]:
        """(this master's epoch, its member id)."""
        ...

    def admit(self, epoch: int, member: int) -> str | None:
        """Why a slave that says it follows ``epoch`` as ``member`` is refused, or None."""
        ...

    def confirm_offset(self) -> int | None:
        """The confirm offset to announce to slaves, or None (not a SYNC_MASTER: no bound)."""
        ...


def damaged_message(frame: bytes | memoryview, start: int) -> tuple[int, str] | None:
    """The commit log offset of the first message of ``frame`` (entries stored from ``start``)
    that fails the checks a slave makes, and why; None when every message passes."""
    pos = 0
    while pos + BLANK_ENTRY_SIZE <= len(frame) and not stored.is_blank_entry(frame, pos):
        problem = stored.verify(frame, pos, physical_offset=start + pos)
        if problem is not None:
            return start + pos, problem
        pos += stored.total_size(frame, pos)
    return None


class _Connection(asyncio.Protocol):
    """One slave's HA connection (see the module docstring)."""

    def __init__(self, server: HAServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.link: SlaveLink | None = None  # once admitted (authenticated, when that is on)
        # The handshake (authentication on): the master's nonce (once challenged) and the bytes
        # of the frame being read; ``auth_buf`` is None once the slave is accepted (or without
        # authentication).
        self.nonce = b""
        self.auth_buf: bytearray | None = None
        self.auth_timer: asyncio.TimerHandle | None = None
        self.reader = ReportReader()
        self.next: int | None = None  # where the stream goes on (None until the first report)
        self.frame_ends: collections.deque[int] = collections.deque()
        self.paused = False
        self.last_write = time.monotonic()
        self.closed = False
        self.hello_left = 2 if server.hello is not None else 0  # hello values still to read
        self.confirm_sent: int | None = None  # the last confirm offset announced
        self.first_checked = False  # the connection's first frame was checked (``pump``)

    # -- asyncio.Protocol -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = tr = cast(asyncio.Transport, transport)  # uvloop's: not subclasses
        tr.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        peer = tr.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.server.connections.add(self)
        if self.server.auth is None:
            self._admit("")
            return
        self.auth_buf = bytearray()
        self.auth_timer = asyncio.get_running_loop().call_later(
            HANDSHAKE_TIME_MAX_S, self._handshake_timed_out)

    def _admit(self, user: str) -> None:
        """The slave may replicate: it gets a link (shown, streamed to, its acks counted)."""
        self.link = self.server.progress.open(self.peer)
        log.info("HA connection from slave %s%s", self.peer, f" (user {user})" if user else "")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.auth_timer is not None:
            self.auth_timer.cancel()
        self.server.connections.discard(self)
        if self.link is not None:
            self.server.progress.close(self.link)
            log.info("HA connection to slave %s closed (acknowledged up to %s)", self.link.peer,
                     self.link.acked)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.pump()

    def data_received(self, data: bytes) -> None:
        if self.auth_buf is not None and not self.closed:
            self._handshake(data)
            return  # the slave sends nothing more before it has the acceptance
        link = self.link
        if link is None or self.closed:
            return
        for offset in self.reader.feed(data):
            if self.hello_left:
                if not self._hello(link, offset):
                    return
                continue
            if not self._report(link, offset):
                return
        link.last_report_mono = time.monotonic()
        self.pump()

    # -- the handshake (authentication on) ------------------------------------------------------
    def _handshake(self, data: bytes) -> None:
        auth, buf = self.server.auth, self.auth_buf
        assert auth is not None and buf is not None
        buf += data
        try:
            got = auth_frame_body(buf)  # bounded: it raises before buf outgrows one proof
            if got is None:
                return
            body, used = got
            if used != len(buf):
                raise RemoteProtocolError("bytes after an auth frame, before the master's answer")
            if not self.nonce:
                parse_auth_request(body)
                buf.clear()
                self.nonce = HAAuth.nonce()
                if self.transport is not None:
                    self.transport.write(encode_auth_challenge(self.nonce))
                return
            proof = parse_auth_proof(body)
        except RemoteProtocolError as e:
            auth.fail("malformed", None, self.peer, f"HA handshake: {e}")
            self.close()
            return
        if auth.check_slave(proof, self.nonce, self.peer) is not None:
            self.close()  # audited; the slave learns nothing but the closed connection
            return
        mine = auth.credentials
        if mine is None:
            log.error("HA connection from %s closed: authentication is on but this master has no "
                      "inner credentials to prove itself to its slaves with (set "
                      "inner_client_authentication_credentials)", self.peer)
            self.close()
            return
        self.auth_buf = None
        if self.auth_timer is not None:
            self.auth_timer.cancel()
            self.auth_timer = None
        if self.transport is not None:
            self.transport.write(encode_auth_accept(
                mine.access_key, master_mac(mine.secret_key, proof.nonce, self.nonce)))
        self._admit(proof.access_key)

    def _handshake_timed_out(self) -> None:
        auth = self.server.auth
        if self.auth_buf is not None and not self.closed and auth is not None:
            missing = "proof" if self.nonce else "request"
            auth.fail("timeout", None, self.peer,
                      f"HA handshake: no {missing} within {HANDSHAKE_TIME_MAX_S:.0f} s")
            self.close()

    def _hello(self, link: SlaveLink, value: int) -> bool:
        """One value of a controller-mode hello; False when refused (the connection closes)."""
        hello = self.server.hello
        assert hello is not None
        self.hello_left -= 1
        if self.hello_left == 1:
            return value == HELLO_MARK or self._drop(link, "no hello (controller mode needs one)")
        try:
            epoch, member = unpack_identity(value)
        except RemoteProtocolError as e:
            return self._drop(link, str(e))
        refusal = hello.admit(epoch, member)
        if refusal is not None:
            return self._drop(link, f"member {member} (epoch {epoch}) refused: {refusal}")
        link.member = member
        if self.transport is not None:
            self.transport.write(encode_epoch_frame(*hello.identity()))
        log.info("HA connection from %s is member %d (epoch %d)", link.peer, member, epoch)
        self.announce_confirm()
        return True

    def announce_confirm(self) -> None:
        """Controller mode, once the hello is done: send the confirm offset if it changed."""
        hello = self.server.hello
        if hello is None or self.hello_left or self.closed or self.transport is None:
            return
        offset = hello.confirm_offset()
        if offset is not None and offset != self.confirm_sent:
            self.transport.write(encode_confirm_frame(offset))
            self.confirm_sent = offset

    # -- reports --------------------------------------------------------------------------------
    def _report(self, link: SlaveLink, offset: int) -> bool:
        """Take one report; False when it was implausible (the connection is closing)."""
        store = self.server.store
        if self.next is None:
            return self._first_report(link, offset, store)
        previous = link.reported if link.reported is not None else 0
        if offset < previous:
            return self._drop(link, f"report {offset} goes back from {previous}")
        if offset == previous:
            return True  # a heartbeat report
        ends = self.frame_ends
        while ends and ends[0] < offset:
            ends.popleft()
        if not ends or ends[0] != offset:
            return self._drop(link, f"report {offset} is not the end of a frame sent (sent up "
                                    f"to {link.sent_end}, master ends at {store.max_physical_offset()})")
        ends.popleft()
        link.reported = offset
        self.server.progress.acked(link, offset)
        return True

    def _first_report(self, link: SlaveLink, offset: int, store: MessageStore) -> bool:
        end, oldest = store.max_physical_offset(), store.min_physical_offset()
        if offset < 0 or offset > end:
            self._heartbeat(end)
            return self._drop(link, f"first report {offset} is beyond the master's end {end}: "
                                    "the slave holds bytes the master does not have")
        start = oldest if offset == 0 else offset
        if start < oldest:
            self._heartbeat(oldest)
            return self._drop(link, f"first report {offset} is below the master's oldest data "
                                    f"{oldest}: that slave cannot catch up")
        if not _entry_starts_at(store, start):
            self._heartbeat(end)
            return self._drop(link, f"first report {offset} is not where an entry of the "
                                    "master's log starts: the slave's log differs")
        link.reported = offset
        link.start = link.sent_end = self.next = start
        log.info("HA stream to slave %s from offset %d (it reported %d, the master ends at %d)",
                 link.peer, start, offset, end)
        if start == oldest == end:
            # The master holds no bytes at all: the slave lacks nothing, and no frame will come
            # to acknowledge before the next append. Acknowledging ``end`` releases no send (a
            # send ends past it).
            self.server.progress.acked(link, end)
        return True

    def _drop(self, link: SlaveLink, why: str) -> bool:
        log.warning("HA connection to slave %s closed: %s", link.peer, why)
        self.close()
        return False

    # -- streaming ------------------------------------------------------------------------------
    def pump(self) -> None:
        """Write frames while there is something to send and the transport takes it."""
        transport, link = self.transport, self.link
        if (transport is None or link is None or self.closed or self.next is None
                or self.hello_left):
            return
        store, batch = self.server.store, self.server.batch_size
        while not self.paused and transport.get_write_buffer_size() < WRITE_BUFFER_HIGH:
            try:
                frame = store.replication_frame(self.next, batch)
            except ValueError as e:  # the master's own log: never sent as it is
                log.error("HA stream to %s stopped at offset %d: %s", link.peer, self.next, e)
                self.close()
                return
            if frame is None:
                break
            data, nxt = frame
            if not self.first_checked:
                # A slave that refused a frame (a damaged message in it) connects again and asks
                # from that frame's start: the master checks the first frame of a connection,
                # so that it learns about its own damaged copy (controller mode hands the set
                # over to a member with an intact one: broker/failover/service.py).
                self.first_checked = True
                damage = damaged_message(data, self.next)
                if damage is not None:
                    store.corrupt_message_found(damage[0], damage[1], "replication")
                    self._drop(link, f"the master's own message at offset {damage[0]} is "
                                     f"damaged: {damage[1]}")
                    return
            if len(self.frame_ends) >= FRAMES_IN_FLIGHT_MAX:
                self._drop(link, f"{FRAMES_IN_FLIGHT_MAX} frames unacknowledged")
                return
            transport.write(encode_transfer_header(self.next, len(data)) + data)
            self.frame_ends.append(nxt)
            self.next = link.sent_end = nxt
            link.bytes_sent += len(data)
            self.last_write = time.monotonic()
        link.buffered = transport.get_write_buffer_size()

    def _heartbeat(self, offset: int) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(encode_transfer_header(offset, 0))
            self.last_write = time.monotonic()

    def housekeeping(self, now: float) -> None:
        """Close a silent connection; send a heartbeat when idle (nothing left to send)."""
        link = self.link
        if link is None or self.closed:
            return
        if now - link.last_report_mono > self.server.housekeeping_s:
            self._drop(link, f"no report for {now - link.last_report_mono:.1f} s")
            return
        self.pump()
        if (self.next is not None and now - self.last_write >= self.server.heartbeat_s
                and self.next >= self.server.store.max_physical_offset() and not self.paused):
            self._heartbeat(self.next)

    def close(self) -> None:
        """Drop the connection now: abort, not close, which would first wait for the buffered
        frames to be taken (never, from a stalled slave)."""
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.abort()


def _entry_starts_at(store: MessageStore, offset: int) -> bool:
    """Whether a stream may start at ``offset``: the master's end, a segment start, a blank end
    entry, or a well-formed message that says it lies there."""
    if offset == store.max_physical_offset() or offset % store.config.mapped_file_size_commitlog == 0:
        return True
    head = store.commit_log.read(offset, BLANK_ENTRY_SIZE)
    if head is None:
        return False
    if stored.is_blank_entry(head):
        return True
    raw = store.get_message_raw(offset)
    return raw is not None and stored.verify(raw, physical_offset=offset, check_crc=False) is None


class HAServer:
    """Listens on the HA port and streams to every slave (see the module docstring).

    Args:
        config: ``ha_listen_port`` (see BrokerConfig.effective_ha_listen_port), the batch size,
            heartbeat and housekeeping intervals.
        store: the master's store.
        progress: the table of slaves' links (shared with the SYNC_MASTER condition).
        auth: the handshake's checks when authentication is on (None: RocketMQ 4.x's stream).
    """

    def __init__(self, config: BrokerConfig, store: MessageStore, progress: ReplicaProgress,
                 auth: HAAuth | None = None) -> None:
        self.config = config
        self.store = store
        self.progress = progress
        self.auth = auth
        self.batch_size = config.ha_transfer_batch_size
        self.heartbeat_s = config.ha_send_heartbeat_interval_ms / 1000
        self.housekeeping_s = config.ha_housekeeping_interval_ms / 1000
        self.connections: set[_Connection] = set()
        self.hello: MasterHello | None = None  # controller mode (the failover service sets it)
        self._server: asyncio.AbstractServer | None = None
        self._task: asyncio.Task[None] | None = None
        self.port = 0

    async def start(self) -> None:
        """Listen (OSError when the port is taken)."""
        loop = asyncio.get_running_loop()
        # TLS as on the broker's port (tls_server_*); the authentication handshake runs inside.
        self._server, self.port = await listen(
            lambda: _Connection(self), self.config.listen_host,
            self.config.effective_ha_listen_port, ServerTls.of(self.config), name="ha")
        self._task = loop.create_task(self._housekeeping())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._server is not None:
            self._server.close()
            for conn in list(self.connections):
                conn.close()
            await self._server.wait_closed()
            self._server = None

    def pump(self) -> None:
        """Stream what was appended to every slave (the durable-save seam calls it per loop
        iteration that appended; the SYNC_MASTER condition when it seals a group)."""
        for conn in list(self.connections):
            conn.pump()

    def confirm_changed(self) -> None:
        """Controller mode: the confirm offset rose; every slave hears it."""
        for conn in list(self.connections):
            conn.announce_confirm()

    async def _housekeeping(self) -> None:
        interval = min(self.heartbeat_s, self.housekeeping_s) / 4
        while True:
            await asyncio.sleep(max(interval, 0.01))
            now = time.monotonic()
            for conn in list(self.connections):
                try:
                    conn.housekeeping(now)
                except Exception:
                    log.exception("HA housekeeping failed peer=%s", conn.link and conn.link.peer)

    def listening_on(self, host: str) -> str:
        return f"{host}:{self.port}"

