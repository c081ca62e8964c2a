"""The access-control settings' text forms, parsed where the config is read.

``init_authentication_user`` is RocketMQ's JSON ``{"username": ..., "password": ...}``;
``inner_client_authentication_credentials`` its JSON ``{"accessKey": ..., "secretKey": ...}``;
``authentication_whitelist`` request codes separated by commas. Each parser raises ValueError
with a message that never repeats a secret.
"""

from __future__ import annotations

import enum
import json

from orbitmq.errors import RemoteProtocolError
from orbitmq.security.model import PASSWORD_MIN_CHARS, check_username
from orbitmq.security.signature import Credentials

__all__ = ["parse_init_user", "parse_inner_credentials", "parse_whitelist", "REQUEST_CODE_MAX",
           "AuthenticationStrategy", "STATEFUL_EXPIRED_SECOND_MAX"]

REQUEST_CODE_MAX = 0x7FFF
STATEFUL_EXPIRED_SECOND_MAX = 86_400


class AuthenticationStrategy(enum.StrEnum):
    """RocketMQ 5's ``authenticationStrategy``: check every request's signature (stateless), or
    trust a connection for a user once it authenticated them (stateful; security/stateful.py)."""

    STATELESS = "stateless"
    STATEFUL = "stateful"


def _object(text: str, what: str, keys: tuple[str, str]) -> tuple[str, str]:
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError(f"{what} is not JSON (expected {{\"{keys[0]}\": ..., "
                         f"\"{keys[1]}\": ...}})") from None
    if not isinstance(value, dict) or not all(isinstance(value.get(k), str) and value.get(k)
                                               for k in keys):
        raise ValueError(f"{what} needs the strings {keys[0]!r} and {keys[1]!r}")
    return value[keys[0]], value[keys[1]]


def parse_init_user(text: str) -> tuple[str, str] | None:
    """(username, password) of ``init_authentication_user``; None when it is empty."""
    if not text.strip():
        return None
    username, password = _object(text, "init_authentication_user", ("username", "password"))
    try:
        check_username(username, "init_authentication_user.username")
    except RemoteProtocolError as e:
        raise ValueError(str(e)) from None
    if len(password) < PASSWORD_MIN_CHARS:
        raise ValueError(f"init_authentication_user.password must be at least "
                         f"{PASSWORD_MIN_CHARS} characters")
    return username, password


def parse_inner_credentials(text: str) -> Credentials | None:
    """The credentials of ``inner_client_authentication_credentials``; None when empty."""
    if not text.strip():
        return None
    access_key, secret_key = _object(text, "inner_client_authentication_credentials",
                                     ("accessKey", "secretKey"))
    return Credentials(access_key, secret_key)


def parse_whitelist(text: str) -> frozenset[int]:
    """The request codes of ``authentication_whitelist`` (``"105,106"``)."""
    codes = set()
    for item in text.replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        if not item.isdigit() or not 0 <= int(item) <= REQUEST_CODE_MAX:
            raise ValueError(f"authentication_whitelist: {item!r} is not a request code "
                             f"(0..{REQUEST_CODE_MAX})")
        codes.add(int(item))
    return frozenset(codes)
