"""Request signatures: RocketMQ's remoting HMAC and the 5.x gRPC ``MQv2-HMAC-SHA1`` header.

Remoting (RocketMQ's AclClientRPCHook, and the C++ client's signing): the request's extFields
but ``Signature``, sorted by key as Java's TreeMap sorts strings (by UTF-16 code units), their
**values** concatenated, the body appended; HMAC-SHA1 of that with the secret key, Base64, sent in
extField ``Signature`` beside ``AccessKey`` (and ``SecurityToken`` when there is one). A number
or a boolean the client sent as JSON was decoded to its string form before this sees it, which is
the form every client signs.

gRPC (RocketMQ 5's clients and proxy): header ``authorization: MQv2-HMAC-SHA1
Credential=<ak>[/...], SignedHeaders=x-mq-date-time, Signature=<hex>``, the signature an
HMAC-SHA1 of the ``x-mq-date-time`` header's value, in hex.

Everything here is pure: bytes in, bytes out. Comparisons are constant-time.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
from collections.abc import Mapping

from orbitmq.errors import RemoteProtocolError

__all__ = [
    "ACCESS_KEY", "SIGNATURE", "SECURITY_TOKEN", "ONS_CHANNEL", "Credentials",
    "remoting_content", "sign_remoting", "remoting_signature_ok", "sign_fields",
    "MQV2_ALGORITHM", "GrpcAuthorization", "parse_grpc_authorization", "grpc_signature",
    "grpc_signature_ok", "hmac_sha1",
]

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
ONS_CHANNEL = "OnsChannel"  # the C++ client's extra signed field
MQV2_ALGORITHM = "MQv2-HMAC-SHA1"
AUTHORIZATION_HEADER_MAX_CHARS = 1024


@dataclasses.dataclass(frozen=True)
class Credentials:
    """An access key and its secret: what a client signs its requests with.

    ``security_token`` is sent (and signed) as extField ``SecurityToken`` when set.
    """

    access_key: str
    secret_key: str = dataclasses.field(repr=False)
    security_token: str | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.access_key, str) or not self.access_key:
            raise ValueError("Credentials.access_key must be a non-empty string")
        if not isinstance(self.secret_key, str) or not self.secret_key:
            raise ValueError("Credentials.secret_key must be a non-empty string")


def hmac_sha1(secret: str, data: bytes) -> bytes:
    return hmac.new(secret.encode(), data, hashlib.sha1).digest()


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _text(value: object) -> str:
    """A value as the wire carries it (the codec's rule: bools as true/false)."""
    if type(value) is str:
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def remoting_content(ext_fields: Mapping[str, str], body: bytes | memoryview | None) -> bytes:
    """What a remoting request's signature covers (see the module docstring)."""
    # Java's String.compareTo order is by UTF-16 code units: Python's order for ASCII keys.
    keys = (sorted(ext_fields) if all(k.isascii() for k in ext_fields)
            else sorted(ext_fields, key=_utf16))
    text = "".join(_text(ext_fields[k]) for k in keys if k != SIGNATURE).encode()
    return text + bytes(body) if body else text


def sign_remoting(ext_fields: Mapping[str, str], body: bytes | memoryview | None,
                  secret: str) -> str:
    """The Base64 HMAC-SHA1 signature of a request whose extFields already hold AccessKey."""
    return base64.b64encode(hmac_sha1(secret, remoting_content(ext_fields, body))).decode()


def sign_fields(ext_fields: dict[str, str], body: bytes | memoryview | None,
                credentials: Credentials) -> None:
    """Adds ``AccessKey`` (and ``SecurityToken``) and then ``Signature`` to ``ext_fields``."""
    ext_fields.pop(SIGNATURE, None)
    ext_fields[ACCESS_KEY] = credentials.access_key
    if credentials.security_token:
        ext_fields[SECURITY_TOKEN] = credentials.security_token
    ext_fields[SIGNATURE] = sign_remoting(ext_fields, body, credentials.secret_key)


def remoting_signature_ok(ext_fields: Mapping[str, str], body: bytes | memoryview | None,
                          secret: str) -> bool:
    """Whether ``ext_fields['Signature']`` is the signature of this request under ``secret``."""
    given = ext_fields.get(SIGNATURE)
    if not given:
        return False
    try:
        raw = base64.b64decode(given, validate=True)
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(raw, hmac_sha1(secret, remoting_content(ext_fields, body)))


@dataclasses.dataclass(frozen=True)
class GrpcAuthorization:
    """A parsed ``authorization`` header: who signed, and the signature's bytes."""

    access_key: str
    signature: bytes


def parse_grpc_authorization(header: str) -> GrpcAuthorization:
    """Parses ``MQv2-HMAC-SHA1 Credential=ak[/...], SignedHeaders=..., Signature=hex``.

    Raises:
        RemoteProtocolError: another scheme, a missing item or a signature that is not hex.
    """
    if len(header) > AUTHORIZATION_HEADER_MAX_CHARS:
        raise RemoteProtocolError("authorization header is too long")
    scheme, _, rest = header.strip().partition(" ")
    if scheme != MQV2_ALGORITHM:
        raise RemoteProtocolError(f"authorization scheme must be {MQV2_ALGORITHM}")
    items: dict[str, str] = {}
    for part in rest.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise RemoteProtocolError("authorization header: items must be Key=Value")
        items[key] = value.strip()
    access_key = items.get("Credential", "").split("/", 1)[0]
    if not access_key:
        raise RemoteProtocolError("authorization header names no Credential")
    try:
        signature = bytes.fromhex(items.get("Signature", ""))
    except ValueError:
        raise RemoteProtocolError("authorization header: Signature is not hex") from None
    if not signature:
        raise RemoteProtocolError("authorization header carries no Signature")
    return GrpcAuthorization(access_key, signature)


def grpc_signature(date_time: str, secret: str) -> str:
    """The hex signature a 5.x client puts in its authorization header."""
    return hmac_sha1(secret, date_time.encode()).hex().upper()


def grpc_signature_ok(auth: GrpcAuthorization, date_time: str, secret: str) -> bool:
    return hmac.compare_digest(auth.signature, hmac_sha1(secret, date_time.encode()))
