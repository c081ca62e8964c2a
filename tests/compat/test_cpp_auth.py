"""The official C++ client (PyPI `rocketmq` 0.4.4) against `orbitmq standalone` with
authentication and authorization on: it signs with ``set_session_credentials`` (its signature
covers its ``OnsChannel`` field and numbers in their string form, though it sends some as JSON
numbers), and the broker and the name server must rebuild exactly what it signed.

- the init user (Super) sends and push-consumes;
- a wrong secret, an unknown user and no credentials cannot send (the name server refuses their
  route lookups, the broker their sends);
- a Normal user whose rules allow Pub and Sub on ``AuthPub*`` topics and Sub on ``authgroup*``
  groups sends and consumes there, and cannot send to any other topic.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from compat_support import CppClient, RawClient, Servers, unique, wait_for_default_route

from orbitmq.protocol.codes import ResponseCode
from orbitmq.security import AuthRequestCode, Credentials
from orbitmq.testing import standalone_process

pytestmark = pytest.mark.compat

ROOT = Credentials("root", "root-secret-1")
ALICE = Credentials("alice", "alice-secret-1")
SERVER_READY_TIMEOUT_S = 60.0
DELIVERY_WAIT_S = 30.0
SEND_TIMEOUT_MS = 3000


def spec_credentials(creds: Credentials) -> dict[str, str]:
    return {"access_key": creds.access_key, "secret_key": creds.secret_key}


@pytest.fixture(scope="module")
def servers(compat_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    store = tmp_path_factory.mktemp("orbitmq-auth-store")
    init = json.dumps({"username": ROOT.access_key, "password": ROOT.secret_key})
    proc = standalone_process(str(store), "--authentication-enabled", "true",
                              "--authorization-enabled", "true",
                              "--init-authentication-user", init)
    try:
        addrs = proc.wait_ready("namesrv", "broker", timeout=SERVER_READY_TIMEOUT_S)
        found = Servers(addrs["namesrv"], addrs["broker"], proc.output)
        wait_for_default_route(found, credentials=ROOT)
        with RawClient(found.namesrv, ROOT) as raw:
            admin(raw, found.broker, AuthRequestCode.AUTH_CREATE_USER, {"username": "alice"},
                  {"username": "alice", "password": ALICE.secret_key, "userType": "Normal"})
            admin(raw, found.broker, AuthRequestCode.AUTH_CREATE_ACL, {"subject": "User:alice"},
                  {"subject": "User:alice", "policies": [{"policyType": "Custom", "entries": [
                      {"resource": "Topic:AuthPub*", "actions": ["Pub", "Sub"],
                       "decision": "Allow"},
                      {"resource": "Group:authgroup*", "actions": ["Sub"], "decision": "Allow"},
                  ]}]})
        yield found
    finally:
        proc.stop()
        if proc.proc.stdout is not None:
            proc.proc.stdout.close()


def admin(raw: RawClient, broker: str, code: int, fields: dict[str, str],
          body: dict[str, Any]) -> None:
    resp = raw.invoke(broker, code, fields, json.dumps(body).encode())
    assert resp.code == ResponseCode.SUCCESS, (code, resp.code, resp.remark)


def send(cpp: CppClient, creds: Credentials | None, topic: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"group": unique("authpg"), "send_timeout_ms": SEND_TIMEOUT_MS,
                            "messages": [{"topic": topic, "body": f"to {topic}"}]}
    if creds is not None:
        spec["credentials"] = spec_credentials(creds)
        spec["warmup_topic"] = topic  # the default warm-up topic is not one alice may use
    else:
        spec["warmup_topic"] = ""
    return cpp.run("send_sync", **spec)


def test_the_init_user_sends_and_push_consumes(cpp: CppClient) -> None:
    topic = unique("AuthPubRoot")
    sent = cpp.run("send_sync", group=unique("authpg"), credentials=spec_credentials(ROOT),
                   warmup_topic=topic,
                   messages=[{"topic": topic, "body": f"root-{i}"} for i in range(3)])
    assert [r.get("status") for r in sent["results"]] == ["OK"] * 3, sent
    push = cpp.start("push", group=unique("authgroup"), topic=topic, expect=4,
                     wait_s=DELIVERY_WAIT_S, credentials=spec_credentials(ROOT))
    got = push.result()  # the producer's warm-up message went to the same topic
    assert "start" not in got, got
    assert sorted(base64.b64decode(m["body_b64"]) for m in got["messages"]) == [
        b"root-0", b"root-1", b"root-2", b"warm-up"]


@pytest.mark.parametrize("creds", [Credentials("root", "not-the-secret"),
                                   Credentials("mallory", "whatever-1"), None],
                         ids=["wrong-secret", "unknown-user", "no-credentials"])
def test_bad_credentials_cannot_send(cpp: CppClient, servers: Servers,
                                     creds: Credentials | None) -> None:
    result = send(cpp, creds, unique("AuthPubBad"))
    assert "start" in result or "error" in result["results"][0], result
    assert "authentication_failed" in servers.output()


def test_a_normal_user_sends_and_consumes_where_its_rules_allow_only(
        cpp: CppClient, servers: Servers) -> None:
    allowed = unique("AuthPubAlice")
    ok = send(cpp, ALICE, allowed)
    assert ok["results"][0].get("status") == "OK", ok
    push = cpp.start("push", group=unique("authgroup"), topic=allowed, expect=2,
                     wait_s=DELIVERY_WAIT_S, credentials=spec_credentials(ALICE))
    got = push.result()  # the producer's warm-up message went to the same topic
    assert sorted(base64.b64decode(m["body_b64"]) for m in got["messages"]) == [
        f"to {allowed}".encode(), b"warm-up"]
    refused = cpp.run("send_sync", group=unique("authpg"), credentials=spec_credentials(ALICE),
                      warmup_topic=allowed, send_timeout_ms=SEND_TIMEOUT_MS,
                      messages=[{"topic": "TBW102", "body": "x"},
                                {"topic": unique("OtherTopic"), "body": "y"}])
    assert all("error" in r for r in refused["results"]), refused
    assert "no rule allows user alice" in servers.output()
