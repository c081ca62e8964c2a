"""Controller mode with authentication on (issue 34, "HA port"): real processes, an etcd server, a
name server and a broker set of three members configured with the same inner credentials. The HA
handshake comes before the controller-mode hello, so the elected master's slaves prove themselves
and join the in-sync set (their acknowledgements count), and a signed SYNC_MASTER send is SEND_OK;
then the master is killed, one slave is promoted, the other follows it (a new handshake with the
new master) and rejoins its set, and the new master serves the message (docs/failover.md: a master
whose set is itself alone serves nothing new), and knows the user made on the old master (the
slaves' copy of its users, kept in their metadata stores)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orbitmq import Admin, Credentials, Message, Producer, PullConsumer, SendStatus
from orbitmq.client.results import PullStatus
from orbitmq.testing.etcd import EtcdCluster, etcd_binary
from orbitmq.testing.failover_set import FailoverSet, wait_for

pytestmark = pytest.mark.skipif(etcd_binary() is None,
                                reason="etcd is not installed (Debian: apt-get install etcd-server)")

INNER = Credentials("cluster-inner", "inner-secret-1")
CAROL = Credentials("carol", "carol-secret-1")
FLAGS = ["--authentication-enabled", "true", "--inner-client-authentication-credentials",
         json.dumps({"accessKey": INNER.access_key, "secretKey": INNER.secret_key})]


def test_an_authenticated_slave_joins_the_in_sync_set_and_takes_over(tmp_path: Path) -> None:
    topic = "AuthFailover"
    with EtcdCluster(1) as etcd, FailoverSet(tmp_path, etcd.endpoints, members=3,
                                             flags=FLAGS) as brokers:
        master = brokers.wait_master(in_sync=3)  # both slaves' acknowledgements counted
        with Producer("auth-failover-p", namesrv=brokers.namesrv, send_timeout=10.0,
                      credentials=INNER) as producer:
            sent = producer.send(Message(topic, b"held by both"))
            assert sent.status is SendStatus.OK, sent
        # A user made on the master reaches the slaves' metadata stores (their copy of the
        # master's users), so it crosses the failover.
        slaves = [m for m in brokers.addresses if m != master.member]
        with Admin(brokers.namesrv, credentials=INNER) as admin:
            admin.create_user(CAROL.access_key, CAROL.secret_key, user_type="Super",
                              broker=brokers.addresses[master.member])
            for member in slaves:
                wait_for(lambda m=member: _has_user(admin, brokers.addresses[m], CAROL.access_key),
                         f"member {member} copies the user", 30)
        brokers.kill(master.member)
        promoted = brokers.wait_master(epoch_above=master.epoch, in_sync=2)
        assert promoted.member != master.member
        with Admin(brokers.namesrv, credentials=CAROL) as admin:  # signed with carol's secret
            assert _has_user(admin, brokers.addresses[promoted.member], CAROL.access_key)
        with PullConsumer("auth-failover-c", namesrv=brokers.namesrv,
                          credentials=INNER) as consumer:
            got = wait_for(lambda: _found(consumer.pull(sent.queue, 0, 32)),
                           "the promoted master serves the message", 30)
            assert [bytes(m.body) for m in got.messages] == [b"held by both"]


def _found(result: object) -> object | None:
    return result if getattr(result, "status", None) is PullStatus.FOUND else None


def _has_user(admin: Admin, broker: str, name: str) -> bool:
    try:
        return any(u.username == name for u in admin.list_users(name, broker=broker))
    except Exception:  # a member that does not answer yet
        return False
