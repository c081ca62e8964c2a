"""Access control, RocketMQ 5's model: users, ACL rules, signatures, and the per-request check.

Pure where it can be: nothing here opens a socket. The transport calls :class:`AccessGuard` for
every request; the servers own an :class:`AuthRegistry` (users and ACLs, kept in a 0600 file).
"""

from orbitmq.security.access_table import ACCESS_TABLE, AuthRequestCode, Permission, needs
from orbitmq.security.audit import AuditLog
from orbitmq.security.guard import AccessGuard, AccessSettings, Principal
from orbitmq.security.model import (
    Acl,
    Action,
    Decision,
    PolicyEntry,
    Resource,
    ResourceType,
    User,
    UserStatus,
    UserType,
)
from orbitmq.security.registry import AuthRegistry
from orbitmq.security.signature import Credentials, sign_fields

__all__ = [
    "ACCESS_TABLE", "AuthRequestCode", "Permission", "needs", "AuditLog", "AccessGuard",
    "AccessSettings", "Principal", "Acl", "Action", "Decision", "PolicyEntry", "Resource",
    "ResourceType", "User", "UserStatus", "UserType", "AuthRegistry", "Credentials",
    "sign_fields",
]
