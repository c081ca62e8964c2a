"""The audit trail of access control: one log line per refusal, rate-limited, and counters.

Each authentication failure and each denial is logged on the ``orbitmq.audit`` logger as one
``key=value`` line (who, from where, which request code and resource, why); allowed requests
too when ``audit_allowed`` is on. A flood cannot fill the disk: at most ``lines_per_s_max`` lines
a second are written, and the first line after a quiet spell says how many were left out. The
counters (by reason) feed ``rocketmq_authentication_failures_total`` and
``rocketmq_authorization_denials_total``. No secret ever reaches a line: the access key is a
name, and signatures and passwords are never passed here.
"""

from __future__ import annotations

import collections
import logging
import time

__all__ = ["AuditLog", "AUDIT_LINES_PER_S_MAX"]

log = logging.getLogger("orbitmq.audit")

AUDIT_LINES_PER_S_MAX = 20
_FIELD_CHARS_MAX = 128


def _clean(value: object) -> str:
    """A value safe on one log line: bounded, no control characters (a client chooses what a
    user name or a resource holds), in double quotes when it has spaces or quotes."""
    text = "".join(c if c.isprintable() else "?" for c in str(value)[:_FIELD_CHARS_MAX])
    if not text:
        return "-"
    if " " in text or '"' in text or "=" in text:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


class AuditLog:
    """Counts and logs authentication failures and authorization denials (see module doc)."""

    def __init__(self, *, log_allowed: bool = False,
                 lines_per_s_max: int = AUDIT_LINES_PER_S_MAX) -> None:
        self.log_allowed = log_allowed
        self._per_s_max = lines_per_s_max
        self._window = 0
        self._in_window = 0
        self._dropped = 0
        self.authentication_failures: collections.Counter[str] = collections.Counter()
        self.authorization_denials: collections.Counter[str] = collections.Counter()

    def _emit(self, level: int, event: str, **fields: object) -> None:
        now = int(time.monotonic())
        if now != self._window:
            self._window, self._in_window = now, 0
        if self._in_window >= self._per_s_max:
            self._dropped += 1
            return
        self._in_window += 1
        dropped, self._dropped = self._dropped, 0
        text = " ".join(f"{k}={_clean(v)}" for k, v in fields.items())
        if dropped:
            text += f" audit_lines_dropped={dropped}"
        log.log(level, "%s %s", event, text)

    def authentication_failed(self, reason: str, *, user: str | None, source: str,
                              code: int, remark: str) -> None:
        self.authentication_failures[reason] += 1
        self._emit(logging.WARNING, "authentication_failed", reason=reason, user=user or "-",
                   source=source, code=code, why=remark)

    def denied(self, reason: str, *, user: str, source: str, code: int, resource: str,
               remark: str) -> None:
        self.authorization_denials[reason] += 1
        self._emit(logging.WARNING, "authorization_denied", reason=reason, user=user,
                   source=source, code=code, resource=resource, why=remark)

    def allowed(self, *, user: str, source: str, code: int) -> None:
        if self.log_allowed:
            self._emit(logging.INFO, "allowed", user=user, source=source, code=code)
