"""The users and ACLs a server checks requests against, and where they are kept.

One :class:`AuthRegistry` per server process. It holds the users and ACLs in memory (reads are
lock-free lookups on the event loop's thread); where they persist is its :class:`RegistryStore`,
told of each change by name:

- :class:`JsonFileStore`: one JSON file, rewritten whole at each save (a name server's
  ``auth_config_path``; any registry without a broker's metadata store). The file holds secrets
  (a signature can only be checked with the secret key), so it is written 0600 in a 0700
  directory, atomically (temporary file, fsync, rename, directory fsync).
- the broker's metadata store (broker/tables/auth_table.py): one row per user and per ACL, a
  change writes its own rows alone (``standalone``'s name server shares the broker's registry).

Every change bumps ``version``, marks what changed in the store and calls the listeners (the
native fast path's snapshot); :meth:`AuthRegistry.save` writes what is marked. Secrets are never
logged.
"""

from __future__ import annotations

import abc
import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from orbitmq.errors import RemoteProtocolError, StoreError
from orbitmq.files import replace_file
from orbitmq.security.model import Acl, User, UserType, check_username

__all__ = ["AuthRegistry", "RegistryStore", "JsonFileStore", "AUTH_FILE_NAME", "USERS_MAX",
           "write_private"]

log = logging.getLogger(__name__)

AUTH_FILE_NAME = "auth.json"  # a broker's users file before its metadata store (then imported)
USERS_MAX = 100_000


