"""The users and ACLs a server checks requests against, and their file.

One :class:`AuthRegistry` per server process (a broker's lives in its store's config directory as
``auth.json``; a name server's in ``auth_config_path``; ``standalone`` shares the broker's). The
file holds secrets (a signature can only be checked with the secret key), so it is written
0600 in a 0700 directory, atomically (temporary file, fsync, rename, directory fsync), and its
content is never logged. Every change bumps ``version`` and calls the listeners (the file save,
the native fast path's snapshot).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from orbitmq.errors import RemoteProtocolError, StoreError
from orbitmq.files import replace_file
from orbitmq.security.model import Acl, User, UserType, check_username

__all__ = ["AuthRegistry", "AUTH_FILE_NAME", "USERS_MAX", "write_private"]

log = logging.getLogger(__name__)

AUTH_FILE_NAME = "auth.json"
USERS_MAX = 100_000


def write_private(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data``, readable by the owner only, whole after any crash."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    replace_file(path, data, 0o600)


class AuthRegistry:
    """Users by name and ACLs by username, with a version that every change bumps.

    Reads are lock-free dictionary lookups (the event loop's thread asks per request); changes
    replace whole values under a lock so a reader sees either the old or the new one.
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path
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

    def _changed(self) -> None:
        self.version += 1
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
        self._changed()

    def delete_user(self, username: str) -> bool:
        """Deletes a user and its ACL; False when there was none."""
        with self._lock:
            if username not in self._users:
                return False
            self._users = {k: v for k, v in self._users.items() if k != username}
            self._acls = {k: v for k, v in self._acls.items() if k != username}
        self._changed()
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
        self._changed()

    def ensure_user(self, username: str, password: str, user_type: UserType) -> bool:
        """Creates the user unless one of that name exists (the init user; inner credentials in
        a process that has no users file). True when it was created."""
        check_username(username)
        with self._lock:
            if username in self._users:
                return False
            self._users = {**self._users, username: User(username, password, user_type)}
        self._changed()
        return True

    def replace_all(self, users: Iterable[User], acls: Iterable[Acl]) -> bool:
        """The whole table as a slave copies it from its master; True when it changed."""
        new_users = {u.username: u for u in users}
        new_acls = {a.username: a for a in acls if a.username in new_users}
        with self._lock:
            if new_users == self._users and new_acls == self._acls:
                return False
            self._users, self._acls = new_users, new_acls
        self._changed()
        return True

    # -- the file ------------------------------------------------------------------------------
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
        """Reads the file if there is one. StoreError when it is unreadable or malformed:
        starting without the users would lock everyone out, or worse, let the init user be
        re-created with a password the operator changed."""
        if self.path is None or not os.path.exists(self.path):
            return
        try:
            with open(self.path, "rb") as f:
                users, acls = self.parse(orjson.loads(f.read()))
        except (OSError, orjson.JSONDecodeError, RemoteProtocolError) as e:
            raise StoreError(f"cannot read the users and ACLs in {self.path}: {e}") from None
        self.replace_all(users, acls)
        os.chmod(self.path, 0o600)

    def save(self) -> None:
        """Writes the file (0600). StoreError when it cannot be written."""
        if self.path is None:
            return
        try:
            write_private(self.path, self.encode())
        except OSError as e:
            raise StoreError(f"cannot save the users and ACLs to {self.path}: {e}") from None
