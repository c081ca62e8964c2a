"""The broker's users and ACLs in its metadata store (store/metadata_db.py): a registry store.

The registry (security/registry.py) keeps the users and ACLs in memory and marks the usernames
whose user or ACL changed; a save writes those rows alone, with the table's data version, in one
transaction (tables/metadata_table.py), so creating the 100,000th user writes as many rows as
creating the 10th. Before, the whole ``auth.json`` was rewritten at every change. A save that
fails is logged as an error and its rows stay marked: the admin request that made the change
is answered SYSTEM_ERROR (the change is in effect), and the next change, the broker's periodic
round and its stop write them again.

Rows: ``users`` holds a username's UserInfo JSON (its secret key included: the store is
owner-only and never exports it), ``acls`` its AclInfo JSON, the ``versions`` row ``users`` the
data version of both. In :class:`MetadataTable`'s marks, sub 0 names a user and sub 1 an ACL
(each row's own sub is 0).

At the first start, a broker's ``auth.json`` of an earlier version is imported into the store
and renamed ``auth.json.migrated`` (:func:`migrate_json`, as topics.json and the others are).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

import orjson

from orbitmq.broker.tables.metadata_table import MetadataTable, migrate_json
from orbitmq.errors import RemoteProtocolError, StoreError
from orbitmq.protocol.bodies import DataVersion
from orbitmq.security.model import Acl, User
from orbitmq.security.registry import AuthRegistry, RegistryStore
from orbitmq.store.metadata_db import ACLS, USERS, VERSIONS, MetadataDB, Row

__all__ = ["MetadataRegistryStore", "USER_MARK", "ACL_MARK"]

USER_MARK = 0  # a mark's sub: the username's user row...
ACL_MARK = 1  # ...or its ACL row


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if not isinstance(value, str):
        raise RemoteProtocolError(f"a row holds {type(value).__name__}, not JSON")
    return value


class MetadataRegistryStore(RegistryStore):
    """A registry's users and ACLs as rows of the broker's metadata store.

    Args:
        db: the broker's metadata store (opened by :meth:`load`).
        legacy_path: the users file a broker of an earlier version kept
            (``STORE/config/auth.json``), imported once.
    """

    def __init__(self, db: MetadataDB, legacy_path: str) -> None:
        self.db = db
        self.path = db.path
        self.legacy_path = legacy_path
        self.table = MetadataTable(db, "users and ACLs", self._rows)
        self.data_version = DataVersion(int(time.time() * 1000), 0)
        self._version_lock = threading.Lock()

    def load(self) -> None:
        self.db.open()
        users: list[User] = []
        acls: list[Acl] = []
        try:
            for name, _sub, value in self.db.rows(USERS):
                users.append(User.from_dict(orjson.loads(_text(value)), username=name))
            for name, _sub, value in self.db.rows(ACLS):
                acls.append(Acl.from_dict(orjson.loads(_text(value)), f"User:{name}"))
            for key, _sub, value in self.db.rows(VERSIONS):
                if key == USERS:
                    self.data_version = DataVersion.from_json(_text(value))
        except (RemoteProtocolError, orjson.JSONDecodeError) as e:
            # The row's name only: its content holds a secret key.
            raise StoreError(f"{self.db.path}: the users and ACLs cannot be read: {e}") from None
        self.registry.loaded(users, acls)
        migrate_json(self.legacy_path, self.table, self._import)

    def _import(self, data: object) -> None:
        """auth.json's content into the registry, every user and ACL that differs marked."""
        try:
            users, acls = AuthRegistry.parse(data)
        except RemoteProtocolError as e:
            raise StoreError(f"cannot read the users and ACLs in {self.legacy_path}: {e}") from None
        self.registry.merge(users, acls)

    def changed(self, users: Iterable[str] = (), acls: Iterable[str] = ()) -> None:
        marks = [(name, USER_MARK) for name in users] + [(name, ACL_MARK) for name in acls]
        with self._version_lock:
            self.data_version = DataVersion(int(time.time() * 1000), self.data_version.counter + 1)
        self.table.mark_many(marks)

    def save(self) -> None:
        if not self.table.save():
            raise StoreError(f"the users and ACLs could not be written to {self.path} (logged "
                             "above); they are in effect and written again at the next change "
                             "or periodic round")

    def _rows(self, keys: list[tuple[str, int]]) -> list[Row]:
        """The rows of the marked users and ACLs as the registry holds them now, and the data
        version (on the saving thread: the registry's dictionaries are replaced whole)."""
        registry = self.registry
        rows = []
        for name, mark in keys:
            if mark == USER_MARK:
                user = registry.saved_user(name)
                rows.append(Row(USERS, name, 0, None if user is None
                                else orjson.dumps(user.to_dict()).decode()))
            else:
                acl = registry.acl(name)
                rows.append(Row(ACLS, name, 0, None if acl is None
                                else orjson.dumps(acl.to_dict()).decode()))
        with self._version_lock:
            version = self.data_version.to_json().decode()
        rows.append(Row(VERSIONS, USERS, 0, version))
        return rows
