"""The native fast path of plain sends: per socket read, one C call stores and answers them.

When bytes arrive on a broker connection, :class:`FastPath` (the connection's fast reader, see
transport/connection.py) hands them to ``FastPath.take`` of the C speedups (broker/_native/fastpath.c)
under the commit log's put lock (``MessageStore.put_in_place``). The C code takes, in order, every
whole frame it can handle entirely, and stops at the first it cannot; the transport then decodes
that frame and dispatches it to the Python handlers, and asks the fast path again for the rest.
Every frame is thus handled once, in order, by one of the two, and the store sees the sends of a
connection in the order they were sent.

Before that, ``FastPath.peek`` (no lock) reads the frame in front: a send goes to ``take``; a
PULL_MESSAGE whose header it can read (broker/_native/pull_request.h: the values the Python
decoder would read, else it declines) goes straight to the connection's request handling as a
:class:`~orbitmq.broker.processor.pull_processor.ParsedPull`, skipping the JSON decoding and the
header parsing (a consumer's every pull; with authentication on, never: the guard checks the
signed fields of the decoded frame); anything else is left to the Python decoder without the put
lock's cost.

What it takes: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) with the
V2 (a..n) header names, JSON or binary headers, where
- the topic is in the snapshot of :meth:`FastPath.topics_changed`: it exists, is writable, has
  write queues, is not a system or retry topic, and its config has nothing the fast path does not
  know (:func:`plain_topic`: a field added to TopicConfig later sends it to the Python path until
  this module learns it);
- the queue id is one of the topic's write queues, sysFlag is 0, 1 or 3 bits only (compressed,
  multi tags: no transaction), the body within ``max_message_size``;
- every property name is in :data:`INERT_PROPERTIES` (an allow-list: DELAY, TRAN_MSG, timer
  properties, user properties... all decline) and the properties pass the stored codec's rule;
- the message fits the rest of the current commit log segment.
Each is encoded by the stored codec's one C encoder straight into the mapped segment, gets its
queue offset from the commit log's own table, and its answer (byte for byte the Python path's)
goes into one buffer for the read. Dispatch finds the new messages like any others: the store's
wake after the read dispatches them (queue and index entries, held pulls woken); a read of one
send to a topic pulls wait on is dispatched in the read, before its answer is written
(``DurableSave.deliver_first``).

What it declines, unchanged and in order, to the Python path: everything else, which decides what
is refused and why: other request codes, responses, V1 header names (the C++ client), unknown
topics and auto-creation, transactions, delays, retry topics, properties it does not know,
malformed or oversized frames and messages, a store that refuses puts (full disk, failed sync,
stopping), a segment roll.

With authentication on, a send is the fast path's only when the C code has checked
it as the guard (security/guard.py) would: signed (AccessKey, Signature) by an enabled user of
the snapshot :meth:`NativeAccess.users_changed` pushes on every change of the registry, with a
signature that matches; and with authorization on, by a Super user, or by a user whose send to
that topic the guard admitted since the last change (:meth:`NativeAccess.admitted` adds the pair;
never for a user whose rules name source addresses, whose answer depends on the peer). Anything
else (unsigned, unknown or disabled user, bad signature, a pair not yet seen, numbers as JSON
numbers) is declined to the Python path, whose guard answers the refusal and audits it, or lets
it through and teaches the fast path the pair. With ``audit_allowed`` on, every allowed request
must leave its audit line: the fast path then takes no signed send. Signed and unsigned traffic
take the same route. The C code checks, Python owns the users: the snapshot is a copy.

Answers keep the connection's request order (RemotingConnection with a fast reader): the answers
of a read wait behind any earlier answer still awaited, and under a durability condition
(SYNC_FLUSH, replication) they wait for it through the durable-save seam like every save:
``DurableSave.answer`` with "durable up to the read's end offset"; a condition that fails turns
them into its failure code (FLUSH_DISK_TIMEOUT...), as the Python path answers.

Turning it off: ``native_fast_path_enable = false`` (config), ``ORBITMQ_PURE_PYTHON=1`` (no C at
all), or at runtime :meth:`FastPath.suspend` (off while the broker's role is SLAVE, as it changes;
off for good in controller mode, whose answers carry the master's epoch and whose fence is the
Python path's) and, read per socket read, the broker's permission (without WRITE the Python path
refuses the sends).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.durable_save import put_answer
from orbitmq.broker.fast_failure import BrokerFastFailure
from orbitmq.broker.native import NATIVE
from orbitmq.broker.processor.pull_processor import parsed_pull
from orbitmq.broker.tables.topic_config_manager import (
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_TOPICS,
)
from orbitmq.config import BrokerRole
from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.metrics.buckets import MESSAGE_SIZE_BOUNDS_BYTES
from orbitmq.protocol.bodies import Perm, TopicConfig
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.command import decode_command, encode
from orbitmq.protocol.headers import SendMessageRequestHeader
from orbitmq.protocol.message import PropertyKey
from orbitmq.protocol.stored import pack_host
from orbitmq.security.stateful import session_of
from orbitmq.store.status import AppendMessageResult, PutMessageResult, PutMessageStatus
from orbitmq.transport.connection import RemotingConnection

if TYPE_CHECKING:
    from orbitmq.protocol.command import RemotingCommand
    from orbitmq.security.guard import Principal
    from orbitmq.security.registry import AuthRegistry
    from orbitmq.security.server_access import ServerAccess
    from orbitmq.security.signature import Credentials

__all__ = ["FastPath", "INERT_PROPERTIES", "NativeAccess", "UNORDERED_CODES", "plain_topic",
           "user_snapshot"]

log = logging.getLogger(__name__)

# Properties the broker stores as they came and acts on only through dispatch (tags, keys, the
# unique key) or not at all: a send with any other property name takes the Python path.
INERT_PROPERTIES = (PropertyKey.UNIQ_KEY, PropertyKey.KEYS, PropertyKey.TAGS, PropertyKey.WAIT,
                    PropertyKey.MSG_REGION, PropertyKey.TRACE_ON)
# Requests answered whenever their messages come (long polling): they hold no answer back.
UNORDERED_CODES = frozenset({int(RequestCode.PULL_MESSAGE)})
GIL_RELEASE_BYTES = 256 * 1024  # a batch this large is copied into the log without the GIL
_BORN = "orbitmq.fast_path.born_host"  # RemotingConnection.attributes: packed peer, b"" if none
_PERM_WRITE = int(Perm.WRITE)
_SEND_CODES = (int(RequestCode.SEND_MESSAGE), int(RequestCode.SEND_MESSAGE_V2),
               int(RequestCode.SEND_BATCH_MESSAGE))
_SEND_CODE_SET = frozenset(_SEND_CODES)
# A user's secret, whether it is enabled, whether it is a Super user: set_users' values.
UserEntry = tuple[bytes, bool, bool]
# (request code, response code, count, seconds each): RemotingServer.note_answered
Timings = Callable[[int, int, int, float], None]
_PUT_OK = PutMessageStatus.PUT_OK
# The TopicConfig fields this module knows; any other must be at its default for a topic to be
# plain (a message type, a timer... added later is then the Python path's until learnt here).
_KNOWN_TOPIC_FIELDS = frozenset({"topic_name", "read_queue_nums", "write_queue_nums", "perm",
                                 "topic_filter_type", "topic_sys_flag", "order"})


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


_OTHER_TOPIC_FIELDS = tuple((f.name, _default(f)) for f in dataclasses.fields(TopicConfig)
                            if f.name not in _KNOWN_TOPIC_FIELDS)


def plain_topic(tc: TopicConfig) -> bool:
    """Whether sends to ``tc`` need nothing of the broker but storing: the fast path's topics."""
    name = tc.topic_name
    return (name not in NOT_ALLOWED_SEND_TOPICS and name not in SYSTEM_TOPICS
            and not name.startswith(RETRY_GROUP_TOPIC_PREFIX) and bool(tc.perm & _PERM_WRITE)
            and tc.write_queue_nums > 0
            and all(getattr(tc, field) == default for field, default in _OTHER_TOPIC_FIELDS))


