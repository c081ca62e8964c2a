"""An embedded cluster with authentication and authorization on, for the SDK and CLI tests of
credentials: a name server that keeps its own users file, one broker, both with the same init
(Super) user, which is also what the broker signs its registrations with."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from orbitmq import Admin, Credentials
from orbitmq.config import NamesrvConfig
from orbitmq.testing import EmbeddedCluster

ROOT = Credentials("root", "root-secret-1")
ALICE = Credentials("alice", "alice-secret-1")  # Normal: Pub/Sub on ALICE_TOPIC, Sub on ALICE_GROUP
ALICE_TOPIC = "AliceOrders"
ALICE_GROUP = "alice-group"
OTHER_TOPIC = "NotAlices"


def auth_settings() -> dict[str, object]:
    init = json.dumps({"username": ROOT.access_key, "password": ROOT.secret_key})
    return {"authentication_enabled": True, "authorization_enabled": True,
            "init_authentication_user": init}


@contextmanager
def auth_cluster(root: Path, *, with_alice: bool = True) -> Iterator[EmbeddedCluster]:
    """The cluster, its topics created and (``with_alice``) alice and her rules in place."""
    ns = NamesrvConfig(listen_port=0, auth_config_path=str(root / "namesrv-auth.json"),
                       **auth_settings())  # type: ignore[arg-type]
    with EmbeddedCluster(root, namesrv_config=ns, **auth_settings()) as cluster:
        with Admin(cluster.namesrv, credentials=ROOT) as admin:
            for topic in (ALICE_TOPIC, OTHER_TOPIC):
                admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
            if with_alice:
                admin.create_user(ALICE.access_key, ALICE.secret_key)
                admin.create_acl("User:alice", [f"Topic:{ALICE_TOPIC}"], "Pub,Sub")
                admin.create_acl("User:alice", [f"Group:{ALICE_GROUP}"], "Sub")
        yield cluster
