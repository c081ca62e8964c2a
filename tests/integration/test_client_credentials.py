"""SDK clients with credentials against servers with authentication and authorization on:
sends, pulls, push consumption and the outbox relay signed as a Normal user; refusals of wrong,
unknown and missing credentials and of what no rule allows; the Admin's user and ACL calls,
round trip, on the broker and on the name server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from auth_support import ALICE, ALICE_GROUP, ALICE_TOPIC, OTHER_TOPIC, ROOT, auth_cluster

from orbitmq import (
    AccessDeniedError,
    Admin,
    ClientError,
    ConsumeResult,
    Credentials,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    PushConsumer,
)
from orbitmq.errors import BrokerError
from orbitmq.security.model import Action, Decision, UserStatus, UserType
from orbitmq.testing import EmbeddedCluster

SEND_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with auth_cluster(tmp_path_factory.mktemp("auth-sdk")) as c:
        yield c


def _producer(cluster: EmbeddedCluster, credentials: Credentials | None) -> Producer:
    return Producer("auth-producer", cluster.namesrv, credentials=credentials,
                    send_timeout=SEND_TIMEOUT_S, retry_times_when_send_failed=0)


def test_a_normal_user_sends_and_pulls_what_its_rules_allow(cluster: EmbeddedCluster) -> None:
    with _producer(cluster, ALICE) as producer:
        sent = producer.send(Message(ALICE_TOPIC, b"signed"))
    with PullConsumer(ALICE_GROUP, cluster.namesrv, credentials=ALICE) as consumer:
        (mq,) = consumer.fetch_queues(ALICE_TOPIC)
        got = consumer.pull(mq, sent.queue_offset, max_nums=1).messages
        consumer.update_offset(mq, sent.queue_offset + 1)
        consumer.persist_offsets()
        assert consumer.fetch_offset(mq, from_store=True) == sent.queue_offset + 1
    assert [m.body for m in got] == [b"signed"]


@pytest.mark.parametrize("credentials, reason", [
    (Credentials(ALICE.access_key, "not-her-secret"), "does not match"),
    (Credentials("mallory", "mallory-secret"), "no user mallory"),
    (None, "no credentials"),
], ids=["wrong-secret", "unknown-user", "none"])
def test_bad_or_missing_credentials_are_refused(cluster: EmbeddedCluster,
                                                credentials: Credentials | None,
                                                reason: str) -> None:
    with _producer(cluster, credentials) as producer, \
            pytest.raises(AccessDeniedError, match=reason):
        producer.send(Message(ALICE_TOPIC, b"x"))
    with PullConsumer(ALICE_GROUP, cluster.namesrv, credentials=credentials) as consumer, \
            pytest.raises(AccessDeniedError, match=reason):
        consumer.fetch_queues(ALICE_TOPIC)


def test_a_rule_for_one_topic_does_not_reach_another(cluster: EmbeddedCluster) -> None:
    with _producer(cluster, ALICE) as producer:
        with pytest.raises(AccessDeniedError, match=f"Pub on Topic:{OTHER_TOPIC}"):
            producer.send(Message(OTHER_TOPIC, b"x"))
        assert producer.send(Message(ALICE_TOPIC, b"still fine")).queue_offset >= 0
    with PullConsumer("not-alices-group", cluster.namesrv, credentials=ALICE) as consumer:
        (mq,) = consumer.fetch_queues(ALICE_TOPIC)
        with pytest.raises(AccessDeniedError, match="Group:not-alices-group"):
            consumer.pull(mq, 0, max_nums=1)


def test_clients_with_different_credentials_never_share_a_connection(
        cluster: EmbeddedCluster) -> None:
    with _producer(cluster, ALICE) as good, _producer(cluster, Credentials("alice", "nope12")) as bad:
        assert good.async_client.instance.remoting is not bad.async_client.instance.remoting
        errors: list[BaseException] = []

        def send_bad() -> None:
            try:
                bad.send(Message(ALICE_TOPIC, b"x"))
            except BaseException as e:
                errors.append(e)

        thread = threading.Thread(target=send_bad)
        thread.start()
        good.send(Message(ALICE_TOPIC, b"ok"))
        thread.join(SEND_TIMEOUT_S * 3)
    assert len(errors) == 1 and isinstance(errors[0], AccessDeniedError)


def test_a_push_consumer_and_a_transactional_producer_sign_too(cluster: EmbeddedCluster) -> None:
    from orbitmq import LocalTransactionState, TransactionProducer

    got = threading.Event()

    def listener(msgs: list[MessageExt], _ctx: object) -> ConsumeResult:
        if any(m.body == b"pushed" for m in msgs):
            got.set()
        return ConsumeResult.SUCCESS

    class Commit:
        def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.COMMIT

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            return LocalTransactionState.COMMIT

    with TransactionProducer("alice-tx", cluster.namesrv, listener=Commit(), credentials=ALICE,
                             send_timeout=SEND_TIMEOUT_S) as producer:
        result = producer.send_in_transaction(Message(ALICE_TOPIC, b"pushed"))
        assert result.local_state is LocalTransactionState.COMMIT
    # a new group reads a queue whose first message is still stored from its start
    consumer = PushConsumer(ALICE_GROUP, cluster.namesrv, credentials=ALICE)
    consumer.subscribe(ALICE_TOPIC, "*", listener)
    with consumer:
        assert got.wait(20), "the committed message was not pushed"


# -- administration -------------------------------------------------------------------------------
def test_users_and_acls_round_trip_on_the_broker_and_the_name_server(
        cluster: EmbeddedCluster) -> None:
    broker = cluster.brokers[0].address
    everywhere = sorted([broker, cluster.namesrv])
    with Admin(cluster.namesrv, credentials=ROOT) as admin:
        assert admin.create_user("bob", "bob-secret-1", user_type="Normal") == everywhere
        assert cluster.namesrv_server.access.registry.user("bob") is not None
        bob = admin.get_user("bob")
        assert (bob.username, bob.user_type, bob.status, bob.password) == (
            "bob", UserType.NORMAL, UserStatus.ENABLE, "")
        assert "bob" in [u.username for u in admin.list_users("bo")]
        assert [u.username for u in admin.list_users("nobody-like-this")] == []

        assert admin.create_acl("User:bob", "Topic:bob-*,Group:bobs", ["Pub", "Sub"],
                                source_ips="127.0.0.0/8") == everywhere
        admin.update_acl("bob", "Topic:bob-*", "Sub", decision="Deny")
        acl = admin.get_acl("User:bob")
        rules = {str(e.resource): e for e in acl.entries}
        assert set(rules) == {"Topic:bob-*", "Group:bobs"}
        assert rules["Topic:bob-*"].decision is Decision.DENY
        assert rules["Topic:bob-*"].actions == {Action.SUB}
        assert rules["Group:bobs"].actions == {Action.PUB, Action.SUB}
        assert [str(n) for n in rules["Group:bobs"].source_ips] == ["127.0.0.0/8"]
        assert [a.subject for a in admin.list_acls("bob", "Group:bobs")] == ["User:bob"]
        assert admin.list_acls("bob", "Topic:nothing") == []
        assert admin.get_acl("User:bob", broker=broker) == acl
        # the name server took every change too (its own users file)
        assert cluster.namesrv_server.access.registry.acl("bob") == acl

        admin.delete_acl("User:bob", "Topic:bob-*")
        assert [str(e.resource) for e in admin.get_acl("bob").entries] == ["Group:bobs"]
        admin.update_user("bob", status="disable")
        assert admin.get_user("bob").status is UserStatus.DISABLE

    with _producer(cluster, Credentials("bob", "bob-secret-1")) as producer, \
            pytest.raises(AccessDeniedError, match="disabled"):
        producer.send(Message(ALICE_TOPIC, b"x"))

    with Admin(cluster.namesrv, credentials=ROOT) as admin:
        admin.delete_acl("bob")
        with pytest.raises(BrokerError, match="no ACL for User:bob"):
            admin.get_acl("bob")
        assert admin.delete_user("bob") == everywhere
        with pytest.raises(BrokerError, match="does not exist"):
            admin.get_user("bob")
        with pytest.raises(BrokerError, match=f"{broker}: .*already exists"):
            admin.create_user("root", "whatever-1")


def test_the_name_server_keeps_its_own_copy(cluster: EmbeddedCluster) -> None:
    """A user created through the Admin signs name server reads: the name server has it too."""
    with Admin(cluster.namesrv, credentials=ROOT) as admin:
        admin.create_user("carol", "carol-secret-1")
    try:
        with Admin(cluster.namesrv, credentials=Credentials("carol", "carol-secret-1")) as carol:
            assert ALICE_TOPIC in carol.list_topics()  # any user may read routes
            with pytest.raises(AccessDeniedError):
                carol.list_users()  # Super only
    finally:
        with Admin(cluster.namesrv, credentials=ROOT) as admin:
            admin.delete_user("carol")


def test_admin_arguments_are_checked_before_anything_is_sent(cluster: EmbeddedCluster) -> None:
    with Admin(cluster.namesrv, credentials=ROOT) as admin:
        for call in (lambda: admin.create_user("bad name", "secret-1"),
                     lambda: admin.create_user("dave", "short"),
                     lambda: admin.create_user("dave", "secret-1", user_type="Root"),
                     lambda: admin.update_user("dave"),
                     lambda: admin.create_acl("Group:g", "Topic:t", "Pub"),
                     lambda: admin.create_acl("User:dave", "", "Pub"),
                     lambda: admin.create_acl("User:dave", "Queue:q", "Pub"),
                     lambda: admin.create_acl("User:dave", "Topic:t", "Publish"),
                     lambda: admin.create_acl("User:dave", "Topic:t", "Pub", decision="Maybe"),
                     lambda: admin.create_acl("User:dave", "Topic:t", "Pub", source_ips="10.0.0/33"),
                     lambda: admin.list_users("x" * 300)):
            with pytest.raises(ClientError):
                call()
        assert "dave" not in [u.username for u in admin.list_users()]


def test_admin_calls_need_a_super_user(cluster: EmbeddedCluster) -> None:
    with Admin(cluster.namesrv, credentials=ALICE) as admin:
        with pytest.raises(AccessDeniedError):
            admin.create_user("eve", "eve-secret-1")
        with pytest.raises(AccessDeniedError):
            admin.get_acl("alice")
    with Admin(cluster.namesrv, credentials=ROOT) as admin:
        assert "eve" not in [u.username for u in admin.list_users()]


def test_the_outbox_relay_signs_with_its_credentials(cluster: EmbeddedCluster,
                                                     tmp_path: Path) -> None:
    from orbitmq.reliable import Database, Outbox, OutboxRelay, OutboxStatus, RelayConfig

    db_url = f"sqlite:///{tmp_path / 'app.db'}"
    outbox = Outbox()
    with Database(db_url) as db, db.transaction() as h:
        outbox.create_table(h)
        outbox.add(h, Message(ALICE_TOPIC, b"from the outbox", keys="k"))
    config = RelayConfig(poll_interval=0.05, lease=10.0, send_timeout=SEND_TIMEOUT_S)
    with pytest.raises(ClientError, match="own producer"):
        OutboxRelay(db_url, _producer(cluster, ALICE), credentials=ALICE)
    relay = OutboxRelay(db_url, namesrv=cluster.namesrv, config=config, credentials=ALICE)
    try:
        relay.setup()
        assert relay.run_once() == 1
    finally:
        relay.stop()
    with Database(db_url) as db:
        assert outbox.counts(db.handle())[OutboxStatus.SENT] == 1