def _packed(ip: str, port: int) -> bytes:
    """ip + i32 port as stored messages hold a host (ClientError for a non-IP host)."""
    packed, _ = pack_host(ip)
    return packed + (port & 0xFFFFFFFF).to_bytes(4, "big")


def _with_outcome(answers: bytes, code: int, remark: str | None) -> bytes:
    """``answers`` (whole answer frames) with their code and remark replaced: a durability
    condition failed after they were built (rare: decoded and encoded again)."""
    out, pos = [], 0
    view = memoryview(answers)
    while pos < len(answers):
        total = int.from_bytes(answers[pos : pos + 4], "big")
        cmd = decode_command(bytes(view[pos + 4 : pos + 4 + total]))
        cmd.code, cmd.remark = code, remark
        out.append(encode(cmd))
        pos += 4 + total
    return b"".join(out)


def _appended(start: int, end: int, now: int, requests: int) -> AppendMessageResult:
    """The seam's view of a read's appends: ``requests`` messages in [start, end)."""
    return AppendMessageResult(start, end - start, now, 0, requests, [0], b"")


def _answers_after(result: PutMessageResult, answers: bytes) -> bytes:
    """The seam's respond function for a read's answers (see DurableSave.answer)."""
    if result.status is _PUT_OK:
        return answers
    return _with_outcome(answers, *put_answer(result))


