"""A slave's HA client: connects to its master's HA port, says where its log stands, stores what
the master streams (``MessageStore.append_replicated``) and reports how far it got.

Where to stream from. A slave with messages first reports the start of its last message, not
its end: the master streams from there, and the slave compares the master's bytes of that
message (and of the segment's blank end entry behind it, if any) with its own before it takes
anything. Equal: the logs agree, and what follows is appended. Different: the slave's log holds
bytes the master does not have (it was promoted by hand and demoted, or the master lost its
tail) and the slave **refuses to replicate**, with an error naming what to do: stop it, cut its
log with ``orbitmq store truncate`` and start it again (docs/replication.md). It never mixes
two histories, and it never cuts its own log for a divergence. An empty slave reports 0 and
gets the master's whole log from its oldest segment.

A corrupt message in the slave's own log (a read met it, or it is the last message compared
above: store/corruption.py) is the one cut the slave makes itself: the store cuts the log there
and tells this client, which drops its connection and connects again at once, so that the
master streams everything from the cut again.

Frames must continue the slave's stream exactly (``expect``). A master heartbeat (size 0) says
where the master's log ends now: below what the slave holds means the same refusal; above it,
the master no longer holds what the slave needs (retention deleted it), another refusal. A
garbled frame (the store's checks, or a frame header the codec refuses) is never written: the
connection is closed, logged, and opened again after a pause.

With authentication on (``HAClient.auth`` set: the broker's ``authentication_enabled``), the
slave sends nothing but the handshake of protocol/ha.py before it is done: its request, then
its proof (its inner credentials) in answer to the master's challenge. It takes the master's
acceptance only when that proves the master holds a Super user's secret too (ha_auth.py);
anything else, or no acceptance within ``HANDSHAKE_TIME_MAX_S``, closes the connection, and the
next one is tried after the longest pause (a wrong secret is not fixed by retrying fast).
Without authentication, a master that closes the connection before sending a byte is most
likely one with authentication on: the slave says so in its log and also waits the longest
pause (not in controller mode, where a refused hello closes the same way).

Controller mode (``HAClient.hello`` set, docs/failover.md): the slave first sends its hello
(the epoch it follows, its member id) and takes nothing before the master's epoch frame names
that same epoch: a master of an older epoch (deposed, not yet aware of it) or of a newer one
(this slave has not read it in etcd yet) is left, and tried again after a pause.

Reports: after every read that stored something, and every ``ha_send_heartbeat_interval_ms``;
always the end of the last whole frame taken (what the master sent, see master.py). The
connection is closed and opened again when the master is silent for
``ha_housekeeping_interval_ms``. Loop-owned.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from typing import Protocol, cast

from orbitmq.broker.replication.ha_auth import HANDSHAKE_TIME_MAX_S, HAAuth, slave_mac
from orbitmq.config import BrokerConfig
from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol import stored
from orbitmq.protocol.ha import (
    AUTH_MARK,
    CONFIRM_MARK,
    HELLO_MARK,
    TransferFrame,
    TransferReader,
    encode_auth_proof,
    encode_auth_request,
    encode_hello,
    encode_report,
    parse_auth_accept,
    parse_auth_challenge,
    unpack_identity,
)
from orbitmq.security.tls import ClientTls, ReloadingContext
from orbitmq.store.message_store import MessageStore
from orbitmq.store.status import ReplicaAppendStatus

__all__ = ["HAClient", "ReplicationRefused", "frame_size_max"]

log = logging.getLogger(__name__)

RECONNECT_DELAY_MIN_S = 0.2
RECONNECT_DELAY_MAX_S = 2.0
CONNECT_TIMEOUT_S = 3.0
STOP_WAIT_S = 5.0  # stop() waits this long for the task at most (its loops end on the flag)
FRAME_OVERHEAD_MAX = 64 * 1024  # a message's header, topic and properties besides its body


def frame_size_max(config: BrokerConfig) -> int:
    """The largest frame a slave accepts: a batch, or one message of the largest size."""
    store = config.store
    return min(max(config.ha_transfer_batch_size, store.max_message_size + FRAME_OVERHEAD_MAX),
               store.mapped_file_size_commitlog)


class ReplicationRefused(Exception):
    """The master's log and this slave's differ: replication stops until an operator acts."""


class SlaveHello(Protocol):
    """Controller mode's side of the hello on a slave (the failover service)."""

    def identity(self) -> tuple[int, int]:
        """(the epoch whose master this slave follows, its member id)."""
        ...

    def confirmed(self, offset: int) -> None:
        """The master's confirm offset is ``offset``: consumers are served below it."""
        ...


