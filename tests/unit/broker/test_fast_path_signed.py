"""The native fast path's check of signed sends (broker/_native/fastpath_auth.c, hmac_sha1.c)
against the Python guard (security/guard.py), no sockets: the C HMAC-SHA1 against hashlib, then
the same frames to ``FastPath.auth_check`` and to ``AccessGuard.check``. A frame the C check
passes is one the guard admits; the C check refuses exactly what the guard refuses for the
reasons it shares with it (no key, unsigned, unknown or disabled user, a signature that does
not match), and declines to the guard what it leaves to it (repeated or non-ASCII keys, a
non-canonical Base64 spelling, a pair the guard has not yet admitted).

The whole broker with both paths over sockets is tests/integration/test_fast_path_auth.py.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orbitmq.broker.fast_path import INERT_PROPERTIES, NativeAccess, user_snapshot
from orbitmq.broker.native import NATIVE
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.command import RemotingCommand, SerializeType, decode_command, encode
from orbitmq.protocol.native import NATIVE as PROTOCOL_NATIVE
from orbitmq.security.admin_handlers import AuthAdminHandlers
from orbitmq.security.audit import AuditLog
from orbitmq.security.guard import AccessGuard, AccessSettings
from orbitmq.security.model import (
    Acl,
    Action,
    Decision,
    PolicyEntry,
    Resource,
    User,
    UserStatus,
    UserType,
    parse_source_ips,
)
from orbitmq.security.registry import AuthRegistry
from orbitmq.security.server_access import ServerAccess
from orbitmq.security.signature import Credentials, sign_fields
from orbitmq.security.stateful import SESSION_SIZE, remembers, session_of

pytestmark = pytest.mark.skipif(NATIVE is None, reason="C speedups not built or turned off")

OK, FRAME, NO_KEY, UNSIGNED, UNKNOWN, DISABLED, BAD_SIG, NOT_ALLOWED, FIELDS = range(9)
STORE = bytes([127, 0, 0, 1]) + (10911).to_bytes(4, "big")
ROOT = Credentials("root", "root-secret-1")
ALICE = Credentials("alice", "alice-secret-1")  # Normal: Pub on Orders
BOB = Credentials("bob", "bob-secret-11")  # Normal, disabled
CAROL = Credentials("carol", "carol-secret-1")  # Normal: Pub on Orders from 127.0.0.0/8 only
GHOST = Credentials("ghost", "ghost-secret-1")  # no such user
PEER = "127.0.0.1"


def _registry() -> AuthRegistry:
    reg = AuthRegistry()
    reg.put_user(User(ROOT.access_key, ROOT.secret_key, UserType.SUPER), create=True)
    for who in (ALICE, CAROL):
        reg.put_user(User(who.access_key, who.secret_key), create=True)
    reg.put_user(User(BOB.access_key, BOB.secret_key, status=UserStatus.DISABLE), create=True)
    pub = frozenset({Action.PUB})
    reg.put_acl(Acl(ALICE.access_key, (PolicyEntry(Resource.parse("Topic:Orders"), pub),)))
    reg.put_acl(Acl(CAROL.access_key, (PolicyEntry(Resource.parse("Topic:Orders"), pub,
                                                   Decision.ALLOW,
                                                   parse_source_ips(["127.0.0.0/8"])),)))
    return reg


def _native(authorization: bool = True, open_codes: tuple[int, ...] = ()) -> Any:
    assert NATIVE is not None
    native = NATIVE.FastPath(STORE, 4096, 1 << 16, 1 << 20, tuple(INERT_PROPERTIES), (1024,),
                             1 << 30, (authorization, open_codes))
    native.set_topics({"Orders": 4, "Other": 4})
    return native


class Pair:
    """One C check (with its NativeAccess) and one guard over the same registry."""

    def __init__(self, *, authorization: bool = True, audit_allowed: bool = False) -> None:
        self.registry = _registry()
        self.guard = AccessGuard(AccessSettings(True, authorization), self.registry,
                                 AuditLog(log_allowed=audit_allowed))
        access = ServerAccess(self.registry, self.guard, AuthAdminHandlers(self.registry), None)
        self.native = _native(authorization)
        self.access = NativeAccess(self.native, access)

    def c(self, frame: bytes) -> int:
        return int(self.native.auth_check(frame))

    def python(self, frame: bytes) -> bool:
        """Whether the guard admits the frame (and, through on_admitted, teaches the C check)."""
        return self.guard.check(decode_command(frame[4:]), PEER) is None


def send_fields(to: str = "Orders", **more: str) -> dict[str, str]:
    return {"a": "pg", "b": to, "c": "TBW102", "d": "4", "e": "1", "f": "0",
            "g": "1767000000000", "h": "0", "i": "UNIQ_KEY\x01ABC\x02", "j": "0", "k": "false",
            "m": "false", **more}


def signed(who: Credentials | None, fields: dict[str, str] | None = None, body: bytes = b"hello",
           *, code: int = RequestCode.SEND_MESSAGE_V2,
           ser: SerializeType = SerializeType.JSON) -> bytes:
    ext = dict(send_fields() if fields is None else fields)
    if who is not None:
        sign_fields(ext, body, who)
    return encode(RemotingCommand(code=int(code), opaque=7, ext_fields=ext, body=body,
                                  serialize_type=ser))


def reframe(frame: bytes, **ext: str | None) -> bytes:
    """``frame`` with extFields set (None: removed), its signature left as it was."""
    cmd = decode_command(frame[4:])
    for key, value in ext.items():
        if value is None:
            cmd.ext_fields.pop(key, None)
        else:
            cmd.ext_fields[key] = value
    return encode(cmd)


# -- HMAC-SHA1 -----------------------------------------------------------------------------------

@pytest.mark.parametrize("fips", [False, True])
def test_hmac_sha1_is_hashlibs_for_every_padding_boundary_and_key_length(fips: bool) -> None:
    assert PROTOCOL_NATIVE is not None
    for n in (*range(0, 140), 1000, 4096, 65536 + 7):
        data = os.urandom(n)
        for key in (b"", b"k", os.urandom(63), os.urandom(64), os.urandom(65), os.urandom(200)):
            assert PROTOCOL_NATIVE.hmac_sha1(key, data, fips) == hmac.new(key, data, hashlib.sha1).digest()


def test_the_sha_extensions_are_used_where_the_cpu_has_them() -> None:
    assert PROTOCOL_NATIVE is not None
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        pytest.skip("no /proc/cpuinfo")
    flags = cpuinfo.read_text()
    assert (" sha_ni" in flags and " sse4_1" in flags) == PROTOCOL_NATIVE.SHA1_NI


# -- what the C check passes and why it declines -------------------------------------------------

@pytest.mark.parametrize("ser", [SerializeType.JSON, SerializeType.ROCKETMQ])
@pytest.mark.parametrize("code", [RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE])
def test_a_super_users_signed_send_passes_in_both_header_kinds(ser: SerializeType,
                                                               code: int) -> None:
    p = Pair()
    frame = signed(ROOT, code=code, ser=ser)
    assert (p.c(frame), p.python(frame)) == (OK, True)
    with_token = signed(Credentials(ROOT.access_key, ROOT.secret_key, "token-1"), ser=ser)
    assert (p.c(with_token), p.python(with_token)) == (OK, True)
    empty_body = signed(ROOT, body=b"", ser=ser)
    assert (p.c(empty_body), p.python(empty_body)) == (OK, True)


def test_refusals_are_the_guards() -> None:
    p = Pair()
    good = signed(ROOT)
    sig = decode_command(good[4:]).ext_fields["Signature"]
    flipped = ("B" if sig[0] == "A" else "A") + sig[1:]
    cases = {
        signed(None): NO_KEY,
        reframe(good, AccessKey=""): NO_KEY,
        reframe(good, Signature=None): UNSIGNED,
        reframe(good, Signature=""): UNSIGNED,
        reframe(good, Signature=flipped): BAD_SIG,
        reframe(good, Signature=sig[:-1]): BAD_SIG,
        reframe(good, e="2"): BAD_SIG,  # a signed field changed
        reframe(good, SecurityToken="t"): BAD_SIG,  # a field added after signing
        signed(ROOT)[:-1] + b"?": BAD_SIG,  # the body changed
        signed(GHOST): UNKNOWN,
        signed(BOB): DISABLED,
        signed(Credentials(ROOT.access_key, "not-the-secret")): BAD_SIG,
    }
    for frame, reason in cases.items():
        assert (p.c(frame), p.python(frame)) == (reason, False), decode_command(frame[4:])


def test_what_it_leaves_to_the_guard() -> None:
    p = Pair()
    good = signed(ROOT)
    sig = decode_command(good[4:]).ext_fields["Signature"]
    raw = base64.b64decode(sig)
    # The same 20 bytes spelt another way (the last character's two unused bits set): the guard
    # decodes it, the C check compares only the canonical spelling.
    last = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    other = sig[:-2] + last[last.index(sig[-2]) | 1] + "="
    if other != sig:
        assert base64.b64decode(other) == raw
        assert (p.c(reframe(good, Signature=other)), p.python(reframe(good, Signature=other))) \
            == (BAD_SIG, True)
    # "topic" beside "b": the guard authorizes "topic", the store writes "b"
    both = signed(ROOT, send_fields(to="Orders", topic="Other"))
    assert p.c(both) == FIELDS
    nonascii = signed(ROOT, send_fields(**{"é": "x"}))
    assert (p.c(nonascii), p.python(nonascii)) == (FIELDS, True)
    many = signed(ROOT, send_fields(**{f"x{i}": "v" for i in range(40)}))
    assert (p.c(many), p.python(many)) == (FIELDS, True)
    numbers = json_with_number(good)  # a JSON number in the header: the C reader declines it
    assert p.c(numbers) == FRAME
    assert p.c(signed(ROOT, code=RequestCode.PULL_MESSAGE)) == FRAME


def json_with_number(frame: bytes) -> bytes:
    """``frame`` (JSON header) with extField "d" as a JSON number: signed as its string form."""
    length, mixed = struct.unpack_from(">ii", frame)
    header = frame[8 : 8 + (mixed & 0xFFFFFF)].replace(b'"d":"4"', b'"d":4')
    body = frame[8 + (mixed & 0xFFFFFF) :]
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def test_a_repeated_key_is_declined() -> None:
    p = Pair()
    frame = signed(ROOT)
    length, mixed = struct.unpack_from(">ii", frame)
    header = frame[8 : 8 + (mixed & 0xFFFFFF)]
    doubled = header.replace(b'"extFields":{', b'"extFields":{"Signature":"x",')
    body = frame[8 + (mixed & 0xFFFFFF) :]
    again = struct.pack(">ii", 4 + len(doubled) + len(body), len(doubled)) + doubled + body
    assert p.c(again) == FIELDS


def test_a_normal_user_passes_once_the_guard_admitted_the_topic() -> None:
    p = Pair()
    to_orders, to_other = signed(ALICE), signed(ALICE, send_fields(to="Other"))
    assert p.c(to_orders) == NOT_ALLOWED
    assert p.python(to_orders)  # admitted: the pair is learnt
    assert p.c(to_orders) == OK and p.c(signed(ALICE)) == OK
    assert p.c(to_other) == NOT_ALLOWED and not p.python(to_other)
    assert p.c(to_other) == NOT_ALLOWED  # a refusal teaches nothing
    # any change of the registry empties the pairs: the guard decides again
    p.registry.put_acl(Acl(ALICE.access_key, ()))
    assert p.c(to_orders) == NOT_ALLOWED and not p.python(to_orders)
    assert p.c(to_orders) == NOT_ALLOWED


def test_a_user_whose_rules_name_source_addresses_is_never_learnt() -> None:
    p = Pair()
    frame = signed(CAROL)
    assert p.python(frame) and p.c(frame) == NOT_ALLOWED


def test_a_pair_decided_under_an_older_version_is_not_kept() -> None:
    p = Pair()
    version = p.registry.version
    assert p.native.allow(version, "alice", "Orders") is True
    p.registry.put_user(User("dave", "dave-secret-1"), create=True)
    assert p.c(signed(ALICE)) == NOT_ALLOWED
    assert p.native.allow(version, "alice", "Orders") is False
    assert p.c(signed(ALICE)) == NOT_ALLOWED


def test_users_follow_the_registry() -> None:
    p = Pair()
    frame = signed(ROOT)
    assert p.c(frame) == OK
    p.registry.put_user(User(ROOT.access_key, "a-new-secret-1", UserType.SUPER), create=False)
    assert (p.c(frame), p.python(frame)) == (BAD_SIG, False)
    p.registry.put_user(User(ROOT.access_key, ROOT.secret_key, UserType.SUPER,
                             UserStatus.DISABLE), create=False)
    assert (p.c(frame), p.python(frame)) == (DISABLED, False)
    p.registry.delete_user(ROOT.access_key)
    assert (p.c(frame), p.python(frame)) == (UNKNOWN, False)


def test_without_authorization_any_enabled_user_passes() -> None:
    p = Pair(authorization=False)
    frame = signed(ALICE, send_fields(to="Other"))
    assert (p.c(frame), p.python(frame)) == (OK, True)


def test_with_audit_allowed_the_guard_sees_every_signed_send() -> None:
    p = Pair(audit_allowed=True)
    assert p.c(signed(ROOT)) == UNKNOWN and p.python(signed(ROOT))


def test_a_whitelisted_send_code_is_taken_unsigned_and_the_others_are_not() -> None:
    native = _native(True, (int(RequestCode.SEND_MESSAGE_V2),))
    assert native.auth_check(signed(None)) == OK
    assert native.auth_check(signed(None, code=RequestCode.SEND_BATCH_MESSAGE)) == NO_KEY


def test_the_snapshot_has_the_inner_credentials_unless_a_saved_user_has_that_name() -> None:
    reg = _registry()
    inner = Credentials("inner", "inner-secret-1")
    reg.add_builtin(User(inner.access_key, inner.secret_key, UserType.SUPER))
    snap = user_snapshot(reg, inner)
    assert snap["inner"] == (b"inner-secret-1", True, True)
    assert snap["bob"] == (BOB.secret_key.encode(), False, False)
    reg.put_user(User("inner", "saved-secret-1"), create=True)
    assert user_snapshot(reg, inner)["inner"] == (b"saved-secret-1", True, False)


def test_it_is_built_with_authentication_or_without_and_stays_so() -> None:
    native = _native()
    assert native.auth_check(signed(ROOT)) == UNKNOWN  # no users until set_users
    with pytest.raises(TypeError):
        native.__init__(STORE, 4096, 1 << 16, 1 << 20, (), (), 1 << 30)
    with pytest.raises(TypeError):
        native.set_users(1, {"root": ("not bytes", True, True)})
    assert native.auth_check(signed(ROOT)) == UNKNOWN
    assert native.allow(0, "alice", "Orders") is True
    assert native.counts()["auth_not_allowed"] == 0


# -- the differential: hypothesis over mutated credentials, fields and bodies --------------------

WHO = st.sampled_from([ROOT, ALICE, BOB, CAROL, GHOST, None,
                       Credentials(ROOT.access_key, ROOT.secret_key, "tok"),
                       Credentials(ALICE.access_key, "wrong-secret")])
TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FFF, exclude_categories=("Cs",)),
               max_size=12)
MUTATION = st.one_of(
    st.none(),
    st.tuples(st.sampled_from(["AccessKey", "Signature", "SecurityToken", "b", "e", "i", "z",
                               "OnsChannel"]), st.one_of(st.none(), TEXT)),
)


def _canonical(sig: str) -> bool:
    try:
        raw = base64.b64decode(sig, validate=True)
    except (binascii.Error, ValueError):
        return False
    return len(raw) == 20 and base64.b64encode(raw).decode() == sig


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(who=WHO, topic=st.sampled_from(["Orders", "Other"]), body=st.binary(max_size=200),
       mutation=MUTATION, after=st.booleans(), ser=st.sampled_from(list(SerializeType)),
       code=st.sampled_from([RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
                             RequestCode.SEND_MESSAGE]))
def test_the_c_check_and_the_guard_agree(who: Credentials | None, topic: str, body: bytes,
                                         mutation: tuple[str, str | None] | None, after: bool,
                                         ser: SerializeType, code: int) -> None:
    p = Pair()
    ext = send_fields(topic)
    if mutation is not None and not after:  # changed before signing: signed as it is
        key, value = mutation
        ext.pop(key, None) if value is None else ext.__setitem__(key, value)
    frame = signed(who, ext, body, code=code, ser=ser)
    if mutation is not None and after:  # changed after signing (a forger's edit)
        frame = reframe(frame, **{mutation[0]: mutation[1]})
    c, admitted = p.c(frame), p.python(frame)
    if c == OK:
        assert admitted, "the C check passed a frame the guard refuses"
    elif c in (NO_KEY, UNSIGNED, UNKNOWN, DISABLED):
        assert not admitted
    elif c == BAD_SIG:
        sig = decode_command(frame[4:]).ext_fields.get("Signature", "")
        assert not admitted or not _canonical(sig)
    elif c == NOT_ALLOWED and admitted:
        name = decode_command(frame[4:]).ext_fields["AccessKey"]
        # learnt, unless the user's rules depend on the peer
        assert p.c(frame) == (NOT_ALLOWED if name == CAROL.access_key else OK)
    else:
        assert c in (NOT_ALLOWED, FIELDS, FRAME)


# -- take() over signed frames -------------------------------------------------------------------

BORN = bytes([10, 1, 2, 3]) + (40000).to_bytes(4, "big")


@pytest.mark.parametrize("frames", [3, 300])
def test_take_stores_a_reads_signed_frames_up_to_the_first_bad_one(frames: int) -> None:
    native = _native()
    native.set_users(1, user_snapshot(_registry(), None))
    body = os.urandom(1024)
    good = [signed(ROOT, send_fields(), body) for _ in range(frames)]
    bad = reframe(good[0], e="2")  # a signed field changed
    stream = b"".join(good) + bad + b"".join(good[:2])
    seg, table = bytearray(1 << 22), {("Orders", 1): 0}  # the queue-offset table holds the queue
    pos, end, answers, stop, _, by_code = native.take(bytearray(stream), 0, BORN, seg, 0, 0, 1,
                                                      table)
    assert (pos, stop, by_code) == (len(good[0]) * frames, 1, (0, frames, 0))
    assert table == {("Orders", 1): frames}
    assert native.counts()["auth_bad_signature"] == 1
    # the guard's turn for the bad one, then the rest
    rest = bytearray(stream[pos + len(bad) :])
    assert native.take(rest, 0, BORN, seg, end, 0, 1, table)[0] == len(rest)
    assert table == {("Orders", 1): frames + 2}


def test_take_and_set_users_from_another_thread() -> None:
    """set_users from another thread, as the registry's listeners run, while the loop's thread
    takes signed frames: every frame is taken or declined whole, nothing fails."""
    native = _native()
    native.set_users(1, user_snapshot(_registry(), None))
    stream = bytearray(b"".join(signed(ROOT, send_fields(), os.urandom(1024))
                                for _ in range(100)))
    stop_flag = threading.Event()

    def churn() -> None:
        users = user_snapshot(_registry(), None)
        while not stop_flag.is_set():
            native.set_users(1, users)

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        taken = 0
        for _ in range(50):
            pos = native.take(stream, 0, BORN, bytearray(1 << 22), 0, 0, 1, dict(_KNOWN))[0]
            assert pos % len(stream[: len(stream) // 100]) == 0
            taken += pos
    finally:
        stop_flag.set()
        thread.join()
    counts = native.counts()
    assert counts["errors"] == 0 and counts["handled"] == taken // (len(stream) // 100)


# -- the stateful strategy (security/stateful.py) ------------------------------------------------

STATEFUL_MS = 60_000
NOW_MS = 1_767_000_000_000


def _stateful_native() -> Any:
    assert NATIVE is not None
    native = NATIVE.FastPath(STORE, 4096, 1 << 16, 1 << 20, tuple(INERT_PROPERTIES), (1024,),
                             1 << 30, (True, (), STATEFUL_MS))
    native.set_topics({"Orders": 4, "Other": 4})
    native.set_users(1, user_snapshot(_registry(), None))
    return native


_KNOWN = {(t, q): 0 for t in ("Orders", "Other") for q in range(8)}  # every queue the tests send to


def _take_one(native: Any, frame: bytes, session: bytearray | None, now: int = NOW_MS) -> int:
    """1 when take() stored the one frame, 0 when it declined it to the guard."""
    by_code = native.take(bytearray(frame), 0, BORN, bytearray(1 << 16), 0, 0, now, _KNOWN,
                          session)[5]
    return sum(by_code)


def test_stateful_a_connection_that_signed_once_is_not_hashed_again() -> None:
    native = _stateful_native()
    forged = reframe(signed(ROOT), Signature=base64.b64encode(b"\0" * 20).decode())
    session = bytearray(SESSION_SIZE)
    assert _take_one(native, forged, session) == 0  # nothing remembered yet: checked, refused
    assert _take_one(native, signed(ROOT), session) == 1
    assert remembers(session, ROOT.access_key, 1, NOW_MS)
    assert _take_one(native, forged, session) == 1  # the connection vouches for root now
    assert _take_one(native, forged, bytearray(SESSION_SIZE)) == 0  # another connection
    assert _take_one(native, forged, None) == 0  # none given: stateless
    assert _take_one(native, forged, session, NOW_MS + STATEFUL_MS) == 0  # expired
    assert _take_one(native, reframe(forged, Signature=None), session) == 0  # still signed
    assert _take_one(native, signed(ALICE), session) == 0  # another user: not yet admitted


def test_stateful_a_registry_change_forgets_every_connection() -> None:
    native = _stateful_native()
    session = bytearray(SESSION_SIZE)
    assert _take_one(native, signed(ROOT), session) == 1
    forged = reframe(signed(ROOT), Signature=base64.b64encode(b"\0" * 20).decode())
    native.set_users(2, user_snapshot(_registry(), None))
    assert _take_one(native, forged, session) == 0
    assert _take_one(native, signed(ROOT), session) == 1
    assert remembers(session, ROOT.access_key, 2, NOW_MS)


def test_stateful_the_guard_and_the_c_check_share_the_record() -> None:
    reg = _registry()
    guard = AccessGuard(AccessSettings(True, True, stateful_ms=STATEFUL_MS), reg)
    attributes: dict[str, Any] = {}
    forged = reframe(signed(ROOT), Signature=base64.b64encode(b"\0" * 20).decode())
    assert guard.check(decode_command(forged[4:]), PEER, attributes) is not None
    assert guard.check(decode_command(signed(ROOT)[4:]), PEER, attributes) is None
    assert guard.check(decode_command(forged[4:]), PEER, attributes) is None
    assert guard.check(decode_command(forged[4:]), PEER, {}) is not None
    assert guard.check(decode_command(forged[4:]), PEER) is not None  # no connection: stateless
    # what the guard remembered, the C check honours (same registry version)
    native = _stateful_native()
    native.set_users(reg.version, user_snapshot(reg, None))
    session = session_of(attributes)
    assert _take_one(native, forged, session, int(time.time() * 1000)) == 1
    reg.put_user(User(ROOT.access_key, "a-new-secret-1", UserType.SUPER), create=False)
    assert guard.check(decode_command(forged[4:]), PEER, attributes) is not None
    # a stateless guard never remembers
    stateless = AccessGuard(AccessSettings(True, True), _registry())
    plain: dict[str, Any] = {}
    assert stateless.check(decode_command(signed(ROOT)[4:]), PEER, plain) is None
    assert stateless.check(decode_command(forged[4:]), PEER, plain) is not None


def test_stateful_ms_must_not_be_negative() -> None:
    assert NATIVE is not None
    with pytest.raises(ValueError, match="stateful_ms"):
        NATIVE.FastPath(STORE, 4096, 1 << 16, 1 << 20, tuple(INERT_PROPERTIES), (1024,), 1 << 30,
                        (True, (), -1))
    with pytest.raises(TypeError, match="session"):
        _stateful_native().take(bytearray(), 0, BORN, bytearray(16), 0, 0, 1, {}, bytearray(3))