def user_snapshot(registry: AuthRegistry, inner: Credentials | None) -> dict[str, UserEntry]:
    """Every user the guard would find by access key, as set_users takes them: the saved ones,
    and the server's inner credentials (a built-in Super user unless a saved user has that
    name)."""
    names = [u.username for u in registry.users()]
    if inner is not None:
        names.append(inner.access_key)
    out: dict[str, UserEntry] = {}
    for name in names:
        user = registry.user(name)
        if user is not None:
            out[name] = (user.password.encode(), user.enabled, user.is_super)
    return out


class NativeAccess:
    """The C check's copy of the users and of the allowed (user, topic) pairs, kept in step
    with the registry and the guard (module docstring): Python owns them, C holds a copy."""

    def __init__(self, native: Any, access: ServerAccess) -> None:
        self._native = native
        self._access = access
        access.registry.on_change(self.users_changed)
        access.guard.on_admitted(self.admitted)
        self.users_changed()

    @staticmethod
    def auth_argument(access: ServerAccess) -> tuple[bool, tuple[int, ...], int]:
        """The C FastPath's ``auth``: (authorization, the send codes the whitelist names, the
        stateful strategy's trust of a connection in ms, 0 when stateless)."""
        settings = access.guard.settings
        return (settings.authorization_enabled,
                tuple(code for code in _SEND_CODES if code in settings.whitelist),
                settings.stateful_ms)

    def users_changed(self) -> None:
        """Push a new snapshot of the users (the registry calls this on every change, from
        whichever thread changed it); it empties the allowed pairs. With ``audit_allowed`` on,
        none: every allowed request must leave its audit line, so the guard sees them all."""
        access = self._access
        version = access.registry.version  # read first: a change meanwhile pushes again, newer
        self._native.set_users(version, {} if access.guard.audit.log_allowed
                               else user_snapshot(access.registry, access.inner))

    def admitted(self, principal: Principal, cmd: RemotingCommand, version: int) -> None:
        """The guard let ``cmd`` through (AccessGuard.on_admitted): a Normal user's send
        teaches the C check its (user, topic) pair, under the registry ``version`` it was
        decided on, unless the user's rules name source addresses (their answer depends on
        the peer, which the pair does not hold)."""
        access = self._access
        if (cmd.code not in _SEND_CODE_SET or principal.is_super
                or not access.guard.settings.authorization_enabled):
            return
        try:  # the topic the access table authorized: the send handler's parser's
            topic = SendMessageRequestHeader.from_any_ext_fields(cmd.ext_fields).topic
        except RemoteProtocolError:
            return
        acl = access.registry.acl(principal.username)
        if acl is not None and any(entry.source_ips for entry in acl.all_entries()):
            return
        self._native.allow(version, principal.username, topic)


