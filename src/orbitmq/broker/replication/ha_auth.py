"""Who may replicate: the HA handshake's checks (protocol/ha.py has its frames).

With ``authentication_enabled`` a master sends a fresh nonce before anything else, and streams
nothing, and counts no acknowledgement, before the slave proves it holds the secret of a Super
user: the inner credentials (``inner_client_authentication_credentials``), which every server of
a cluster is configured with and accepts as Super (security/server_access.py). The master then
proves the same to the slave, so a slave sent to an impostor's HA port (a forged route) takes
nothing from it. Macs are compared in constant time; an unknown user costs the same HMAC as a
known one. Every refusal is one line of the audit log (security/audit.py: rate-limited, counted
by reason), never with a secret, a mac or a nonce in it.
"""

from __future__ import annotations

import dataclasses
import hmac
import os
from collections.abc import Callable

from orbitmq.protocol.ha import (
    AUTH_MASTER_CONTEXT,
    AUTH_NONCE_SIZE,
    AUTH_SLAVE_CONTEXT,
    AuthProof,
)
from orbitmq.security.audit import AuditLog
from orbitmq.security.registry import AuthRegistry
from orbitmq.security.signature import Credentials, hmac_sha1

__all__ = ["HAAuth", "HANDSHAKE_TIME_MAX_S", "AUDIT_CODE"]

HANDSHAKE_TIME_MAX_S = 5.0  # connect to acceptance, on either side
AUDIT_CODE = 0  # the request code of an HA refusal's audit line (the HA port has no codes)
_DUMMY_SECRET = os.urandom(16).hex()  # what an unknown user's mac is computed with


def slave_mac(secret: str, master_nonce: bytes, slave_nonce: bytes) -> bytes:
    return hmac_sha1(secret, master_nonce + slave_nonce + AUTH_SLAVE_CONTEXT)


def master_mac(secret: str, slave_nonce: bytes, master_nonce: bytes) -> bytes:
    return hmac_sha1(secret, slave_nonce + master_nonce + AUTH_MASTER_CONTEXT)


@dataclasses.dataclass(frozen=True)
class HAAuth:
    """One broker's side of the handshake (both roles: a broker may be either in its life).

    Args:
        registry: the users a peer's proof is checked against (it must name a Super user).
        credentials: what this broker proves itself with (its inner credentials); None when it
            has none (it can then neither follow a master nor be accepted by a slave).
        audit: where refusals are counted and logged.
    """

    registry: AuthRegistry
    credentials: Credentials | None
    audit: AuditLog

    @staticmethod
    def nonce() -> bytes:
        return os.urandom(AUTH_NONCE_SIZE)

    def check_slave(self, proof: AuthProof, master_nonce: bytes, source: str) -> str | None:
        """On a master: why a slave's proof is refused (audited), or None when it holds."""
        return self._check(proof, lambda s: slave_mac(s, master_nonce, proof.nonce), "slave",
                           source)

    def check_master(self, proof: AuthProof, slave_nonce: bytes, master_nonce: bytes,
                     source: str) -> str | None:
        """On a slave: why its master's acceptance is refused (audited), or None when it holds."""
        return self._check(proof, lambda s: master_mac(s, slave_nonce, master_nonce), "master",
                           source)

    def _check(self, proof: AuthProof, mac_of: Callable[[str], bytes], peer_role: str,
               source: str) -> str | None:
        user = self.registry.user(proof.access_key)
        expected = mac_of(user.password if user is not None else _DUMMY_SECRET)
        matches = hmac.compare_digest(expected, proof.mac)
        if user is None:
            reason, why = "unknown_user", f"HA {peer_role} names no user {proof.access_key}"
        elif not user.enabled:
            reason, why = "disabled_user", f"HA {peer_role} user {proof.access_key} is disabled"
        elif not matches:
            reason, why = "bad_signature", (f"the HA {peer_role}'s proof for user "
                                            f"{proof.access_key} does not match")
        elif not user.is_super:
            reason, why = "not_super", (f"HA {peer_role} user {proof.access_key} is Normal: "
                                        "replication needs a Super user (the inner credentials)")
        else:
            return None
        self.fail(reason, proof.access_key, source, why)
        return reason

    def fail(self, reason: str, user: str | None, source: str, why: str) -> None:
        """Counts and logs one refused handshake (one audit line)."""
        self.audit.authentication_failed(reason, user=user, source=source, code=AUDIT_CODE,
                                         remark=why)
