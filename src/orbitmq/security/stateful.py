"""What a connection remembers of its authentication under the *stateful* strategy.

RocketMQ 5 offers two authentication strategies (``authenticationStrategy``): stateless, where
every request's signature is checked, and stateful, where a channel that authenticated a user
once is trusted for that user's later requests until the entry expires
(``statefulAuthenticationCacheExpiredSecond``). On OrbitMQ's remoting ports the stateless
check hashes every byte of every request (the signature covers the body): with large sends that
is a noticeable share of the broker's work, and the stateful strategy removes it after a
connection's first request. What it gives up: the per-request signature is what proves that a
request was not altered or injected on its way, so a connection's later requests are only as
trustworthy as the connection itself; use it with TLS (docs/security.md).

A remembered user is forgotten sooner than RocketMQ's cache forgets it: at any change of the
users or rules (the registry's version), so a user disabled, deleted or given a new secret must
sign correctly again on its next request, wherever it is connected.

The record is one ``bytearray`` of :data:`SESSION_SIZE` bytes per connection, kept in the
connection's attributes under :data:`SESSION_KEY`, read and written by the Python guard and by
the broker's native fast path (broker/_native/fastpath_auth.c, which mirrors this layout):

    0   u64 LE  the registry's version when the user was authenticated
    8   i64 LE  when the record expires, epoch milliseconds
    16  u8      the user name's length in bytes (0: nothing remembered)
    17  bytes   the user name (ASCII, USERNAME_MAX_CHARS at most)
"""

from __future__ import annotations

import struct
from typing import Any

from orbitmq.security.model import USERNAME_MAX_CHARS

__all__ = ["SESSION_KEY", "SESSION_SIZE", "session_of", "remembers", "remember"]

SESSION_KEY = "orbitmq.auth_session"
_HEAD = struct.Struct("<QqB")
SESSION_SIZE = _HEAD.size + USERNAME_MAX_CHARS
assert _HEAD.size == 17 and USERNAME_MAX_CHARS <= 255  # fastpath_auth.c's AUTH_SESSION_* layout


def session_of(attributes: dict[str, Any]) -> bytearray:
    """The connection's record (made empty on first use)."""
    session = attributes.get(SESSION_KEY)
    if session is None:
        session = attributes[SESSION_KEY] = bytearray(SESSION_SIZE)
    return session


def remembers(session: bytearray, username: str, version: int, now_ms: int) -> bool:
    """True when ``session`` holds ``username``, authenticated under registry ``version``,
    and has not expired at ``now_ms``."""
    held_version, expires_ms, name_len = _HEAD.unpack_from(session)
    return (name_len > 0 and held_version == version and now_ms < expires_ms
            and session[_HEAD.size:_HEAD.size + name_len] == username.encode())


def remember(session: bytearray, username: str, version: int, expires_ms: int) -> None:
    """Records that ``username`` authenticated on this connection under ``version``."""
    name = username.encode()
    if not 0 < len(name) <= USERNAME_MAX_CHARS:
        return  # no such user can have authenticated: nothing to remember
    _HEAD.pack_into(session, 0, version, expires_ms, len(name))
    session[_HEAD.size:_HEAD.size + len(name)] = name