class FastPath:
    """The broker's native fast path (module docstring); the connections' fast reader.

    Built by the controller, started once the server listens (the store host is then known).
    """

    def __init__(self, ctx: BrokerContext, native: Any, timings: Timings | None = None,
                 access: ServerAccess | None = None,
                 fast_failure: BrokerFastFailure | None = None) -> None:
        self.ctx = ctx
        # With authentication on: the registry the users come from, the guard that teaches the
        # allowed pairs (module docstring); their copy in C from start().
        self._access = access if access is not None and access.guard.enabled else None
        self.native_access: NativeAccess | None = None
        self._timings = timings  # RemotingServer.note_answered: the metrics' request timings
        self._module = native
        self._native: Any = None  # the C FastPath, from start()
        self._store = ctx.store
        self._saver = ctx.saver
        self._stats = ctx.stats
        self._suspended: dict[str, str] = {}  # who turned it off -> why
        self._pulls = 0  # pull requests read in C (counts())
        self.fast_failure = fast_failure
        # the stateful strategy: each connection's record goes to the C check (it reads and
        # writes it as the guard does: security/stateful.py)
        self._stateful = access is not None and access.guard.settings.stateful_ms > 0
        self._config = ctx.config  # live: UPDATE_BROKER_CONFIG changes broker_permission in place
        self._role_changed(ctx.role.role, ctx.role.broker_id)
        ctx.role.on_change(self._role_changed)
        if ctx.config.enable_controller_mode:  # fencing flips accepts_writes without a role change
            self.suspend("controller", "controller mode: a send's answer carries the master's "
                         "epoch and passes its lease fence (the Python path)")

    def _role_changed(self, role: BrokerRole, broker_id: int) -> None:
        """A slave takes no sends: off while the broker is one (a failover may change it). A
        slave's table follows its master's whole copies, which the snapshot does not: it is
        taken again when the broker stops being one."""
        if role is BrokerRole.SLAVE:
            self.suspend("role", f"a slave (broker id {broker_id}) takes no sends")
        else:
            self.topics_changed()
            self.resume("role")

    @classmethod
    def create(cls, ctx: BrokerContext, timings: Timings | None = None,
               access: ServerAccess | None = None,
               fast_failure: BrokerFastFailure | None = None) -> FastPath | None:
        """The fast path, or None when it is off (config) or the C speedups are not there.
        ``access``: the broker's access control; with its authentication on, the fast path
        checks signatures and rules itself (module docstring)."""
        if not ctx.config.native_fast_path_enable or NATIVE is None:
            return None
        return cls(ctx, NATIVE, timings, access, fast_failure)

    # -- the switch -----------------------------------------------------------------------------
    @property
    def accepting(self) -> bool:
        """Whether it takes frames now: started, not suspended, the broker writable."""
        return (self._native is not None and not self._suspended
                and bool(self._config.broker_permission & _PERM_WRITE))

    def suspend(self, who: str, why: str) -> None:
        """Turn it off until ``resume(who)``: every frame then takes the Python path (the role
        logic's switch: a broker becoming a slave calls this before it refuses sends)."""
        if who not in self._suspended:
            log.info("native fast path off who=%s reason=%s", who, why)
        self._suspended[who] = why

    def resume(self, who: str) -> None:
        if self._suspended.pop(who, None) is not None and not self._suspended:
            log.info("native fast path on again")

    # -- lifecycle and snapshot -----------------------------------------------------------------
    def start(self) -> None:
        """Build the C side for the broker's store host (known once the server listens)."""
        ip, port = self.ctx.host.store_host
        store = self._store
        access = self._access
        self._native = self._module.FastPath(
            _packed(ip, port), store.config.max_message_size, store.max_blob_size,
            self.ctx.config.max_frame_size, tuple(INERT_PROPERTIES),
            tuple(math.ceil(b) for b in MESSAGE_SIZE_BOUNDS_BYTES), GIL_RELEASE_BYTES,
            None if access is None else NativeAccess.auth_argument(access))
        self.topics_changed()
        if access is not None:
            self.native_access = NativeAccess(self._native, access)
        log.info("native fast path on%s", "" if not self._suspended else
                 " but suspended: " + "; ".join(self._suspended.values()))

    def topics_changed(self) -> None:
        """Take a new snapshot of the plain topics (at start, and after a whole table changed)."""
        if self._native is not None:
            table = self.ctx.topics.table
            self._native.set_topics({name: tc.write_queue_nums for name, tc in list(table.items())
                                     if plain_topic(tc)})

    def topic_changed(self, topic: str) -> None:
        """One topic created, changed or deleted (the topic table calls this on every change):
        the snapshot follows at a cost that does not grow with the table, so that the
        100,000th create costs what the 100th does."""
        if self._native is not None:
            tc = self.ctx.topics.table.get(topic)
            self._native.put_topic(topic, tc.write_queue_nums if tc is not None and plain_topic(tc)
                                   else 0)

    def counts(self) -> dict[str, int]:
        """Frames handled, declined and left for a segment roll, pulls read in C (``pulls``),
        and with authentication on the sends declined by the C check, by reason (``auth_*``;
        tests, diagnostics)."""
        return {} if self._native is None else {**self._native.counts(), "pulls": self._pulls}

    # -- the fast reader ------------------------------------------------------------------------
    def __call__(self, conn: RemotingConnection, buf: memoryview, pos: int) -> int:
        """Every frame from ``pos`` on that it handles: runs of sends stored in C, and pulls
        read in C and handed to the connection's handler as a :class:`ParsedPull` (no
        authentication: the guard checks a request's signed fields); stops at the first frame
        it leaves to the Python decoder."""
        native = self._native
        if native is None:
            return pos
        pulls, end = self._access is None, len(buf)
        while end - pos >= 4:  # (a length word: less is a partial frame, the decoder's)
            kind = native.peek(buf, pos)
            if kind is True:
                taken = self._take_sends(conn, buf, pos)
                if taken == pos:
                    return pos
                pos = taken
            elif kind is False or not pulls:
                return pos
            else:
                self._pulls += 1
                conn.received_request(parsed_pull(kind))
                pos += kind[0]
        return pos

    def _take_sends(self, conn: RemotingConnection, buf: memoryview, pos: int) -> int:
        """The sends from ``pos`` on that the C code stores, answered; where it stopped."""
        ff = self.fast_failure  # a read after a stall: the Python path answers SYSTEM_BUSY
        if ff is not None and conn.last_received - ff.last_tick > ff.threshold_s:
            return pos
        if self._suspended or not self._config.broker_permission & _PERM_WRITE:
            return pos  # (a broker without WRITE: the Python path refuses the sends)
        born = conn.attributes.get(_BORN)
        if born is None:
            born = self._born(conn)
        if not born:
            return pos
        take = self._native.take
        session = session_of(conn.attributes) if self._stateful else None
        started = time.perf_counter()

        def write(seg: Any, seg_pos: int, base: int, now: int,
                  table: dict[tuple[str, int], int]) -> tuple[int, tuple[Any, ...]]:
            got = take(buf, pos, born, seg, seg_pos, base, now, table, session)
            return got[1], (got, base, seg_pos, now)

        done = self._store.put_in_place(write)
        if done is None:
            return pos
        (taken, seg_end, answers, _stop, counts, by_code), base, seg_start, now = done
        if counts is None:  # nothing taken
            return taken
        elapsed = time.perf_counter() - started
        saver = self._saver
        if answers is not None and saver.conditions:
            self._answer_durable(conn, answers, base + seg_start, base + seg_end, now,
                                 sum(c[1] for c in counts))
        elif len(counts) == 1 and counts[0][1] == 1 and saver.deliver_first(counts[0][0]):
            # A read of one send (a producer sending as messages come, not a loaded pipeline)
            # to a topic pulls wait on: dispatched here, the pulls it wakes answered and
            # written, then its own answer. The sends of busier reads are left to the
            # iteration's wake, whose pull answers carry more messages each (at 40,000 msgs/s
            # a dispatch per read cost 10-18% more CPU a message and doubled the p99).
            try:
                saver.appended(dispatch=True)
            finally:
                if answers is not None:
                    conn.send_ordered_now(answers)
        else:
            if answers is not None:
                conn.send_ordered_now(answers)
            saver.appended()
        # Counted once answered (a lone send's answer may leave in this call): the loop runs
        # nothing else in between, so no reader of the figures can tell.
        self._stats.on_fast_sends(counts)
        if self._timings is not None:
            self._timed(by_code, elapsed)
        return taken

    def _timed(self, by_code: tuple[int, int, int], seconds: float) -> None:
        """The requests of a read for the request timings, each at the read's time per request
        (under a durability condition: until the answers were built, not until the sync)."""
        assert self._timings is not None
        requests = sum(by_code)
        for code, count in zip(_SEND_CODES, by_code, strict=True):
            if count:
                self._timings(code, 0, count, seconds / requests)

    def _answer_durable(self, conn: RemotingConnection, answers: bytes, start: int, end: int,
                        now: int, requests: int) -> None:
        """The answers of a read whose bytes must be durable first: written now, after a sync
        in this thread, when the read is a lone producer's (``DurableSave.sync_alone``: one
        round trip plus one fdatasync, no future, no timer, no loop iteration in between; the
        seam's bookkeeping after the answer, and the dispatch the next iteration); else once
        the seam's wait is over."""
        saver = self._saver
        status = saver.sync_alone(end)
        if status is not None:  # the answer first: what follows is the loop's bookkeeping
            conn.send_ordered_now(answers if status is _PUT_OK else _answers_after(
                PutMessageResult(status, _appended(start, end, now, requests)), answers))
            saver.appended()
            return
        saver.appended()
        answer = saver.answer(PutMessageResult(_PUT_OK, _appended(start, end, now, requests)),
                              _answers_after, answers)
        if isinstance(answer, asyncio.Future):
            conn.send_ordered_later(answer, requests)
        else:
            conn.send_ordered(answer)

    @staticmethod
    def _born(conn: RemotingConnection) -> bytes:
        """The peer as stored messages hold it (BORNHOST), cached on the connection; b"" when
        it is no IP (its sends take the Python path, which refuses them)."""
        ip, _, port = conn.peer.rpartition(":")
        try:
            born = _packed(ip or "127.0.0.1", int(port) if port.isdigit() else 0)
        except ClientError:
            born = b""
        conn.attributes[_BORN] = born
        return born
