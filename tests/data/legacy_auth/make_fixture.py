"""Writes tests/data/legacy_auth/auth.json with the tree BEFORE users and ACLs moved into the
metadata store (commit 99263e8, the last whose broker kept them in ``STORE/config/auth.json``),
so that the migration test reads what that broker really wrote. Run it with that tree first on
the path:

    git archive 99263e8 src | tar -x -C /tmp/oldtree
    ORBITMQ_PURE_PYTHON=1 PYTHONPATH=/tmp/oldtree/src .venv/bin/python \\
        tests/data/legacy_auth/make_fixture.py tests/data/legacy_auth

It runs a broker with authentication and authorization on (its own name server, the init user
``root``), creates users (Normal, Super, one disabled, one updated, one deleted) and ACLs (one
with source networks and a Deny, one partly deleted) with the SDK's Admin, stops the broker
cleanly and copies ``STORE/config/auth.json``. The secrets are test values.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from orbitmq import Admin, Credentials
from orbitmq.testing import EmbeddedCluster

ROOT = Credentials("root", "root-secret-1")


def main(out: Path) -> None:
    init = json.dumps({"username": ROOT.access_key, "password": ROOT.secret_key})
    settings = {"authentication_enabled": True, "authorization_enabled": True,
                "init_authentication_user": init}
    with tempfile.TemporaryDirectory() as tmp, \
            EmbeddedCluster(Path(tmp), **settings) as cluster:  # type: ignore[arg-type]
        broker = cluster.brokers[0]
        addr = broker.address
        with Admin(cluster.namesrv, credentials=ROOT) as admin:
            for i in range(8):
                admin.create_user(f"legacy-user-{i}", f"legacy-secret-{i}", broker=addr)
            admin.create_user("legacy-super", "legacy-super-secret", user_type="Super",
                              broker=addr)
            admin.create_user("legacy-off", "legacy-off-secret", broker=addr)
            admin.update_user("legacy-off", status="disable", broker=addr)
            admin.update_user("legacy-user-1", password="legacy-secret-1b", broker=addr)
            admin.delete_user("legacy-user-7", broker=addr)
            admin.create_acl("User:legacy-user-0", ["Topic:LegacyOrders", "Group:legacy-g"],
                             "Pub,Sub", broker=addr)
            admin.create_acl("User:legacy-user-2", ["Topic:Legacy*"], "Sub",
                             source_ips="10.0.0.0/8", broker=addr)
            admin.create_acl("User:legacy-user-2", ["Topic:LegacySecret"], "Pub,Sub",
                             decision="Deny", broker=addr)
            admin.create_acl("User:legacy-user-3", ["Topic:A", "Topic:B"], "Pub", broker=addr)
            admin.delete_acl("User:legacy-user-3", ["Topic:A"], broker=addr)
        store = broker.config.store.store_path
        cluster.call(broker.stop())
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(store) / "config" / "auth.json", out / "auth.json")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
