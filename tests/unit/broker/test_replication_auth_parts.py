"""Pure parts of the HA handshake (issue 34): its frames fed whole and byte by byte, every
malformed one refused with RemoteProtocolError, and the checks of a proof (Super users only, macs
bound to their direction and to both nonces, each refusal counted once by reason)."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbitmq.broker.replication.ha_auth import HAAuth, master_mac, slave_mac
from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.ha import (
    AUTH_BODY_MAX,
    AUTH_FRAME_MAX,
    AUTH_KEY_BYTES_MAX,
    AUTH_MARK,
    AUTH_NONCE_SIZE,
    HELLO_MARK,
    AuthProof,
    TransferFrame,
    TransferReader,
    auth_frame_body,
    encode_auth_accept,
    encode_auth_challenge,
    encode_auth_proof,
    encode_auth_request,
    encode_report,
    encode_transfer_header,
    parse_auth_accept,
    parse_auth_challenge,
    parse_auth_proof,
    parse_auth_request,
)
from orbitmq.security.audit import AuditLog
from orbitmq.security.model import User, UserStatus, UserType
from orbitmq.security.registry import AuthRegistry
from orbitmq.security.signature import Credentials

NONCE_A, NONCE_B = b"\xaa" * AUTH_NONCE_SIZE, b"\xbb" * AUTH_NONCE_SIZE
MAC = b"\x05" * 20


# -- frames ------------------------------------------------------------------------------------
@given(st.text(st.characters(codec="utf-8"), min_size=1, max_size=16).filter(
    lambda k: len(k.encode()) <= AUTH_KEY_BYTES_MAX), st.integers(1, 40))
def test_auth_frames_come_out_whole_however_the_bytes_are_cut(key: str, step: int) -> None:
    data = (encode_auth_request() + encode_auth_challenge(NONCE_A)
            + encode_auth_proof(key, MAC, NONCE_B)
            + encode_auth_accept(key, MAC) + encode_transfer_header(0, 2) + b"ok")
    reader, out = TransferReader(16), []
    for i in range(0, len(data), step):
        out += reader.feed(data[i:i + step])
    assert [f.offset for f in out] == [AUTH_MARK] * 4 + [0] and out[4] == TransferFrame(0, b"ok")
    parse_auth_request(out[0].data)
    assert parse_auth_challenge(out[1].data) == NONCE_A
    assert parse_auth_proof(out[2].data) == AuthProof(key, MAC, NONCE_B)
    assert parse_auth_accept(out[3].data) == AuthProof(key, MAC)


def test_the_master_reads_auth_frames_byte_by_byte_and_judges_a_report_at_once() -> None:
    for frame in (encode_auth_request(), encode_auth_proof("k" * AUTH_KEY_BYTES_MAX, MAC, NONCE_B)):
        buf = bytearray()
        for i, byte in enumerate(frame):
            buf.append(byte)
            got = auth_frame_body(buf)
            assert (got is None) == (i < len(frame) - 1)
        assert got == (frame[12:], len(frame)) and len(frame) <= AUTH_FRAME_MAX
    for first in (encode_report(0), encode_report(2**40), struct.pack(">q", HELLO_MARK), b"\xff" * 8):
        with pytest.raises(RemoteProtocolError, match="not an auth frame"):
            auth_frame_body(first)
    assert auth_frame_body(encode_report(0)[:7]) is None  # too few bytes to judge yet
    for size in (0, AUTH_BODY_MAX + 1, -1):
        with pytest.raises(RemoteProtocolError, match="auth frame of"):
            auth_frame_body(struct.pack(">qi", AUTH_MARK, size))


@pytest.mark.parametrize(("parse", "body", "match"), [
    (parse_auth_request, b"", "version none"),
    (parse_auth_request, b"\x02", "version 2"),
    (parse_auth_request, b"\x01\x01", "2 bytes, 1 expected"),
    (parse_auth_challenge, b"", "version none"),
    (parse_auth_challenge, b"\x02" + NONCE_A, "version 2"),
    (parse_auth_challenge, b"\x01" + NONCE_A[:-1], "nonce of 31"),
    (parse_auth_proof, b"\x01\x00" + MAC + NONCE_B, "access key of 0"),
    (parse_auth_proof, b"\x01\x41" + b"k" * 65 + MAC + NONCE_B, "access key of 65"),
    (parse_auth_proof, b"\x01\x05abc", "access key of 5"),
    (parse_auth_proof, b"\x01\x02\xff\xfe" + MAC + NONCE_B, "not UTF-8"),
    (parse_auth_proof, b"\x01\x01k" + MAC, "20 bytes after"),
    (parse_auth_proof, b"\x01\x01k" + MAC + NONCE_B + b"x", "53 bytes after"),
    (parse_auth_accept, b"\x01\x01k" + MAC + b"x", "21 bytes after"),
    (parse_auth_accept, b"\x09\x01k" + MAC, "version 9"),
])
def test_malformed_auth_bodies_are_refused(parse: object, body: bytes, match: str) -> None:
    assert callable(parse)
    with pytest.raises(RemoteProtocolError, match=match):
        parse(body)


def test_random_bytes_as_auth_bodies_parse_or_raise_remote_protocol_error() -> None:
    rng = random.Random(34)
    for _ in range(2000):
        body = rng.randbytes(rng.randrange(0, AUTH_BODY_MAX + 1))
        if body and rng.random() < 0.7:
            body = b"\x01" + body[1:]
        for parse in (parse_auth_request, parse_auth_challenge, parse_auth_proof,
                      parse_auth_accept):
            try:
                parse(body)
            except RemoteProtocolError:
                pass


def test_encoders_refuse_what_no_peer_could_parse() -> None:
    with pytest.raises(ValueError):
        encode_auth_challenge(b"short")
    with pytest.raises(ValueError):
        encode_auth_proof("k" * (AUTH_KEY_BYTES_MAX + 1), MAC, NONCE_B)
    with pytest.raises(ValueError):
        encode_auth_accept("k", MAC[:-1])


# -- the checks --------------------------------------------------------------------------------
def _auth() -> HAAuth:
    registry = AuthRegistry()
    registry.add_builtin(User("inner", "inner-secret", UserType.SUPER))
    registry.ensure_user("alice", "alice-secret", UserType.NORMAL)
    registry.ensure_user("root", "root-secret", UserType.SUPER)
    registry.put_user(User("off", "off-secret", UserType.SUPER, UserStatus.DISABLE), create=True)
    return HAAuth(registry, Credentials("inner", "inner-secret"), AuditLog())


@pytest.mark.parametrize(("user", "secret", "reason"), [
    ("inner", "inner-secret", None),
    ("root", "root-secret", None),
    ("inner", "wrong-secret", "bad_signature"),
    ("alice", "alice-secret", "not_super"),
    ("off", "off-secret", "disabled_user"),
    ("ghost", "inner-secret", "unknown_user"),
])
def test_a_slave_proof_holds_for_a_super_user_with_its_secret_alone(
        user: str, secret: str, reason: str | None) -> None:
    auth = _auth()
    proof = AuthProof(user, slave_mac(secret, NONCE_A, NONCE_B), NONCE_B)
    assert auth.check_slave(proof, NONCE_A, "10.0.0.9:4000") == reason
    assert dict(auth.audit.authentication_failures) == ({reason: 1} if reason else {})


def test_a_mac_is_bound_to_its_direction_and_to_both_nonces() -> None:
    auth = _auth()
    # A slave's mac replayed as a master's acceptance (or the other way round) does not hold.
    reflected = AuthProof("inner", slave_mac("inner-secret", NONCE_A, NONCE_B))
    assert auth.check_master(reflected, NONCE_B, NONCE_A, "m") == "bad_signature"
    accepted = AuthProof("inner", master_mac("inner-secret", NONCE_B, NONCE_A))
    assert auth.check_master(accepted, NONCE_B, NONCE_A, "m") is None
    # An old proof replayed on a connection with a fresh nonce does not hold.
    old = AuthProof("inner", slave_mac("inner-secret", NONCE_A, NONCE_B), NONCE_B)
    assert auth.check_slave(old, b"\xcc" * AUTH_NONCE_SIZE, "s") == "bad_signature"
    assert auth.nonce() != auth.nonce() and len(auth.nonce()) == AUTH_NONCE_SIZE
