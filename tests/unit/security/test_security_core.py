"""The access-control core (orbitmq.security): signatures, the model's parsers, the access
table against every handler the servers register, and the guard's decisions."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import os
import stat

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbitmq.broker.controller import BrokerController
from orbitmq.config import TEST_MIN_STORE, BrokerConfig, NamesrvConfig
from orbitmq.errors import AccessDeniedError, RemoteProtocolError, StoreError
from orbitmq.namesrv import NameServer
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand, decode_command, encode
from orbitmq.security import (
    ACCESS_TABLE,
    AccessGuard,
    AccessSettings,
    Acl,
    Action,
    AuthRegistry,
    Credentials,
    Resource,
    ResourceType,
    User,
    UserStatus,
    UserType,
    sign_fields,
)
from orbitmq.security.access_table import IN_HANDLER, SUPER, needs
from orbitmq.security.signature import (
    grpc_signature,
    grpc_signature_ok,
    parse_grpc_authorization,
    remoting_content,
    remoting_signature_ok,
)

SECRET = "s3cret-key"


# ----------------------------------------------------------------------------- signatures
def test_a_signature_is_hmac_sha1_of_the_sorted_values_then_the_body() -> None:
    fields = {"b": "TopicA", "a": "group", "AccessKey": "ak"}
    sign_fields(fields, b"BODY", Credentials("ak", SECRET))
    # Keys sorted: AccessKey, a, b (upper case first, as Java's TreeMap sorts).
    expected = base64.b64encode(hmac.new(SECRET.encode(), b"akgroupTopicABODY",
                                         hashlib.sha1).digest()).decode()
    assert fields["Signature"] == expected
    assert remoting_signature_ok(fields, b"BODY", SECRET)


_TEXT = st.characters(blacklist_categories=("Cs",))  # what JSON (UTF-8) can carry


@given(st.dictionaries(st.text(_TEXT, min_size=1, max_size=8), st.text(_TEXT, max_size=12),
                       max_size=6),
       st.binary(max_size=64))
def test_any_change_to_a_signed_request_breaks_its_signature(
        fields: dict[str, str], body: bytes) -> None:
    fields = {k: v for k, v in fields.items() if k not in ("Signature", "AccessKey")}
    sign_fields(fields, body, Credentials("ak", SECRET))
    # The signature survives the wire (JSON header) and the decoder.
    back = decode_command(encode(RemotingCommand(10, ext_fields=dict(fields), body=body))[4:])
    assert remoting_signature_ok(back.ext_fields, back.body, SECRET)
    assert not remoting_signature_ok(fields, body + b"x", SECRET)
    assert not remoting_signature_ok(fields, body, SECRET + "x")
    assert not remoting_signature_ok({**fields, "extra": "1"}, body, SECRET)
    for key in fields:
        if key != "Signature":
            assert not remoting_signature_ok({**fields, key: fields[key] + "x"}, body, SECRET)


def test_keys_beyond_the_bmp_sort_as_java_sorts_them() -> None:
    # Java compares UTF-16 code units: a surrogate pair (0xD83D...) sorts before U+FFFF.
    fields = {"\uffff": "B", "\U0001F600": "A"}
    assert remoting_content(fields, None) == b"AB"


def test_numbers_and_booleans_sign_in_their_wire_form() -> None:
    fields: dict[str, object] = {"queueId": 3, "batch": False, "topic": "T"}
    assert remoting_content(fields, None) == b"false3T"  # type: ignore[arg-type]


@pytest.mark.parametrize("garbage", ["", "!!!", "AAAA", "not base64 at all"])
def test_a_signature_that_is_not_base64_is_refused_not_raised(garbage: str) -> None:
    assert not remoting_signature_ok({"AccessKey": "ak", "Signature": garbage}, b"", SECRET)


def test_the_grpc_authorization_header() -> None:
    stamp = "20261129T101010Z"
    header = (f"MQv2-HMAC-SHA1 Credential=ak/region/service, SignedHeaders=x-mq-date-time, "
              f"Signature={grpc_signature(stamp, SECRET)}")
    auth = parse_grpc_authorization(header)
    assert auth.access_key == "ak"
    assert grpc_signature_ok(auth, stamp, SECRET)
    assert not grpc_signature_ok(auth, stamp + "0", SECRET)
    lower = parse_grpc_authorization(header.replace(grpc_signature(stamp, SECRET),
                                                    grpc_signature(stamp, SECRET).lower()))
    assert grpc_signature_ok(lower, stamp, SECRET)
    for bad in ("Basic abc", "MQv2-HMAC-SHA1 Credential=, Signature=00",
                "MQv2-HMAC-SHA1 Credential=ak, Signature=zz", "MQv2-HMAC-SHA1 Credential=ak",
                "MQv2-HMAC-SHA1 garbage", "MQv2-HMAC-SHA1 " + "x=" * 1000):
        with pytest.raises(RemoteProtocolError):
            parse_grpc_authorization(bad)


# ----------------------------------------------------------------------------- the model
@pytest.mark.parametrize(("text", "rtype", "name", "prefixed"), [
    ("Topic:orders", ResourceType.TOPIC, "orders", False),
    ("Topic:orders*", ResourceType.TOPIC, "orders", True),
    ("Group:*", ResourceType.GROUP, "*", False),
    ("cluster:DefaultCluster", ResourceType.CLUSTER, "DefaultCluster", False),
    ("*", ResourceType.ANY, "*", False),
])
def test_resources_parse_and_print_back(text: str, rtype: ResourceType, name: str,
                                        prefixed: bool) -> None:
    res = Resource.parse(text)
    assert res.type is rtype and res.name == name
    assert Resource.parse(str(res)) == res
    assert res.matches(rtype, name + ("-x" if prefixed else "")) or name == "*"


@pytest.mark.parametrize("bad", ["orders", "Queue:x", "Topic:", "Topic:a b", "Topic:**", "*:x",
                                 "Topic:" + "a" * 300, 7])
def test_bad_resources_are_refused(bad: object) -> None:
    with pytest.raises(RemoteProtocolError):
        Resource.parse(bad)


def test_acl_bodies_round_trip_and_merge() -> None:
    body = {"subject": "User:alice", "policies": [{"policyType": "Custom", "entries": [
        {"resource": "Topic:orders*", "actions": ["Pub", "Sub"], "decision": "Allow",
         "sourceIps": ["10.0.0.0/8"]}]}]}
    acl = Acl.from_dict(body)
    assert Acl.from_dict(acl.to_dict()) == acl
    more = Acl.from_dict({"subject": "User:alice", "policies": [{"entries": [
        {"resource": "Topic:orders*", "actions": ["Get"], "decision": "Deny"},
        {"resource": "Group:g", "actions": ["Sub"]}]}]})
    merged = acl.merged(more)
    assert [str(e.resource) for e in merged.entries] == ["Topic:orders*", "Group:g"]
    assert merged.entries[0].actions == {Action.GET}
    assert merged.without([Resource.parse("Group:g")]).entries == (merged.entries[0],)
    with pytest.raises(RemoteProtocolError):
        Acl.from_dict(body, subject="User:bob")
    with pytest.raises(RemoteProtocolError):
        Acl.from_dict({"subject": "User:alice", "policies": [{"entries": [
            {"resource": "Topic:t", "actions": ["Fly"]}]}]})


def test_users_parse_with_their_bounds_and_never_show_the_password() -> None:
    user = User.from_dict({"username": "alice", "password": "secret-1", "userType": "super"})
    assert user.is_super and user.enabled and "secret" not in repr(user)
    assert "password" not in user.to_dict(with_password=False)
    updated = User.from_dict({"userStatus": "disable"}, base=user, username="alice")
    assert updated.password == "secret-1" and not updated.enabled
    for bad in ({"username": "a b", "password": "secret-1"}, {"username": "alice"},
                {"username": "alice", "password": "short"},
                {"username": "alice", "password": "secret-1", "userType": "Root"}):
        with pytest.raises(RemoteProtocolError):
            User.from_dict(bad)


# ----------------------------------------------------------------------------- the registry
def test_the_registry_file_is_private_and_a_bad_one_stops_the_start(tmp_path) -> None:
    path = str(tmp_path / "cfg" / "auth.json")
    reg = AuthRegistry(path)
    reg.ensure_user("root", "root-pass", UserType.SUPER)
    reg.put_acl(Acl("root", (Acl.from_dict({"subject": "User:root", "policies": [{"entries": [
        {"resource": "*", "actions": ["All"]}]}]}).entries)))
    reg.add_builtin(User("inner", "inner-pass", UserType.SUPER))
    reg.save()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    with open(path, "rb") as f:
        assert b"inner" not in f.read()  # built-in users are never saved
    again = AuthRegistry(path)
    again.load()
    assert again.user("root") == reg.user("root") and again.acl("root") == reg.acl("root")
    with open(path, "wb") as f:
        f.write(b"{not json")
    with pytest.raises(StoreError):
        AuthRegistry(path).load()


# ----------------------------------------------------------------------------- the table
def test_every_code_the_servers_handle_is_in_the_access_table(tmp_path) -> None:
    broker = BrokerController(BrokerConfig(
        listen_port=0, grpc_listen_port=-1,
        store=dataclasses.replace(TEST_MIN_STORE, store_path=str(tmp_path))))
    namesrv = NameServer(NamesrvConfig(listen_port=0, auth_config_path=str(tmp_path / "ns.json")))
    handled = set(broker.server._handlers) | set(namesrv.server._handlers)
    missing = sorted(code for code in handled if needs(code) is None)
    assert not missing, f"request codes handled but in no access rule: {missing}"
    assert needs(RequestCode.UPDATE_BROKER_CONFIG) is SUPER
    assert needs(RequestCode.END_TRANSACTION) is IN_HANDLER
    assert needs(99_999) is None


# ----------------------------------------------------------------------------- the guard
def _registry() -> AuthRegistry:
    reg = AuthRegistry(None)
    reg.ensure_user("root", "root-pass", UserType.SUPER)
    reg.put_user(User("alice", "alice-pass"), create=True)
    reg.put_user(User("off", "off-pass-1", status=UserStatus.DISABLE), create=True)
    reg.put_acl(Acl.from_dict({"subject": "User:alice", "policies": [{"entries": [
        {"resource": "Topic:orders*", "actions": ["Pub", "Sub"]},
        {"resource": "Topic:orders-secret", "actions": ["All"], "decision": "Deny"},
        {"resource": "Group:billing", "actions": ["Sub"], "sourceIps": ["10.1.0.0/16"]},
        {"resource": "Group:audit", "actions": ["Sub"]},
    ]}]}))
    return reg


def _guard(**settings: object) -> AccessGuard:
    base = {"authentication_enabled": True, "authorization_enabled": True,
            "cluster_name": "DefaultCluster"}
    return AccessGuard(AccessSettings(**{**base, **settings}), _registry())  # type: ignore[arg-type]


def _signed(code: int, fields: dict[str, str], user: str, secret: str,
            body: bytes = b"") -> RemotingCommand:
    fields = dict(fields)
    sign_fields(fields, body, Credentials(user, secret))
    return RemotingCommand(code, ext_fields=fields, body=body)


def _send_v2(topic: str) -> dict[str, str]:
    return {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0",
            "h": "0"}


def _pull(topic: str, group: str) -> dict[str, str]:
    return {"topic": topic, "consumerGroup": group, "queueId": "0"}


@pytest.mark.parametrize(("user", "secret", "code", "fields", "peer", "allowed"), [
    ("alice", "alice-pass", 310, _send_v2("orders-eu"), "127.0.0.1", True),
    ("alice", "alice-pass", 310, _send_v2("payments"), "127.0.0.1", False),
    ("alice", "alice-pass", 310, _send_v2("orders-secret"), "127.0.0.1", False),  # Deny
    ("alice", "alice-pass", 11, _pull("orders-eu", "audit"), "127.0.0.1", True),
    ("alice", "alice-pass", 11, _pull("orders-eu", "billing"), "127.0.0.1", False),  # source
    ("alice", "alice-pass", 11, _pull("orders-eu", "billing"), "10.1.2.3", True),
    ("alice", "alice-pass", 11, _pull("%RETRY%audit", "audit"), "127.0.0.1", True),
    ("alice", "alice-pass", 17, {"topic": "orders-new"}, "127.0.0.1", False),  # no Create
    ("alice", "alice-pass", 25, {}, "127.0.0.1", False),  # Super only
    ("alice", "alice-pass", 105, {"topic": "anything"}, "127.0.0.1", True),  # route reads
    ("alice", "alice-pass", 103, {}, "127.0.0.1", False),  # name server writes
    ("root", "root-pass", 25, {}, "127.0.0.1", True),
    ("root", "root-pass", 99_999, {}, "127.0.0.1", False),  # unknown code
    ("alice", "wrong", 105, {"topic": "t"}, "127.0.0.1", False),
    ("mallory", "whatever", 105, {"topic": "t"}, "127.0.0.1", False),
    ("off", "off-pass-1", 105, {"topic": "t"}, "127.0.0.1", False),
])
def test_the_guard_decides(user: str, secret: str, code: int, fields: dict[str, str], peer: str,
                           allowed: bool) -> None:
    guard = _guard()
    refusal = guard.check(_signed(code, fields, user, secret), peer)
    if allowed:
        assert refusal is None
    else:
        assert refusal is not None and refusal.code == ResponseCode.NO_PERMISSION
        assert refusal.remark and "secret" not in refusal.remark.lower().replace(
            "orders-secret", "")


def test_unsigned_and_anonymous_requests_say_why() -> None:
    guard = _guard()
    anonymous = guard.check(RemotingCommand(105, ext_fields={"topic": "t"}), "127.0.0.1")
    assert anonymous is not None and "no AccessKey" in (anonymous.remark or "")
    unsigned = guard.check(RemotingCommand(105, ext_fields={"topic": "t", "AccessKey": "alice"}),
                           "127.0.0.1")
    assert unsigned is not None and "no Signature" in (unsigned.remark or "")
    assert guard.audit.authentication_failures == {"no_credentials": 1, "unsigned": 1}


def test_a_malformed_request_is_refused_by_the_guard_not_raised() -> None:
    guard = _guard()
    cmd = _signed(RequestCode.HEART_BEAT, {}, "alice", "alice-pass", b"[not an object]")
    refusal = guard.check(cmd, "127.0.0.1")
    assert refusal is not None and refusal.code == ResponseCode.NO_PERMISSION


def test_without_authorization_only_super_codes_are_held_back() -> None:
    guard = _guard(authorization_enabled=False)
    assert guard.check(_signed(310, _send_v2("payments"), "alice", "alice-pass"), "::1") is None
    assert guard.check(_signed(25, {}, "alice", "alice-pass"), "::1") is not None


def test_whitelisted_codes_need_no_credentials_and_handlers_check_what_they_find() -> None:
    guard = _guard(whitelist=frozenset({105}))
    assert guard.check(RemotingCommand(105, ext_fields={"topic": "t"}), "127.0.0.1") is None
    cmd = _signed(RequestCode.END_TRANSACTION, {"producerGroup": "pg"}, "alice", "alice-pass")
    assert guard.check(cmd, "127.0.0.1") is None  # IN_HANDLER: the handler checks the topic
    from orbitmq.security.access_table import topic_permission
    guard.authorize_found(cmd, topic_permission("orders-1", Action.PUB))
    with pytest.raises(AccessDeniedError):
        guard.authorize_found(cmd, topic_permission("payments", Action.PUB))


def test_authorization_needs_authentication() -> None:
    with pytest.raises(ValueError):
        _guard(authentication_enabled=False)


def test_the_table_rows_are_well_formed() -> None:
    # Every resolver answers permissions for a well-formed request of its code.
    assert all(v in (SUPER, IN_HANDLER) or callable(v) or repr(v) == "ANY_USER"
               for v in ACCESS_TABLE.values())
    hb = orjson.dumps({"clientID": "c", "consumerDataSet": [{"groupName": "g",
                       "subscriptionDataSet": [{"topic": "t"}, {"topic": "%RETRY%g"}]}]})
    perms = needs(RequestCode.HEART_BEAT)(RemotingCommand(34, body=hb))  # type: ignore[operator]
    assert {(p.rtype, p.name) for p in perms} == {(ResourceType.GROUP, "g"),
                                                   (ResourceType.TOPIC, "t")}


def test_a_send_is_checked_on_the_topic_its_handler_stores_to() -> None:
    guard = _guard()
    # V2 names: the handler stores to "b"; a V1 "topic" beside them must not decide the check.
    both = {**_send_v2("payments"), "topic": "orders-eu"}
    assert guard.check(_signed(310, both, "alice", "alice-pass"), "127.0.0.1") is not None
    v1 = {"producerGroup": "pg", "topic": "payments", "b": "orders-eu", "defaultTopic": "TBW102",
          "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0", "bornTimestamp": "0",
          "flag": "0"}
    assert guard.check(_signed(10, v1, "alice", "alice-pass"), "127.0.0.1") is not None
    v1["topic"] = "orders-eu"
    assert guard.check(_signed(10, v1, "alice", "alice-pass"), "127.0.0.1") is None


def test_the_security_page_shows_the_access_table_as_it_is() -> None:
    from pathlib import Path

    from orbitmq.protocol.codes import OrbitMQRequestCode
    from orbitmq.security.access_table import AuthRequestCode, describe

    names = {int(m): m.name for m in (*RequestCode, *OrbitMQRequestCode)}
    names.update({v: k for k, v in vars(AuthRequestCode).items() if k.isupper()})
    rows = [f"| {c} | {names[c]} | {describe(c)} |" for c in sorted(ACCESS_TABLE)]
    page = (Path(__file__).resolve().parents[3] / "docs" / "security.md").read_text()
    shown = page.split("<!-- access-table:begin -->")[1].split("<!-- access-table:end -->")[0]
    assert [line for line in shown.strip().splitlines()[2:]] == rows


def test_the_users_with_their_secrets_go_to_an_authenticated_super_user_only() -> None:
    from orbitmq.security import Principal
    from orbitmq.security.admin_handlers import AuthAdminHandlers

    handlers = AuthAdminHandlers(_registry())
    for principal in (None, Principal("alice", False, "127.0.0.1")):
        cmd = RemotingCommand(9105)
        cmd.principal = principal
        with pytest.raises(AccessDeniedError):
            handlers.get_metadata(cmd, None)
    cmd = RemotingCommand(9105)
    cmd.principal = Principal("root", True, "127.0.0.1")
    assert b"root-pass" in bytes(handlers.get_metadata(cmd, None).body)
