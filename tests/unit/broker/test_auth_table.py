"""The broker's users and ACLs in its metadata store (tables/auth_table.py): a change writes its
own rows and the data version, the same at 10 users as at 1,000; a slave's copy writes what
differs; a failed write is loud, kept and written again; the store is owner-only; the auth.json
of the tree before (tests/data/legacy_auth) is imported once, again harmlessly after a crash
before its rename, and a bad one refuses the start naming the file.

The cost is counted (rows SQLite changed, statements, transactions), never timed."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import stat
from pathlib import Path

import pytest

from orbitmq.broker.controller import BrokerController
from orbitmq.broker.tables.auth_table import MetadataRegistryStore
from orbitmq.broker.tables.metadata_table import MIGRATED_SUFFIX, metadata_db_for
from orbitmq.config import TEST_MIN_STORE, BrokerConfig
from orbitmq.errors import StoreError
from orbitmq.security.model import Acl, User, UserStatus, UserType
from orbitmq.security.registry import AUTH_FILE_NAME, AuthRegistry
from orbitmq.store.metadata_db import (
    ACLS,
    EXPORT_NAMES,
    SECRET_KINDS,
    USERS,
    VERSIONS,
    MetadataDB,
    Row,
    export_tables,
)

LEGACY_AUTH = Path(__file__).resolve().parents[2] / "data" / "legacy_auth" / AUTH_FILE_NAME


def _config(root: Path) -> BrokerConfig:
    store = dataclasses.replace(TEST_MIN_STORE, store_path=str(root / "store"))
    return BrokerConfig(listen_port=0, grpc_listen_port=-1, store=store)


def _registry(config: BrokerConfig, db: MetadataDB | None = None) -> AuthRegistry:
    registry = BrokerController.auth_registry_for(config, db)
    registry.load()
    return registry


def _db(registry: AuthRegistry) -> MetadataDB:
    store = registry.store
    assert isinstance(store, MetadataRegistryStore)
    return store.db


def _acl(name: str, *resources: str) -> Acl:
    return Acl.from_dict({"subject": f"User:{name}", "policies": [{"entries": [
        {"resource": r, "actions": ["Pub", "Sub"]} for r in resources]}]})


@dataclasses.dataclass
class _Cost:
    statements: int
    transactions: int
    rows: int


def _cost_of(registry: AuthRegistry, change: object) -> _Cost:
    """What one change and its save (as an admin request makes them) wrote."""
    db = _db(registry)
    conn = db._connection()
    before = (db.statements, db.transactions, conn.total_changes)
    assert callable(change)
    change()
    registry.save()
    return _Cost(db.statements - before[0], db.transactions - before[1],
                 conn.total_changes - before[2])


def test_a_user_create_writes_as_many_rows_at_the_1000th_as_at_the_10th(tmp_path: Path) -> None:
    registry = _registry(_config(tmp_path))
    costs = {}
    for n in range(1, 1001):
        cost = _cost_of(registry, lambda n=n: registry.put_user(
            User(f"user-{n:04d}", f"secret-{n:04d}"), create=True))
        if n in (10, 1000):
            costs[n] = cost
    assert costs[10] == costs[1000] == _Cost(statements=4, transactions=1, rows=2)  # + version
    db = _db(registry)
    assert db.count(USERS) == 1000
    # Every other kind of change: its own rows and the version, whatever the size.
    assert _cost_of(registry, lambda: registry.put_user(
        User("user-0500", "secret-new", status=UserStatus.DISABLE), create=False)).rows == 2
    assert _cost_of(registry, lambda: registry.put_acl(_acl("user-0500", "Topic:T"))) == \
        _Cost(statements=4, transactions=1, rows=2)
    # A user's delete removes its ACL too: user, ACL, version in one transaction.
    assert _cost_of(registry, lambda: registry.delete_user("user-0500")) == \
        _Cost(statements=5, transactions=1, rows=3)
    assert db.count(USERS) == 999 and db.count(ACLS) == 0
    # An ACL left with no entry is removed: its row deleted.
    registry.put_acl(_acl("user-0001", "Topic:A"))
    registry.save()
    assert _cost_of(registry, lambda: registry.put_acl(Acl("user-0001"))).rows == 2
    assert db.count(ACLS) == 0
    db.close()
    again = _registry(_config(tmp_path))
    assert again.users() == registry.users() and again.acls() == registry.acls()
    assert again.user("user-0002") == User("user-0002", "secret-0002")
    _db(again).close()


def test_the_stored_rows_hold_each_entry_as_the_users_file_did(tmp_path: Path) -> None:
    registry = _registry(_config(tmp_path))
    registry.put_user(User("alice", "alice-secret", UserType.SUPER), create=True)
    acl = _acl("alice", "Topic:Orders", "Group:g")
    registry.put_acl(acl)
    registry.save()
    db = _db(registry)
    [(key, sub, value)] = list(db.rows(USERS))
    assert (key, sub) == ("alice", 0)
    assert isinstance(value, str)
    assert json.loads(value) == User("alice", "alice-secret", UserType.SUPER).to_dict()
    [(key, _, value)] = list(db.rows(ACLS))
    assert isinstance(value, str)
    assert key == "alice" and json.loads(value) == acl.to_dict()
    versions = {k: json.loads(v) for k, _, v in db.rows(VERSIONS) if isinstance(v, str)}
    assert versions[USERS]["counter"] == 2
    db.close()


def test_a_slaves_copy_writes_only_what_differs(tmp_path: Path) -> None:
    registry = _registry(_config(tmp_path))
    for name in ("a", "b", "c"):
        registry.put_user(User(name, f"{name}-secret-1"), create=True)
    registry.put_acl(_acl("a", "Topic:T"))
    registry.save()
    master_users = [User("a", "a-secret-1"), User("b", "b-secret-2"), User("d", "d-secret-1")]
    master_acls = [_acl("a", "Topic:T")]
    cost = _cost_of(registry, lambda: registry.replace_all(master_users, master_acls))
    assert cost.rows == 4  # b updated, c deleted, d added, the version
    assert _cost_of(registry, lambda: registry.replace_all(master_users, master_acls)).rows == 0
    _db(registry).close()


def test_a_failed_write_is_loud_kept_and_written_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    registry = _registry(_config(tmp_path))
    db = _db(registry)
    write = db.write
    failing = [True]

    def flaky(rows):  # type: ignore[no-untyped-def]
        if failing[0] and any(r.kind == USERS for r in rows):
            raise StoreError("disk full (simulated)")
        return write(rows)

    db.write = flaky  # type: ignore[method-assign]
    registry.put_user(User("kept", "kept-secret-1"), create=True)
    with caplog.at_level(logging.ERROR), pytest.raises(StoreError, match="in effect"):
        registry.save()
    assert any("users and ACLs" in r.getMessage() and "will retry" in r.getMessage()
               for r in caplog.records)
    assert "kept-secret-1" not in caplog.text
    assert registry.user("kept") is not None and db.count(USERS) == 0
    # Another table is written meanwhile (one that fails never stops the others).
    db.write([Row(VERSIONS, "probe", 0, "1")])
    failing[0] = False
    registry.put_user(User("later", "later-secret-1"), create=True)
    registry.save()  # the next change's save writes both
    assert [k for k, _, _ in db.rows(USERS)] == ["kept", "later"]
    db.close()


def test_the_metadata_store_is_owner_only_whatever_the_store_mode(tmp_path: Path) -> None:
    config = _config(tmp_path)
    config_dir = Path(config.store.store_path) / "config"
    config_dir.mkdir(parents=True)
    os.chmod(config_dir, 0o750)  # as store_file_mode = "0640" made it before
    older = MetadataDB(str(config_dir / "metadata.db")).open()  # keeps its -wal and -shm
    older.write([Row(VERSIONS, "probe", 0, "1")])
    files = ("metadata.db", "metadata.db-wal", "metadata.db-shm")
    for name in files:
        os.chmod(config_dir / name, 0o640)
    os.chmod(config_dir, 0o750)
    registry = _registry(config)  # opens the store again, as a broker's start does
    registry.put_user(User("alice", "alice-secret"), create=True)
    registry.save()
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in config_dir.iterdir()}
    assert {name: modes.get(name) for name in files} == dict.fromkeys(files, 0o600)
    assert stat.S_IMODE(config_dir.stat().st_mode) == 0o700
    _db(registry).close()
    older.close()
    fresh = _config(tmp_path / "fresh")
    registry = _registry(fresh)  # a new store: created so
    new_dir = Path(fresh.store.store_path) / "config"
    assert stat.S_IMODE(new_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((new_dir / "metadata.db").stat().st_mode) == 0o600
    _db(registry).close()


def test_no_export_holds_the_users_or_their_secrets(tmp_path: Path) -> None:
    assert not {kind for kind, _ in EXPORT_NAMES.values()} & set(SECRET_KINDS)
    registry = _registry(_config(tmp_path))
    registry.put_user(User("alice", "alice-very-secret"), create=True)
    registry.put_acl(_acl("alice", "Topic:T"))
    registry.save()
    db = _db(registry)
    text = json.dumps(export_tables(db))
    assert "alice" not in text and "very-secret" not in text
    with pytest.raises(StoreError, match="unknown metadata table"):
        export_tables(db, ["users"])
    db.close()


# -- migration of the users file of the tree before ------------------------------------------
def _legacy(config: BrokerConfig) -> tuple[Path, dict]:
    config_dir = Path(config.store.store_path) / "config"
    config_dir.mkdir(parents=True)
    shutil.copyfile(LEGACY_AUTH, config_dir / AUTH_FILE_NAME)
    return config_dir, json.loads(LEGACY_AUTH.read_text())


def test_the_users_file_of_the_tree_before_is_imported_once(tmp_path: Path) -> None:
    """tests/data/legacy_auth/auth.json is what the broker before wrote (make_fixture.py
    there): every user and ACL is imported, the file renamed aside, and the next start does
    not import it again (a user deleted after the import stays deleted)."""
    config = _config(tmp_path)
    config_dir, legacy = _legacy(config)
    registry = _registry(config)
    assert registry.to_dict() == legacy
    assert registry.user("legacy-user-1") == User("legacy-user-1", "legacy-secret-1b")
    assert not registry.user("legacy-off").enabled  # type: ignore[union-attr]
    assert not (config_dir / AUTH_FILE_NAME).exists()
    assert (config_dir / (AUTH_FILE_NAME + MIGRATED_SUFFIX)).exists()
    assert registry.delete_user("legacy-user-0")
    registry.save()
    _db(registry).close()
    again = _registry(config)
    assert again.user("legacy-user-0") is None and again.acl("legacy-user-0") is None
    assert len(again) == len(legacy["users"]) - 1
    _db(again).close()


def test_a_crash_between_the_import_and_the_rename_imports_again_harmlessly(
        tmp_path: Path) -> None:
    config = _config(tmp_path)
    config_dir, legacy = _legacy(config)
    registry = _registry(config)
    db = _db(registry)
    rows = {kind: list(db.rows(kind)) for kind in (USERS, ACLS)}
    db.close()
    # The rename did not happen: the file is there again beside the imported rows.
    shutil.copyfile(config_dir / (AUTH_FILE_NAME + MIGRATED_SUFFIX), config_dir / AUTH_FILE_NAME)
    again = _registry(config)
    db = _db(again)
    assert {kind: list(db.rows(kind)) for kind in (USERS, ACLS)} == rows
    assert again.to_dict() == legacy
    assert not (config_dir / AUTH_FILE_NAME).exists()
    db.close()


@pytest.mark.parametrize("content", [b"{not json", b'{"users": [{"username": "x y"}]}',
                                     b'{"users": "everyone"}'])
def test_a_bad_users_file_refuses_the_start_and_names_the_file(
        tmp_path: Path, content: bytes) -> None:
    config = _config(tmp_path)
    config_dir = Path(config.store.store_path) / "config"
    config_dir.mkdir(parents=True)
    (config_dir / AUTH_FILE_NAME).write_bytes(content)
    db = metadata_db_for(config)
    with pytest.raises(StoreError, match=str(config_dir / AUTH_FILE_NAME)):
        _registry(config, db)
    assert (config_dir / AUTH_FILE_NAME).read_bytes() == content  # kept for the next attempt
    assert db.count(USERS) == 0
    db.close()
