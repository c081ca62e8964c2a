"""The HA port with authentication on (issue 34, "HA port"): a slave proves it holds a Super user's
secret (the inner credentials) over a fresh nonce before the master sends one byte of log or
counts one acknowledgement from it, and the master proves the same back.

- Fake slaves (raw sockets: a bare report as RocketMQ 4.x's slave sends first, another version,
  silence) receive 0 bytes; those that ask (an unknown user, a wrong secret, a Normal user, bytes
  after the proof) get the 45-byte challenge and nothing else. All are closed, audited by reason,
  never appear in the master's table of slaves, and never turn a SYNC_MASTER's
  SLAVE_NOT_AVAILABLE into SEND_OK.
- A real slave with the right inner credentials replicates, and SYNC_MASTER sends succeed.
- A slave with a wrong secret, or with authentication off, copies nothing; the failure is logged.
- A fake master (a raw listening socket) with a bad acceptance gives a slave nothing.
- A slave copies its master's users and ACLs into its own metadata store.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from replication_support import (
    Namesrv,
    RawSlave,
    caught_up,
    commit_log_bytes,
    connected,
    ha_port,
    master_config,
    slave_config,
    wait_for,
)
from test_broker_support import BrokerHarness

from orbitmq.broker.replication import master as master_module
from orbitmq.broker.replication.ha_auth import slave_mac
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.ha import (
    AUTH_MARK,
    AUTH_NONCE_SIZE,
    encode_auth_accept,
    encode_auth_challenge,
    encode_auth_proof,
    encode_auth_request,
    encode_report,
    encode_transfer_header,
    parse_auth_challenge,
)
from orbitmq.security.model import Acl, User, UserType
from orbitmq.security.signature import Credentials
from orbitmq.store.metadata_db import ACLS, USERS
from orbitmq.transport import RemotingClient

INNER = Credentials("cluster-inner", "inner-secret-1")


def _auth(creds: Credentials | None = INNER) -> dict[str, Any]:
    out: dict[str, Any] = {"authentication_enabled": True}
    if creds is not None:
        out["inner_client_authentication_credentials"] = json.dumps(
            {"accessKey": creds.access_key, "secretKey": creds.secret_key})
    return out


def _signed(h: BrokerHarness, creds: Credentials = INNER) -> BrokerHarness:
    """The harness's requests signed (the broker's guard refuses unsigned ones)."""
    h.client = RemotingClient(credentials=creds)
    return h


def _failures(h: BrokerHarness) -> dict[str, int]:
    return h.on_loop(lambda: dict(h.broker.access.guard.audit.authentication_failures))


def _links(h: BrokerHarness) -> int:
    return h.on_loop(lambda: h.broker.replication.progress.connected)


def _acked(h: BrokerHarness) -> int:
    return h.on_loop(lambda: h.broker.replication.progress.best_acked)


@pytest.fixture
def master(tmp_path: Path) -> Iterator[BrokerHarness]:
    h = _signed(BrokerHarness(master_config(tmp_path, None, store={"sync_flush_timeout_ms": 400},
                                            **_auth())))
    yield h
    h.close()


def _challenge(raw: RawSlave) -> bytes:
    raw.send(encode_auth_request())
    frame = raw.frame()
    assert frame is not None and frame[0] == AUTH_MARK, frame
    return parse_auth_challenge(frame[1])


def _rest_until_closed(raw: RawSlave, timeout: float = 10.0) -> bytes:
    """Every byte the master sends until it closes the connection (AssertionError if it does not
    within ``timeout``)."""
    raw.sock.settimeout(timeout)
    got = bytes(raw.buffer)
    try:
        while chunk := raw.sock.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"the master kept the connection open for {timeout} s") from None
    return got


def _proof(nonce: bytes, creds: Credentials) -> bytes:
    mine = b"\x07" * AUTH_NONCE_SIZE
    return encode_auth_proof(creds.access_key, slave_mac(creds.secret_key, nonce, mine), mine)


@pytest.mark.parametrize(("fake", "reason"), [
    ("report_first", "malformed"),
    ("another_version", "malformed"),
    ("unknown_user", "unknown_user"),
    ("wrong_secret", "bad_signature"),
    ("normal_user", "not_super"),
    ("reports_after_the_proof", "malformed"),
])
def test_a_fake_slave_gets_the_challenge_alone_and_no_say_in_sync_master(
        master: BrokerHarness, fake: str, reason: str) -> None:
    before = master.send("Secret", b"confidential " * 40)
    assert before.code == ResponseCode.SLAVE_NOT_AVAILABLE, (before.code, before.remark)
    if fake == "normal_user":
        master.on_loop(lambda: master.broker.access.registry.put_user(
            User("reader", "reader-secret", UserType.NORMAL), create=True))
    raw = RawSlave(ha_port(master))
    if fake == "report_first":
        raw.report(0)  # RocketMQ 4.x's slave: "I hold nothing, send me everything"
    elif fake == "another_version":
        raw.send(struct.pack(">qib", AUTH_MARK, 1, 2))
    else:
        nonce = _challenge(raw)
        creds = {"unknown_user": Credentials("nobody", INNER.secret_key),
                 "wrong_secret": Credentials(INNER.access_key, "guessed-secret"),
                 "normal_user": Credentials("reader", "reader-secret")}.get(fake, INNER)
        extra = encode_report(0) * 4 if fake == "reports_after_the_proof" else b""
        raw.send(_proof(nonce, creds) + extra)
    # Closed, and not one byte more: no frame of log, no answer (none at all without a request).
    assert _rest_until_closed(raw) == b""
    raw.close()
    assert _failures(master).get(reason) == 1, _failures(master)
    assert _links(master) == 0 and _acked(master) == -1
    after_send = master.send("Secret", b"still nobody holds it")
    assert after_send.code == ResponseCode.SLAVE_NOT_AVAILABLE, (after_send.code, after_send.remark)


def test_a_silent_connection_is_no_slave_and_is_closed_after_the_handshake_bound(
        master: BrokerHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(master_module, "HANDSHAKE_TIME_MAX_S", 0.5)
    raw = RawSlave(ha_port(master))
    # Connected, not authenticated: not a slave of the table, so a send finds none.
    r = master.send("Secret", b"x")
    assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE and "no slave is connected" in (r.remark or "")
    assert _links(master) == 0
    assert _rest_until_closed(raw) == b""
    raw.close()
    assert _failures(master) == {"timeout": 1}


def test_a_slave_with_the_inner_credentials_replicates_and_sync_master_sends_succeed(
        master: BrokerHarness, tmp_path: Path) -> None:
    slave = _signed(BrokerHarness(slave_config(
        tmp_path, None, ha_master_address=f"127.0.0.1:{ha_port(master)}", **_auth())))
    try:
        wait_for(lambda: connected(master), "the slave is accepted")
        for i in range(20):
            r = master.send("Replicated", f"m{i}".encode() * 30, keys=f"k{i}")
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        wait_for(lambda: caught_up(master, slave), "the slave holds the master's log")
        assert commit_log_bytes(slave) == commit_log_bytes(master)
        assert _failures(master) == {} and _failures(slave) == {}
        status = master.on_loop(master.broker.replication.ha_status)
        assert status["inSyncSlaveNums"] == 1
    finally:
        slave.close()


@pytest.mark.parametrize("slave_auth", ["wrong_secret", "authentication_off"])
def test_a_slave_without_the_right_credentials_copies_nothing(
        master: BrokerHarness, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        slave_auth: str) -> None:
    caplog.set_level(logging.INFO)
    assert master.send("Secret", b"confidential").code == ResponseCode.SLAVE_NOT_AVAILABLE
    settings = (_auth(Credentials(INNER.access_key, "not-the-secret"))
                if slave_auth == "wrong_secret" else {})
    slave = BrokerHarness(slave_config(
        tmp_path, None, ha_master_address=f"127.0.0.1:{ha_port(master)}", **settings))
    try:
        want = "bad_signature" if slave_auth == "wrong_secret" else "malformed"
        wait_for(lambda: _failures(master).get(want), f"the master refuses the slave ({want})")
        wait_for(lambda: any("authentication_failed" in r.getMessage() and f"reason={want}"
                             in r.getMessage() for r in caplog.records), "the audit line")
        hint = ("closed the connection on this slave's proof" if slave_auth == "wrong_secret"
                else "closed the connection without sending a byte")
        wait_for(lambda: any(hint in r.getMessage() for r in caplog.records),
                 "the slave's log line")
        assert slave.broker.store.max_physical_offset() == 0
        assert _links(master) == 0 and _acked(master) == -1
        assert master.send("Secret", b"x").code == ResponseCode.SLAVE_NOT_AVAILABLE
        text = caplog.text
        assert "not-the-secret" not in text and INNER.secret_key not in text
    finally:
        slave.close()


class _FakeMaster:
    """A listening socket that plays a master: a challenge on a request, then ``answer`` to the
    proof."""

    def __init__(self, answer: bytes) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.answer = answer
        self.proofs = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5.0)
                try:
                    if conn.recv(13) != encode_auth_request():
                        continue
                    conn.sendall(encode_auth_challenge(b"\x01" * AUTH_NONCE_SIZE))
                    head = conn.recv(12)
                    if len(head) == 12 and struct.unpack(">q", head[:8])[0] == AUTH_MARK:
                        self.proofs += 1
                    conn.sendall(self.answer)
                    conn.recv(1)  # until the slave closes
                except OSError:
                    pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def test_a_slave_takes_nothing_from_a_master_that_cannot_prove_itself(tmp_path: Path) -> None:
    # The impostor knows the inner access key but not its secret; it sends log bytes anyway.
    junk = b"\x00" * 200
    fake = _FakeMaster(encode_auth_accept(INNER.access_key, b"\x02" * 20)
                       + encode_transfer_header(0, len(junk)) + junk)
    slave = BrokerHarness(slave_config(tmp_path, None, ha_master_address=f"127.0.0.1:{fake.port}",
                                       **_auth()))
    try:
        wait_for(lambda: _failures(slave).get("bad_signature"), "the slave refuses the master")
        assert fake.proofs >= 1
        assert slave.broker.store.max_physical_offset() == 0
    finally:
        slave.close()
        fake.close()


def test_a_slave_copies_its_masters_users_into_its_own_metadata_store(tmp_path: Path) -> None:
    """GET_AUTH_METADATA, every slave_sync_interval_ms: the slave's registry and the rows of its
    metadata store follow the master's users and ACLs, a delete included."""
    ns = Namesrv()
    master = _signed(BrokerHarness(master_config(tmp_path, ns, **_auth())))
    slave = _signed(BrokerHarness(slave_config(tmp_path, ns, **_auth())))
    acl = Acl.from_dict({"subject": "User:copied", "policies": [{"entries": [
        {"resource": "Topic:Copied", "actions": ["Pub"]}]}]})
    try:
        registry = master.broker.access.registry

        def change() -> None:
            registry.put_user(User("copied", "copied-secret-1"), create=True)
            registry.put_acl(acl)
            registry.save()

        master.on_loop(change)

        def stored(kind: str) -> list[str]:
            return [key for key, _, _ in slave.broker.metadata.rows(kind)]

        wait_for(lambda: "copied" in stored(ACLS), "the slave stores the master's user and ACL")
        assert "copied" in stored(USERS)
        assert slave.on_loop(lambda: slave.broker.access.registry.acl("copied")) == acl
        master.on_loop(lambda: (registry.delete_user("copied"), registry.save()))
        wait_for(lambda: "copied" not in stored(USERS), "the slave deletes the user's row")
        assert "copied" not in stored(ACLS)
    finally:
        slave.close()
        master.close()
        ns.close()