def write_private(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data``, readable by the owner only, whole after any crash."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    replace_file(path, data, 0o600)


class RegistryStore(abc.ABC):
    """Where one registry's users and ACLs persist. The registry keeps them in memory and tells
    its store which usernames' user or ACL changed (:meth:`changed`); :meth:`save` writes them
    as the registry holds them then (a name gone: its row removed). A save that fails keeps
    what it did not write, for the next one.

    Attributes:
        path: where the users are kept (in messages).
        registry: the registry this store serves (set by the registry).
    """

    path: str | None = None
    registry: AuthRegistry

    @abc.abstractmethod
    def load(self) -> None:
        """Fill :attr:`registry` with what is kept (:meth:`AuthRegistry.loaded`).

        Raises:
            StoreError: what is kept cannot be read or is refused (named): starting without the
                users would lock everyone out, or worse, let the init user be re-created with
                a password the operator changed.
        """

    @abc.abstractmethod
    def changed(self, users: Iterable[str] = (), acls: Iterable[str] = ()) -> None:
        """The users and the ACLs of these usernames changed (or were removed) in memory."""

    @abc.abstractmethod
    def save(self) -> None:
        """Write what changed since the last save. StoreError when it could not be written
        (logged by the store; the changes stay marked for the next save)."""


class JsonFileStore(RegistryStore):
    """The whole table in one JSON file (``{"users": [...], "acls": [...]}``), rewritten at each
    save that follows a change: 0600 in a 0700 directory, atomically."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._dirty = False

    def load(self) -> None:
        path = self.path
        assert path is not None
        if not os.path.exists(path):
            return
        try:
            with open(path, "rb") as f:
                users, acls = AuthRegistry.parse(orjson.loads(f.read()))
        except (OSError, orjson.JSONDecodeError, RemoteProtocolError) as e:
            raise StoreError(f"cannot read the users and ACLs in {path}: {e}") from None
        self.registry.loaded(users, acls)
        os.chmod(path, 0o600)

    def changed(self, users: Iterable[str] = (), acls: Iterable[str] = ()) -> None:
        self._dirty = True

    def save(self) -> None:
        if not self._dirty:
            return
        assert self.path is not None
        self._dirty = False  # a change made while writing marks it again
        try:
            write_private(self.path, self.registry.encode())
        except OSError as e:
            self._dirty = True
            raise StoreError(f"cannot save the users and ACLs to {self.path}: {e}") from None


class AuthRegistry:
    """Users by name and ACLs by username, with a version that every change bumps.

    Reads are lock-free dictionary lookups (the event loop's thread asks per request); changes
    replace whole values under a lock so a reader sees either the old or the new one.

    Args:
        path: a users file (:class:`JsonFileStore`); ignored when ``store`` is given.
        store: where the users persist; None with no ``path``: memory only.
    """

    def __init__(self, path: str | None = None, *, store: RegistryStore | None = None) -> None:
        if store is None and path is not None:
            store = JsonFileStore(path)
        self.store = store
        if store is not None:
            store.registry = self
        self.path = store.path if store is not None else None
        self._loaded = False
        self._users: dict[str, User] = {}
        self._acls: dict[str, Acl] = {}
        # Users known to this process only, never saved or copied: the inner credentials, which
        # every server of a cluster is configured with (docs/security.md).
        self._builtin: dict[str, User] = {}
        self.version = 0
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    # -- reads ---------------------------------------------------------------------------------
    def user(self, username: str) -> User | None:
        user = self._users.get(username)
        return user if user is not None else self._builtin.get(username)

    def add_builtin(self, user: User) -> None:
        """A user this process accepts without saving it (see ``_builtin``); a saved user of
        the same name wins."""
        self._builtin[user.username] = user

    def saved_user(self, username: str) -> User | None:
        """The user kept in the store under ``username`` (never a built-in one)."""
        return self._users.get(username)

    def acl(self, username: str) -> Acl | None:
        return self._acls.get(username)

    def users(self) -> list[User]:
        return sorted(self._users.values(), key=lambda u: u.username)

    def acls(self) -> list[Acl]:
        return sorted(self._acls.values(), key=lambda a: a.username)

    def __len__(self) -> int:
        return len(self._users)

    # -- changes -------------------------------------------------------------------------------
    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _changed(self, users: Iterable[str] = (), acls: Iterable[str] = (), *,
                 store: bool = True) -> None:
        """Bump the version, mark the changed names in the store (unless ``store`` is False:
        what was just read from it), tell the listeners."""
        self.version += 1
        if store and self.store is not None:
            self.store.changed(users, acls)
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                log.exception("auth registry listener failed")

    def put_user(self, user: User, *, create: bool) -> None:
        """Adds (``create``) or replaces a user. RemoteProtocolError when it exists (create),
        does not exist (update), or the table is full."""
        with self._lock:
            exists = user.username in self._users
            if create and exists:
                raise RemoteProtocolError(f"user {user.username!r} already exists")
            if not create and not exists:
                raise RemoteProtocolError(f"user {user.username!r} does not exist")
            if create and len(self._users) >= USERS_MAX:
                raise RemoteProtocolError(f"at most {USERS_MAX} users")
            self._users = {**self._users, user.username: user}
        self._changed(users=(user.username,))

    def delete_user(self, username: str) -> bool:
        """Deletes a user and its ACL; False when there was none."""
        with self._lock:
            if username not in self._users:
                return False
            self._users = {k: v for k, v in self._users.items() if k != username}
            self._acls = {k: v for k, v in self._acls.items() if k != username}
        self._changed(users=(username,), acls=(username,))
        return True

    def put_acl(self, acl: Acl) -> None:
        """Sets the ACL of a user that exists (RemoteProtocolError otherwise); an ACL left with
        no entries is removed."""
        with self._lock:
            if acl.username not in self._users:
                raise RemoteProtocolError(f"user {acl.username!r} does not exist: create it first")
            acls = dict(self._acls)
            if acl.all_entries():
                acls[acl.username] = acl
            else:
                acls.pop(acl.username, None)
            self._acls = acls
        self._changed(acls=(acl.username,))

    def ensure_user(self, username: str, password: str, user_type: UserType) -> bool:
        """Creates the user unless one of that name exists (the init user; inner credentials in
        a process that has no users file). True when it was created."""
        check_username(username)
        with self._lock:
            if username in self._users:
                return False
            self._users = {**self._users, username: User(username, password, user_type)}
        self._changed(users=(username,))
        return True

    def replace_all(self, users: Iterable[User], acls: Iterable[Acl]) -> bool:
        """The whole table as a slave copies it from its master; True when it changed. Only
        the users and ACLs that differ are marked in the store."""
        new_users = {u.username: u for u in users}
        new_acls = {a.username: a for a in acls if a.username in new_users}
        with self._lock:
            old_users, old_acls = self._users, self._acls
            if new_users == old_users and new_acls == old_acls:
                return False
            self._users, self._acls = new_users, new_acls
        self._changed(users=_differing(old_users, new_users), acls=_differing(old_acls, new_acls))
        return True

    def merge(self, users: Iterable[User], acls: Iterable[Acl]) -> bool:
        """Add or replace these users and ACLs, keeping the others (a users file imported into
        a store that may hold some already); True when something changed."""
        return self.replace_all({**self._users, **{u.username: u for u in users}}.values(),
                                {**self._acls, **{a.username: a for a in acls}}.values())

    def loaded(self, users: Iterable[User], acls: Iterable[Acl]) -> None:
        """The table as the store holds it (its :meth:`RegistryStore.load`): nothing to write
        back."""
        new_users = {u.username: u for u in users}
        new_acls = {a.username: a for a in acls if a.username in new_users}
        with self._lock:
            self._users, self._acls = new_users, new_acls
        self._changed(store=False)

    # -- the whole table -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"users": [u.to_dict() for u in self.users()],
                "acls": [a.to_dict() for a in self.acls()]}

    def encode(self) -> bytes:
        return orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2)

    @staticmethod
    def parse(value: object) -> tuple[list[User], list[Acl]]:
        """The users and ACLs of ``to_dict``'s shape. RemoteProtocolError when malformed."""
        if not isinstance(value, dict):
            raise RemoteProtocolError("auth metadata must be an object")
        users = value.get("users") or []
        acls = value.get("acls") or []
        if not isinstance(users, list) or not isinstance(acls, list):
            raise RemoteProtocolError("auth metadata: users and acls must be lists")
        return ([User.from_dict(u) for u in users], [Acl.from_dict(a) for a in acls])

    def load(self) -> None:
        """Reads the users and ACLs from the store, once (later calls keep the memory, which
        holds every change since). StoreError when they cannot be read (RegistryStore.load)."""
        if self._loaded or self.store is None:
            return
        self.store.load()
        self._loaded = True

    def save(self) -> None:
        """Writes the changes not yet in the store. StoreError when they cannot be written:
        they stay in effect and are written by the next save."""
        if self.store is not None:
            self.store.save()


def _differing(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The keys whose values differ between ``old`` and ``new`` (added, removed or changed)."""
    return [k for k in old.keys() | new.keys() if old.get(k) != new.get(k)]
