"""The official RocketMQ 5 Python client against `orbitmq standalone` with authentication and
authorization on: it signs every call with ``Credentials(ak, sk)`` (its local time with a
literal ``Z``, which the broker must take whatever the machine's time zone).

- the init user (Super) sends, receives and acks;
- a wrong secret, an unknown user and no credentials cannot send;
- a Normal user whose rules allow Pub and Sub on ``AuthPub*`` and Sub on ``authgroup*`` sends
  and receives there, and cannot send to any other topic.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from rmq5_support import Cluster, Rmq5Driver, unique, wait_until

from orbitmq.client.admin.topics import topic_settings
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.security import AuthRequestCode, Credentials
from orbitmq.transport import LoopThread, RemotingClient

pytestmark = pytest.mark.rmq5

ROOT = Credentials("root", "root-secret-1")
ALICE = Credentials("alice", "alice-secret-1")
ADMIN_WAIT_S = 10.0


class SignedAdmin:
    """Signed remoting calls to the broker (users, rules, topics) as the init user."""

    def __init__(self, broker: str) -> None:
        self.broker = broker
        self._loop = LoopThread("rmq5-auth-admin")
        self._client = RemotingClient(credentials=ROOT)

    def close(self) -> None:
        self._loop.call(self._client.close(), ADMIN_WAIT_S)
        self._loop.stop()

    def call(self, code: int, fields: dict[str, str], body: bytes = b"") -> None:
        cmd = RemotingCommand.request(code, fields, body)
        resp = self._loop.call(self._client.invoke(self.broker, cmd, ADMIN_WAIT_S), ADMIN_WAIT_S + 5)
        assert resp.code == ResponseCode.SUCCESS, (code, resp.code, resp.remark)

    def topic(self, name: str) -> str:
        header = topic_settings(name, read_queue_nums=2, write_queue_nums=2, perm=6, order=False)
        self.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields())
        return name


@pytest.fixture(scope="module")
def secured(rmq5_ready: None, tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[tuple[Cluster, SignedAdmin]]:
    init = json.dumps({"username": ROOT.access_key, "password": ROOT.secret_key})
    found = Cluster(tmp_path_factory.mktemp("rmq5-auth-store"), "--authentication-enabled", "true",
                    "--authorization-enabled", "true", "--init-authentication-user", init)
    admin = SignedAdmin(f"127.0.0.1:{found.ports['broker']}")
    try:
        admin.call(AuthRequestCode.AUTH_CREATE_USER, {"username": ALICE.access_key}, json.dumps(
            {"username": ALICE.access_key, "password": ALICE.secret_key, "userType": "Normal"}).encode())
        admin.call(AuthRequestCode.AUTH_CREATE_ACL, {"subject": "User:alice"}, json.dumps(
            {"subject": "User:alice", "policies": [{"policyType": "Custom", "entries": [
                {"resource": "Topic:AuthPub*", "actions": ["Pub", "Sub"], "decision": "Allow"},
                {"resource": "Group:authgroup*", "actions": ["Sub"], "decision": "Allow"}]}]}).encode())
        yield found, admin
    finally:
        admin.close()
        found.stop()


@pytest.fixture
def cluster(secured: tuple[Cluster, SignedAdmin]) -> Cluster:
    """The secured server (the name lets conftest show its output when a test fails)."""
    return secured[0]


@pytest.fixture
def admin(secured: tuple[Cluster, SignedAdmin]) -> SignedAdmin:
    return secured[1]


def creds(c: Credentials | None) -> dict[str, Any]:
    return {"ak": c.access_key, "sk": c.secret_key} if c is not None else {}


def send_and_receive(driver: Rmq5Driver, cluster: Cluster, who: Credentials, topic: str,
                     group: str) -> None:
    sent = driver.call("send", id=driver_producer(driver, cluster, who, topic), topic=topic,
                       body=f"from {who.access_key}")
    cid = unique("c")
    driver.call("simple", id=cid, endpoint=cluster.endpoint, group=group, topic=topic, await_s=2,
                **creds(who))
    got: list[dict[str, Any]] = wait_until(  # each receive long-polls up to await_s
        "the message received", lambda: driver.call("receive", id=cid, max=8, invisible_s=10)["messages"],
        timeout=30, every=0)
    assert [m["id"] for m in got] == [sent["message_id"]]
    driver.call("ack", id=cid, handle=got[0]["handle"])


def driver_producer(driver: Rmq5Driver, cluster: Cluster, who: Credentials | None,
                    *topics: str) -> str:
    pid = unique("p")
    driver.call("producer", id=pid, endpoint=cluster.endpoint, topics=list(topics),
                timeout_s=3, **creds(who))
    return pid


def test_the_init_user_sends_receives_and_acks(cluster: Cluster, admin: SignedAdmin,
                                               driver: Rmq5Driver) -> None:
    topic = admin.topic(unique("RootT"))
    send_and_receive(driver, cluster, ROOT, topic, unique("rootgroup"))


@pytest.mark.parametrize("who, audited", [
    (Credentials("root", "not-the-secret"), "reason=bad_signature user=root"),
    (Credentials("mallory", "whatever-1"), "reason=unknown_user user=mallory"),
    (None, "names no Credential"),  # the client sends an empty Credential
], ids=["wrong-secret", "unknown-user", "no-credentials"])
def test_bad_credentials_cannot_send(cluster: Cluster, admin: SignedAdmin, driver: Rmq5Driver,
                                     who: Credentials | None, audited: str) -> None:
    topic = admin.topic(unique("AuthPubBad"))
    pid = unique("p")
    started = driver.try_call("producer", id=pid, endpoint=cluster.endpoint, topics=[topic],
                              timeout_s=3, **creds(who))
    if started.get("ok"):
        refused = driver.try_call("send", id=pid, topic=topic, body="x")
        assert not refused.get("ok"), refused
    assert "authentication_failed" in cluster.output() and audited in cluster.output()


def test_a_normal_user_sends_and_receives_where_its_rules_allow_only(
        cluster: Cluster, admin: SignedAdmin, driver: Rmq5Driver) -> None:
    allowed = admin.topic(unique("AuthPubAlice"))
    other = admin.topic(unique("OtherT"))
    send_and_receive(driver, cluster, ALICE, allowed, unique("authgroup"))
    pid = driver_producer(driver, cluster, ALICE, allowed)
    refused = driver.try_call("send", id=pid, topic=other, body="not allowed")
    assert not refused.get("ok"), refused
    assert "no rule allows user alice" in cluster.output()


def test_namespaced_rules_keep_a_user_in_its_namespace(cluster: Cluster, admin: SignedAdmin,
                                                        driver: Rmq5Driver) -> None:
    """Rules name the stored ``NS%name``: ``Topic:shop%*`` lets bob into namespace shop and
    nowhere else, though the other namespace has a topic of the same name."""
    shop, bank, topic = unique("shop"), unique("bank"), unique("Orders")
    bob = Credentials(unique("bob"), "bob-secret-1")
    admin.call(AuthRequestCode.AUTH_CREATE_USER, {"username": bob.access_key}, json.dumps(
        {"username": bob.access_key, "password": bob.secret_key, "userType": "Normal"}).encode())
    admin.call(AuthRequestCode.AUTH_CREATE_ACL, {"subject": f"User:{bob.access_key}"}, json.dumps(
        {"subject": f"User:{bob.access_key}", "policies": [{"policyType": "Custom", "entries": [
            {"resource": f"Topic:{shop}%*", "actions": ["Pub", "Sub"], "decision": "Allow"},
            {"resource": f"Group:{shop}%*", "actions": ["Sub"], "decision": "Allow"}]}]}).encode())
    admin.topic(f"{shop}%{topic}")
    admin.topic(f"{bank}%{topic}")
    pid = unique("p")
    driver.call("producer", id=pid, endpoint=cluster.endpoint, topics=[topic], timeout_s=3,
                namespace=shop, **creds(bob))
    sent = driver.call("send", id=pid, topic=topic, body="in shop")
    cid = unique("c")
    driver.call("simple", id=cid, endpoint=cluster.endpoint, group="billing", topic=topic,
                await_s=2, namespace=shop, **creds(bob))
    got: list[dict[str, Any]] = wait_until(
        "the message received", lambda: driver.call("receive", id=cid, max=8, invisible_s=10)["messages"],
        timeout=30, every=0)
    assert [(m["id"], m["topic"], m["namespace"]) for m in got] == [(sent["message_id"], topic, shop)]
    driver.call("ack", id=cid, handle=got[0]["handle"])
    other = unique("p")
    started = driver.try_call("producer", id=other, endpoint=cluster.endpoint, topics=[topic],
                              timeout_s=3, namespace=bank, **creds(bob))
    if started.get("ok"):
        refused = driver.try_call("send", id=other, topic=topic, body="into bank")
        assert not refused.get("ok"), refused
    assert f"no rule allows user {bob.access_key}" in cluster.output()
    assert f"{bank}%{topic}" in cluster.output()
