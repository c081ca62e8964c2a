"""The native fast path in a broker with authentication and authorization on (issue 34 item 7),
over real sockets: signed sends of a Super user, and of a Normal user once the guard admitted
the topic, are stored by the C code; every refusal (unsigned, unknown user, wrong secret, a topic
the rules do not allow, rules revoked) is the Python guard's answer, audited, with nothing
stored; signed and unsigned frames mixed on one connection are answered in order; the SDK's
signing producer goes the fast way. The C check against the guard frame by frame is
tests/unit/broker/test_fast_path_signed.py.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_support import BrokerHarness, broker_config

import orbitmq
from orbitmq.broker.controller import BrokerController
from orbitmq.broker.native import NATIVE
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand, decode_command, encode
from orbitmq.security.model import Acl, Action, PolicyEntry, Resource, User, UserType
from orbitmq.security.signature import Credentials, sign_fields
from orbitmq.transport import RemotingClient

pytestmark = pytest.mark.skipif(NATIVE is None, reason="C speedups not built or turned off")

ROOT = Credentials("root", "root-secret-1")
ALICE = Credentials("alice", "alice-secret-1")  # Normal: Pub on Orders only
ORDERS, OTHER = "Orders", "Other"
SETTINGS = {"authentication_enabled": True, "authorization_enabled": True,
            "init_authentication_user": json.dumps({"username": ROOT.access_key,
                                                    "password": ROOT.secret_key})}


@pytest.fixture
def h(tmp_path: Path) -> Iterator[BrokerHarness]:
    harness = BrokerHarness(broker_config(tmp_path / "b", **SETTINGS))
    try:
        def setup() -> None:
            harness.broker.topics.update(TopicConfig(ORDERS, 4, 4))
            harness.broker.topics.update(TopicConfig(OTHER, 4, 4))
            harness.broker.topics.update(TopicConfig("Warm", 1, 1))
            registry = harness.broker.access.registry
            registry.put_user(User(ALICE.access_key, ALICE.secret_key), create=True)
            registry.put_acl(Acl(ALICE.access_key, (PolicyEntry(
                Resource.parse(f"Topic:{ORDERS}"), frozenset({Action.PUB})),)))
        harness.on_loop(setup)
        # the store's first segment comes with its first message, stored by the Python path
        assert exchange(harness, [frame(ROOT, "Warm", 0)])[0].code == ResponseCode.SUCCESS
        yield harness
    finally:
        harness.close()


def fields(topic: str, qid: int = 1) -> dict[str, str]:
    return {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": str(qid), "f": "0",
            "g": "1767000000000", "h": "0", "i": "UNIQ_KEY\x01U\x02", "j": "0", "k": "false",
            "m": "false"}


def frame(who: Credentials | None, topic: str, opaque: int, body: bytes = b"body") -> bytes:
    ext = fields(topic)
    if who is not None:
        sign_fields(ext, body, who)
    return encode(RemotingCommand(code=int(RequestCode.SEND_MESSAGE_V2), opaque=opaque,
                                  ext_fields=ext, body=body))


def exchange(h: BrokerHarness, frames: list[bytes]) -> list[RemotingCommand]:
    """Writes the frames at once and reads as many answers, in the order they come."""
    with socket.create_connection(("127.0.0.1", h.port), timeout=15) as sock:
        sock.sendall(b"".join(frames))
        buf, out = bytearray(), []
        while len(out) < len(frames):
            chunk = sock.recv(1 << 16)
            assert chunk, f"connection closed after {len(out)} answers"
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                total = struct.unpack_from(">i", buf)[0]
                out.append(decode_command(bytes(buf[4 : 4 + total])))
                del buf[: 4 + total]
        return out


def stored(h: BrokerHarness, topic: str) -> int:
    table = h.on_loop(lambda: dict(h.broker.store.commit_log.topic_queue_table))
    return sum(n for (t, _), n in table.items() if t == topic)


def counts(h: BrokerHarness) -> dict[str, int]:
    assert h.broker.fast_path is not None
    return h.on_loop(h.broker.fast_path.counts)


def test_signed_sends_are_stored_by_the_fast_path_and_refusals_are_the_guards(
        h: BrokerHarness) -> None:
    audit = h.broker.access.guard.audit
    before = counts(h)
    answers = exchange(h, [frame(ROOT, ORDERS, 1), frame(ROOT, OTHER, 2), frame(ROOT, ORDERS, 3)])
    assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 3
    after = counts(h)
    assert after["handled"] - before["handled"] == 3, after
    # alice: the guard admits her first send to Orders, the C code takes the next ones
    answers = exchange(h, [frame(ALICE, ORDERS, 4), frame(ALICE, ORDERS, 5),
                           frame(ALICE, ORDERS, 6)])
    assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 3
    now = counts(h)
    assert now["auth_not_allowed"] - after["auth_not_allowed"] == 1, now
    assert now["handled"] - after["handled"] >= 1, now
    assert stored(h, ORDERS) == 5 and stored(h, OTHER) == 1
    # refusals: NO_PERMISSION from the guard, audited, nothing stored
    refused = [frame(ALICE, OTHER, 7), frame(None, ORDERS, 8),
               frame(Credentials(ROOT.access_key, "not-the-secret"), ORDERS, 9),
               frame(Credentials("ghost", "ghost-secret-1"), ORDERS, 10), frame(ALICE, OTHER, 11)]
    answers = exchange(h, refused)
    assert [a.code for a in answers] == [ResponseCode.NO_PERMISSION] * 5, answers
    assert [a.opaque for a in answers] == [7, 8, 9, 10, 11]
    assert stored(h, ORDERS) == 5 and stored(h, OTHER) == 1
    last = counts(h)
    for reason in ("not_allowed", "no_key", "bad_signature", "unknown_user"):
        assert last[f"auth_{reason}"] > now[f"auth_{reason}"], (reason, last)
    assert last["auth_not_allowed"] - now["auth_not_allowed"] == 2  # a refusal teaches nothing
    assert audit.authentication_failures["bad_signature"] >= 1
    assert audit.authentication_failures["no_credentials"] >= 1
    assert audit.authorization_denials["no_rule"] >= 2


def test_mixed_frames_on_one_connection_are_answered_in_order(h: BrokerHarness) -> None:
    whos = [ROOT, None, ALICE, ROOT, Credentials(ALICE.access_key, "wrong-secret-1"), ALICE, ROOT]
    frames = [frame(who, ORDERS, i) for i, who in enumerate(whos)]
    answers = exchange(h, frames)
    assert [a.opaque for a in answers] == list(range(len(whos)))
    ok = [a.code == ResponseCode.SUCCESS for a in answers]
    assert ok == [True, False, True, True, False, True, True]
    assert stored(h, ORDERS) == 5


def test_a_registry_change_takes_back_what_the_fast_path_learnt(h: BrokerHarness) -> None:
    assert [a.code for a in exchange(h, [frame(ALICE, ORDERS, 1), frame(ALICE, ORDERS, 2)])] \
        == [ResponseCode.SUCCESS] * 2
    handled = counts(h)["handled"]
    assert exchange(h, [frame(ALICE, ORDERS, 3)])[0].code == ResponseCode.SUCCESS
    assert counts(h)["handled"] == handled + 1  # learnt: the C code took it
    h.on_loop(lambda: h.broker.access.registry.put_acl(Acl(ALICE.access_key, ())))
    answers = exchange(h, [frame(ALICE, ORDERS, 4), frame(ALICE, ORDERS, 5)])
    assert [a.code for a in answers] == [ResponseCode.NO_PERMISSION] * 2
    assert stored(h, ORDERS) == 3
    h.on_loop(lambda: h.broker.access.registry.put_user(
        User(ROOT.access_key, "a-new-secret-1", UserType.SUPER), create=False))
    assert exchange(h, [frame(ROOT, ORDERS, 6)])[0].code == ResponseCode.NO_PERMISSION
    assert exchange(h, [frame(Credentials(ROOT.access_key, "a-new-secret-1"), ORDERS, 7)])[0] \
        .code == ResponseCode.SUCCESS


def test_the_signing_client_goes_the_fast_way(h: BrokerHarness) -> None:
    client = RemotingClient(credentials=ALICE)
    try:
        for i in range(4):
            r = h.invoke(RequestCode.SEND_MESSAGE_V2, fields(ORDERS, i), b"x" * 100, client=client)
            assert r.code == ResponseCode.SUCCESS, r.remark
        assert counts(h)["handled"] >= 3
    finally:
        h.call(client.close())


def test_the_sdk_producer_with_credentials_is_taken_by_the_fast_path(tmp_path: Path) -> None:
    from auth_support import ALICE as SDK_ALICE
    from auth_support import ALICE_TOPIC, auth_cluster

    with auth_cluster(tmp_path) as cluster:
        with orbitmq.Producer("pg", namesrv=cluster.namesrv, credentials=SDK_ALICE) as producer:
            for i in range(20):
                producer.send(orbitmq.Message(ALICE_TOPIC, f"m{i}".encode()))
            batch = [orbitmq.Message(ALICE_TOPIC, b"b") for _ in range(8)]
            producer.send_batch(batch)
        broker = cluster.brokers[0]
        assert broker.fast_path is not None
        got = cluster._loop.call(_counts(broker), 10)
        assert got["handled"] >= 15, got


async def _counts(broker: BrokerController) -> dict[str, int]:
    assert broker.fast_path is not None
    return broker.fast_path.counts()



def test_stateful_a_connection_is_trusted_after_its_first_signed_request(tmp_path: Path) -> None:
    """authentication_strategy = stateful over a real socket: once a connection's request of a
    user passed the check, the connection's later requests of that user are not hashed (a
    wrong signature passes there, on the C path and on the guard's alike), while a new
    connection, an unsigned request or a registry change are checked as before."""
    harness = BrokerHarness(broker_config(tmp_path / "b", **SETTINGS,
                                          authentication_strategy="stateful"))
    try:
        harness.on_loop(lambda: harness.broker.topics.update(TopicConfig(ORDERS, 4, 4)))
        forged = Credentials(ROOT.access_key, "not-the-secret")
        refused = exchange(harness, [frame(forged, ORDERS, 1)])
        assert [a.code for a in refused] == [ResponseCode.NO_PERMISSION]
        # a topic query is the guard's (Python) path, a send the C path's: both trust it
        query = encode(RemotingCommand(code=int(RequestCode.GET_MAX_OFFSET), opaque=5,
                                       ext_fields={"topic": ORDERS, "queueId": "1"}))
        query_forged = RemotingCommand(code=int(RequestCode.GET_MAX_OFFSET), opaque=6,
                                       ext_fields={"topic": ORDERS, "queueId": "1"})
        sign_fields(query_forged.ext_fields, b"", forged)
        frames = [frame(ROOT, ORDERS, 2), frame(forged, ORDERS, 3), frame(forged, ORDERS, 4),
                  encode(query_forged), frame(None, ORDERS, 7)]
        answers = exchange(harness, frames)
        assert [(a.opaque, a.code) for a in answers] == [
            (2, ResponseCode.SUCCESS), (3, ResponseCode.SUCCESS), (4, ResponseCode.SUCCESS),
            (6, ResponseCode.SUCCESS), (7, ResponseCode.NO_PERMISSION)]
        assert exchange(harness, [query])[0].code == ResponseCode.NO_PERMISSION
        assert exchange(harness, [frame(forged, ORDERS, 8)])[0].code == ResponseCode.NO_PERMISSION
        assert stored(harness, ORDERS) == 3
        assert counts(harness)["handled"] >= 2
        # a change of the users forgets every connection
        with socket.create_connection(("127.0.0.1", harness.port), timeout=15) as sock:
            assert _ask(sock, frame(ROOT, ORDERS, 9)).code == ResponseCode.SUCCESS
            assert _ask(sock, frame(forged, ORDERS, 10)).code == ResponseCode.SUCCESS
            harness.on_loop(lambda: harness.broker.access.registry.put_user(
                User(ALICE.access_key, ALICE.secret_key), create=True))
            assert _ask(sock, frame(forged, ORDERS, 11)).code == ResponseCode.NO_PERMISSION
        assert stored(harness, ORDERS) == 5
    finally:
        harness.close()


def _ask(sock: socket.socket, request: bytes) -> RemotingCommand:
    """One request on an open connection, and its answer."""
    sock.sendall(request)
    buf = bytearray()
    while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
        chunk = sock.recv(1 << 16)
        assert chunk, "connection closed"
        buf += chunk
    return decode_command(bytes(buf[4:]))


def test_pulls_are_the_guards_never_read_in_c(h: BrokerHarness) -> None:
    """With authentication on the fast reader leaves pulls to the Python decoder: the guard
    checks a pull's signed fields, which a pull read in C would not carry."""
    def pull(who: Credentials | None, opaque: int) -> bytes:
        ext = h.pull_fields(ORDERS, 1, 0, group="pull-group")
        if who is not None:
            sign_fields(ext, b"", who)
        return encode(RemotingCommand(code=int(RequestCode.PULL_MESSAGE), opaque=opaque,
                                      ext_fields=ext))

    unsigned, signed = exchange(h, [pull(None, 1), pull(ROOT, 2)])
    assert unsigned.code == ResponseCode.NO_PERMISSION and "no AccessKey" in (unsigned.remark or "")
    assert signed.code == ResponseCode.PULL_NOT_FOUND, signed
    assert counts(h)["pulls"] == 0