class _Garbled(Exception):
    """The stream cannot be trusted past this point: close, and connect again later."""


class _HandshakeFailed(Exception):
    """The handshake did not hold (authentication on): close, and connect again after the
    longest pause. ``audited``: the audit log already has the line."""

    def __init__(self, why: str, *, audited: bool = False) -> None:
        super().__init__(why)
        self.audited = audited


class _Link(asyncio.Protocol):
    """One connection to the master (see the module docstring)."""

    def __init__(self, client: HAClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.reader = TransferReader(client.frame_size_max)
        self.expect: int | None = None
        self.tail: collections.deque[bytes] = collections.deque()
        self.reported = -1
        self.last_read = time.monotonic()
        self.last_write = 0.0
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.epoch_confirmed = client.hello is None  # controller mode: the master's epoch frame
        # The handshake (authentication on): nothing is sent or taken before it holds.
        self.authenticated = client.auth is None
        self.opened = time.monotonic()
        self.master_nonce: bytes | None = None  # the challenge's, once answered
        self.nonce = b""  # this slave's, sent in its proof
        self.handshake_failed = False  # the next connection waits the longest pause
        self.closing = False  # this side closed it
        self.heard = False  # any byte from the master on this connection
        self.repairing = False  # closed after a cut for a corrupt message: connect again at once

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not its subclasses
        if self.authenticated:
            self._begin()
        else:
            self.transport.write(encode_auth_request())

    def _begin(self) -> None:
        """Say where this slave's log stands (after its hello, in controller mode)."""
        assert self.transport is not None
        store = self.client.store
        tail = store.replica_tail()
        if tail is not None:
            self.expect, first = tail.offset, tail.offset
            self.tail.extend(tail.entries)
        else:
            end = store.max_physical_offset()
            has_log = bool(store.commit_log.mfq.files) and end > 0
            self.expect, first = (end, end) if has_log else (None, 0)
        if self.client.hello is not None:
            self.transport.write(encode_hello(*self.client.hello.identity()))
        self._report(first)

    def connection_lost(self, exc: Exception | None) -> None:
        if (not self.authenticated and self.master_nonce is not None and not self.closing
                and not self.handshake_failed):
            self.handshake_failed = True
            log.error("replication: master %s closed the connection on this slave's proof: it "
                      "does not take this slave's inner credentials "
                      "(inner_client_authentication_credentials must name a Super user there)",
                      self.client.master)
        elif (self.client.auth is None and self.client.hello is None and not self.heard
              and not self.closing):
            # A master with authentication on answers a slave without it with nothing at all.
            self.handshake_failed = True
            log.warning("replication: master %s closed the connection without sending a byte: "
                        "if it has authentication_enabled, this slave needs it too (with "
                        "inner_client_authentication_credentials)", self.client.master)
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        self.heard = True
        client = self.client
        try:
            frames = self.reader.feed(data)
            stored_any = False
            for frame in frames:
                stored_any |= self._take(frame)
        except ReplicationRefused as e:
            client.refuse(str(e))
            self.close()
            return
        except _HandshakeFailed as e:
            self.handshake_failed = True
            if not e.audited:
                log.error("replication from %s: %s", client.master, e)
            self.close()
            return
        except (_Garbled, RemoteProtocolError) as e:
            self.handshake_failed = not self.authenticated  # an impostor is not retried fast
            log.error("replication from %s: %s; closing and connecting again", client.master, e)
            self.close()
            return
        client.bytes_received += len(data)
        if stored_any:
            client.store.wake()  # dispatch: consume queues, index, held pulls
        if self.expect is not None and self.expect != self.reported:
            self._report(self.expect)  # the end of the last whole frame taken

    # -- frames ---------------------------------------------------------------------------------
    def _take(self, frame: TransferFrame) -> bool:
        """Store (or compare) one frame; True when bytes were stored."""
        if frame.offset == AUTH_MARK or not self.authenticated:
            self._handshake(frame)
            return False
        if frame.offset == CONFIRM_MARK:
            self._confirm_frame(frame)
            return False
        if not self.epoch_confirmed or frame.offset == HELLO_MARK:
            self._epoch_frame(frame)
            return False
        expect = self.expect
        if expect is not None and frame.offset != expect:
            if frame.data:
                raise _Garbled(f"a frame at offset {frame.offset}, {expect} expected")
            self._mismatched_heartbeat(frame.offset, expect)
        if not frame.data:
            if self.tail and expect is not None:
                self._mismatched_heartbeat(frame.offset, expect)
            self.client.master_end_seen = frame.offset
            return False
        data, at = frame.data, 0
        position = frame.offset
        view = memoryview(data)
        while self.tail and at < len(data):
            want = self.tail[0]
            if view[at:at + len(want)] != want:
                raise ReplicationRefused(self.client.diverged_remark(
                    f"the master's entry at {position} differs from this slave's", position))
            at += len(want)
            self.tail.popleft()
            position += stored.total_size(want) if stored.is_blank_entry(want) else len(want)
        self.expect = position
        if at == len(data):
            return False
        return self._append(position, data[at:] if at else data)

    def _handshake(self, frame: TransferFrame) -> None:
        """The master's challenge, then its acceptance (authentication on)."""
        auth = self.client.auth
        if auth is None:
            raise _HandshakeFailed(
                "the master speaks the authentication handshake (authentication_enabled is on "
                "there): turn it on here too, with inner_client_authentication_credentials")
        if self.authenticated or frame.offset != AUTH_MARK:
            raise _Garbled(f"a frame at offset {frame.offset} during the handshake"
                           if not self.authenticated else "an auth frame after the handshake")
        transport = self.transport
        assert transport is not None
        if self.master_nonce is None:
            master_nonce = parse_auth_challenge(frame.data)
            mine = auth.credentials
            if mine is None:
                raise _HandshakeFailed("authentication is on but this slave has no inner "
                                       "credentials (inner_client_authentication_credentials)")
            self.nonce = HAAuth.nonce()
            transport.write(encode_auth_proof(
                mine.access_key, slave_mac(mine.secret_key, master_nonce, self.nonce), self.nonce))
            self.master_nonce = master_nonce
            return
        proof = parse_auth_accept(frame.data)
        reason = auth.check_master(proof, self.nonce, self.master_nonce, self.client.master)
        if reason is not None:
            raise _HandshakeFailed(reason, audited=True)
        self.authenticated = True
        log.info("replication: master %s accepted this slave (master user %s)", self.client.master,
                 proof.access_key)
        self._begin()

    def _epoch_frame(self, frame: TransferFrame) -> None:
        """Controller mode: the master's epoch frame must come first and name our epoch."""
        hello = self.client.hello
        if hello is None or frame.offset != HELLO_MARK or self.epoch_confirmed:
            raise _Garbled(f"a frame at offset {frame.offset} where the master's epoch frame "
                           "was expected" if hello is not None else "an epoch frame without "
                           "controller mode")
        epoch, member = unpack_identity(int.from_bytes(frame.data, "big", signed=True))
        want, _ = hello.identity()
        if epoch != want:
            raise _Garbled(f"the master (member {member}) is master of epoch {epoch}, this slave "
                           f"follows epoch {want}: not taking its bytes")
        self.epoch_confirmed = True

    def _confirm_frame(self, frame: TransferFrame) -> None:
        """Controller mode: the master's confirm offset, after its epoch frame."""
        hello = self.client.hello
        if hello is None or not self.epoch_confirmed:
            raise _Garbled("a confirm frame before the master's epoch frame" if hello is not None
                           else "a confirm frame without controller mode")
        offset = int.from_bytes(frame.data, "big", signed=True)
        if offset < 0:
            raise _Garbled(f"a confirm offset of {offset}")
        hello.confirmed(offset)

    def _mismatched_heartbeat(self, offset: int, expect: int) -> None:
        """A heartbeat that does not continue this log (the master's end, or where it could
        start from): the reason to refuse."""
        end = self.client.store.max_physical_offset()
        if self.tail:
            where = f"its log ends at {offset}" if offset <= expect else "its log differs there"
            raise ReplicationRefused(self.client.diverged_remark(
                f"the master does not have this slave's last message at {expect} ({where}; "
                f"this slave's log ends at {end})", min(offset, expect)))
        if offset < expect:
            raise ReplicationRefused(self.client.diverged_remark(
                f"the master's log ends at {offset}, this slave's at {end}", offset))
        raise ReplicationRefused(
            f"replication refused: the master streams from {offset} but this slave's log ends "
            f"at {expect}: the master no longer holds {expect}..{offset} (retention deleted "
            "it). Empty this slave's store (or truncate it to 0 with `orbitmq store truncate`) "
            "so that it copies the master's log again")

    def _append(self, offset: int, data: bytes) -> bool:
        result = self.client.store.append_replicated(offset, data)
        if result.status is ReplicaAppendStatus.APPENDED:
            self.expect = result.end_offset
            return True
        if result.status is ReplicaAppendStatus.OFFSET_MISMATCH:
            raise _Garbled(f"frame at {offset} refused: {result.problem}")
        if result.status is ReplicaAppendStatus.GARBLED:
            raise _Garbled(f"garbled frame at {offset} refused, nothing written: {result.problem}")
        raise _Garbled(f"frame at {offset} not stored: {result.problem}")

    # -- reports --------------------------------------------------------------------------------
    def _report(self, offset: int) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(encode_report(offset))
            self.reported = offset
            self.last_write = time.monotonic()

    def heartbeat(self, now: float) -> None:
        """Report again when idle; close when the master has been silent too long."""
        client = self.client
        if not self.authenticated and now - self.opened > HANDSHAKE_TIME_MAX_S:
            self.handshake_failed = True
            log.warning("replication: no %s from master %s within %.0f s: is "
                        "authentication_enabled on there too?",
                        "acceptance" if self.master_nonce is not None else "challenge",
                        client.master, HANDSHAKE_TIME_MAX_S)
            self.close()
            return
        if now - self.last_read > client.housekeeping_s:
            log.warning("replication: master %s silent for %.1f s; connecting again",
                        client.master, now - self.last_read)
            self.close()
            return
        if now - self.last_write >= client.heartbeat_s and self.reported >= 0:
            self._report(self.reported)

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.abort()  # nothing worth flushing: reports are sent again


class HAClient:
    """Keeps a slave replicating from its master (see the module docstring).

    Args:
        config: heartbeat and housekeeping intervals, frame bounds.
        store: the slave's store (in replica mode).
        master_address: the master's HA address now ("" while unknown): the configured
            ``ha_master_address``, else what the name server told the last registration.
        auth: the handshake's checks when authentication is on (None: RocketMQ 4.x's stream).
    """

    def __init__(self, config: BrokerConfig, store: MessageStore,
                 master_address: Callable[[], str], auth: HAAuth | None = None) -> None:
        self.config = config
        self.auth = auth
        self.store = store
        self._address = master_address
        tls = ClientTls.of(config)  # tls_enable / tls_client_*: the master's HA port in TLS
        self._tls = ReloadingContext.for_client(tls, "HA client TLS") if tls else None
        self.frame_size_max = frame_size_max(config)
        self.heartbeat_s = config.ha_send_heartbeat_interval_ms / 1000
        self.housekeeping_s = config.ha_housekeeping_interval_ms / 1000
        self.master = ""
        self.refused: str | None = None  # why replication stopped for good (see refuse)
        self.hello: SlaveHello | None = None  # controller mode (the failover service sets it)
        self.link: _Link | None = None
        self.local_address = ""  # this side's address of the HA connection (cluster list)
        self.bytes_received = 0
        self.master_end_seen = -1  # the master's end as its last heartbeat said
        self.connected_since_ms = 0
        self._task: asyncio.Task[None] | None = None
        # Set by stop(): the loops end on it too, since Python 3.11's asyncio.wait_for can
        # swallow a cancellation that meets its timeout (the task then ran on, and a failover's
        # stop_following waited for it for ever).
        self._stopping = False
        self._address_changed = asyncio.Event()
        self._listener: Callable[[int], object] | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._stopping = False
        self._task = loop.create_task(self._run(), name="orbitmq-ha-client")
        if self._listener is None:  # a corrupt message cut the log: stream again from its end
            def cut(offset: int) -> None:
                try:
                    here = asyncio.get_running_loop()
                except RuntimeError:
                    here = None
                if here is loop:  # before any frame read after the cut is taken
                    self._log_cut(offset)
                else:
                    loop.call_soon_threadsafe(self._log_cut, offset)
            self._listener = cut
            self.store.corruption.add_listener(cut)

    def _log_cut(self, offset: int) -> None:
        """The store cut this slave's log at ``offset`` for a corrupt message: the link's idea
        of where the log ends is stale, so it is dropped and opened again at once; the new one
        reports the new end and the master streams the rest again."""
        link = self.link
        log.warning("replication: this slave's log was cut at %d for a corrupt message; "
                    "fetching the rest again from master %s%s", offset, self.master or "(unknown)",
                    "" if self.connected else " (not connected now: reads stop at the cut "
                    "until it is reached)")
        if link is not None:
            link.repairing = True
            link.close()

    async def stop(self) -> None:
        if self._listener is not None:
            self.store.corruption.remove_listener(self._listener)
            self._listener = None
        self._stopping = True
        task, self._task = self._task, None
        if self.link is not None:
            self.link.close()  # ends _serve's wait
            self.link = None
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=STOP_WAIT_S)
            if not task.done():
                log.error("replication: the HA client's task did not end within %.0f s of its "
                          "stop; left to end on its own", STOP_WAIT_S)

    def address_changed(self) -> None:
        """The master's address may have changed: drop a connection to an old one."""
        self._address_changed.set()
        link = self.link
        if link is not None and self._address() and self._address() != self.master:
            link.close()

    @property
    def connected(self) -> bool:
        link = self.link
        return link is not None and link.transport is not None and not link.closed.done()

    def refuse(self, remark: str) -> None:
        self.refused = remark
        log.error("%s", remark)

    def diverged_remark(self, what: str, at_most: int) -> str:
        return (f"replication refused: this slave's commit log holds bytes its master ({self.master}) "
                f"does not have: {what}. Was it promoted by hand and demoted? Stop it, cut its log "
                f"with `orbitmq store truncate --store {self.config.store.store_path} --offset N` "
                f"(N at most {at_most}, where the two logs still agree; 0 copies the master's log "
                "again) and start it; it refuses to replicate until then")

    async def _run(self) -> None:
        delay = RECONNECT_DELAY_MIN_S
        loop = asyncio.get_running_loop()
        while self.refused is None and not self._stopping:
            address = self._address()
            if not address:
                self._address_changed.clear()
                try:
                    await asyncio.wait_for(self._address_changed.wait(), 1.0)
                except TimeoutError:
                    pass
                continue
            self.master = address
            host, _, port = address.rpartition(":")
            try:
                context = self._tls.get() if self._tls is not None else None
                _, link = await asyncio.wait_for(
                    loop.create_connection(lambda: _Link(self), host, int(port), ssl=context,
                                           server_hostname=host if context else None),
                    CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError, ValueError) as e:
                log.info("replication: cannot connect to master %s: %s", address, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_DELAY_MAX_S)
                continue
            self.link = link
            sock = link.transport.get_extra_info("sockname") if link.transport else None
            self.local_address = f"{sock[0]}:{sock[1]}" if isinstance(sock, tuple) else ""
            self.connected_since_ms = int(time.time() * 1000)
            log.info("replication: connected to master %s from %s", address, self.local_address)
            await self._serve(link)
            self.link = None
            if self.refused is None:
                log.info("replication: connection to master %s closed", address)
                delay = RECONNECT_DELAY_MIN_S
                if not link.repairing:
                    await asyncio.sleep(RECONNECT_DELAY_MAX_S if link.handshake_failed else delay)

    async def _serve(self, link: _Link) -> None:
        tick = max(min(self.heartbeat_s, self.housekeeping_s) / 4, 0.01)
        while not link.closed.done() and not self._stopping:
            try:
                await asyncio.wait_for(asyncio.shield(link.closed), tick)
            except TimeoutError:
                link.heartbeat(time.monotonic())

    def status(self) -> dict[str, object]:
        """What runtime info, the HA status and ``cluster list`` show of this slave."""
        link = self.link
        return {
            "masterAddr": self.master,
            "connected": self.connected,
            "localAddr": self.local_address if self.connected else "",
            "maxOffset": self.store.max_physical_offset(),
            "lastReadTimestamp": int(time.time() * 1000 - (time.monotonic() - link.last_read) * 1000)
            if link is not None else 0,
            "bytesReceived": self.bytes_received,
            "refused": self.refused or "",
        }
