"""Users and access rules, RocketMQ 5's ACL 2.0 model, and their JSON bodies.

A :class:`User` has a name, a password (the secret key its requests are signed with), a type
(``Super``: allowed everything; ``Normal``: what its rules allow) and a status (``enable`` /
``disable``). An :class:`Acl` binds a subject (``User:alice``) to policy entries: a resource
(``Topic:orders``, ``Group:billing``, ``Cluster:DefaultCluster``; literal, prefixed ``orders*`` or
``*``), actions, a decision and optional source networks (CIDR).

The JSON bodies have RocketMQ's shapes (UserInfo, AclInfo) so that its tools and ours read each
other's answers. Every parser here takes untrusted input (a request body, a CLI flag, a file) and
raises :class:`~orbitmq.errors.RemoteProtocolError` naming what is wrong.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import re
from collections.abc import Iterable, Sequence
from typing import Any

from orbitmq.errors import RemoteProtocolError

__all__ = [
    "UserType", "UserStatus", "ResourceType", "ResourcePattern", "Action", "Decision",
    "PolicyType", "User", "Resource", "PolicyEntry", "Acl", "parse_subject", "subject_of",
    "parse_actions", "parse_source_ips", "USERNAME_MAX_CHARS", "PASSWORD_MAX_CHARS",
    "ENTRIES_MAX", "SOURCE_IPS_MAX",
]

USERNAME_MAX_CHARS = 64
PASSWORD_MAX_CHARS = 128
PASSWORD_MIN_CHARS = 6
ENTRIES_MAX = 1024  # policy entries of one subject
SOURCE_IPS_MAX = 64  # networks of one entry
_NAME = re.compile(r"[A-Za-z0-9_.%|-]+")  # RocketMQ's topic and group characters
_USERNAME = re.compile(r"[A-Za-z0-9_-]+")  # RocketMQ 5: letters, digits, '_' and '-'
SUBJECT_PREFIX = "User:"


class _Named(enum.Enum):
    """An enum whose wire form is RocketMQ's name, parsed without regard to case."""

    @classmethod
    def parse(cls, text: object, where: str) -> Any:
        if isinstance(text, str):
            for member in cls:
                if member.value.lower() == text.strip().lower():
                    return member
        allowed = ", ".join(m.value for m in cls)
        raise RemoteProtocolError(f"{where}: {text!r} is not one of {allowed}")


class UserType(_Named):
    SUPER = "Super"
    NORMAL = "Normal"


class UserStatus(_Named):
    ENABLE = "enable"
    DISABLE = "disable"


class ResourceType(_Named):
    ANY = "*"
    CLUSTER = "Cluster"
    TOPIC = "Topic"
    GROUP = "Group"


class ResourcePattern(enum.Enum):
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"
    ANY = "ANY"


class Action(_Named):
    ALL = "All"
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"


class Decision(_Named):
    ALLOW = "Allow"
    DENY = "Deny"


class PolicyType(_Named):
    CUSTOM = "Custom"
    DEFAULT = "Default"


def _text(value: object, where: str, max_chars: int) -> str:
    if not isinstance(value, str):
        raise RemoteProtocolError(f"{where} must be a string, got {value!r}")
    if not value or len(value) > max_chars:
        raise RemoteProtocolError(f"{where} must be 1 to {max_chars} characters")
    return value


def check_username(name: object, where: str = "username") -> str:
    text = _text(name, where, USERNAME_MAX_CHARS)
    if not _USERNAME.fullmatch(text):
        raise RemoteProtocolError(f"{where} {text!r}: letters, digits, '_' and '-' only")
    return text


@dataclasses.dataclass(frozen=True)
class User:
    """A user; ``password`` is the secret key of its signatures (never logged or printed)."""

    username: str
    password: str = dataclasses.field(repr=False)
    user_type: UserType = UserType.NORMAL
    status: UserStatus = UserStatus.ENABLE

    @property
    def is_super(self) -> bool:
        return self.user_type is UserType.SUPER

    @property
    def enabled(self) -> bool:
        return self.status is UserStatus.ENABLE

    def to_dict(self, *, with_password: bool = True) -> dict[str, Any]:
        """RocketMQ's UserInfo; ``with_password=False`` for answers people read."""
        out: dict[str, Any] = {"username": self.username}
        if with_password:
            out["password"] = self.password
        out["userType"] = self.user_type.value
        out["userStatus"] = self.status.value
        return out

    @classmethod
    def from_dict(cls, value: object, *, base: User | None = None,
                  username: str | None = None) -> User:
        """A UserInfo body; with ``base`` (an update) absent fields keep ``base``'s values."""
        if not isinstance(value, dict):
            raise RemoteProtocolError(f"UserInfo must be an object, got {type(value).__name__}")
        name = value.get("username") or username or (base.username if base else None)
        if username is not None and name != username:
            raise RemoteProtocolError(
                f"UserInfo.username {name!r} differs from the header's {username!r}")
        name = check_username(name, "UserInfo.username")
        password = value.get("password")
        if password is None:
            if base is None:
                raise RemoteProtocolError("UserInfo.password is missing")
            password = base.password
        password = _text(password, "UserInfo.password", PASSWORD_MAX_CHARS)
        if len(password) < PASSWORD_MIN_CHARS:
            raise RemoteProtocolError(
                f"UserInfo.password must be at least {PASSWORD_MIN_CHARS} characters")
        raw_type, raw_status = value.get("userType"), value.get("userStatus")
        user_type = (UserType.parse(raw_type, "UserInfo.userType") if raw_type is not None
                     else base.user_type if base else UserType.NORMAL)
        status = (UserStatus.parse(raw_status, "UserInfo.userStatus") if raw_status is not None
                  else base.status if base else UserStatus.ENABLE)
        return cls(name, password, user_type, status)


@dataclasses.dataclass(frozen=True, order=True)
class Resource:
    """``Type:name`` with a literal name, a prefix (``orders*``) or any (``*``)."""

    type: ResourceType
    name: str = "*"
    pattern: ResourcePattern = ResourcePattern.ANY

    @classmethod
    def parse(cls, text: object, where: str = "resource") -> Resource:
        raw = _text(text, where, 256).strip()
        if raw == "*":
            return cls(ResourceType.ANY)
        kind, sep, name = raw.partition(":")
        if not sep:
            raise RemoteProtocolError(
                f"{where} {raw!r}: expected Type:name (Cluster, Topic or Group), or *")
        rtype = ResourceType.parse(kind, where)
        if rtype is ResourceType.ANY:
            raise RemoteProtocolError(f"{where} {raw!r}: '*' stands alone")
        if name == "*":
            return cls(rtype)
        stem, pattern = (name[:-1], ResourcePattern.PREFIXED) if name.endswith("*") else (
            name, ResourcePattern.LITERAL)
        if not stem or not _NAME.fullmatch(stem) or len(stem) > 255:
            raise RemoteProtocolError(
                f"{where} {raw!r}: a name of 1 to 255 letters, digits or _ . % | -, "
                "optionally ending in *")
        return cls(rtype, stem, pattern)

    def __str__(self) -> str:
        if self.type is ResourceType.ANY:
            return "*"
        name = {"ANY": "*", "PREFIXED": f"{self.name}*"}.get(self.pattern.value, self.name)
        return f"{self.type.value}:{name}"

    def matches(self, rtype: ResourceType, name: str) -> bool:
        if self.type is not ResourceType.ANY and self.type is not rtype:
            return False
        if self.pattern is ResourcePattern.ANY:
            return True
        if self.pattern is ResourcePattern.PREFIXED:
            return name.startswith(self.name)
        return name == self.name


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_source_ips(values: object, where: str = "sourceIps") -> tuple[Network, ...]:
    if values is None:
        return ()
    if isinstance(values, str):
        values = [v for v in values.split(",") if v.strip()]
    if not isinstance(values, list) or len(values) > SOURCE_IPS_MAX:
        raise RemoteProtocolError(f"{where} must be a list of at most {SOURCE_IPS_MAX} networks")
    out = []
    for item in values:
        try:
            out.append(ipaddress.ip_network(_text(item, where, 64).strip(), strict=False))
        except ValueError:
            raise RemoteProtocolError(
                f"{where}: {item!r} is not an IP address or CIDR network") from None
    return tuple(out)


def parse_actions(values: object, where: str = "actions") -> frozenset[Action]:
    if isinstance(values, str):
        values = [v for v in values.split(",") if v.strip()]
    if not isinstance(values, list) or not values:
        raise RemoteProtocolError(f"{where} must name at least one action")
    return frozenset(Action.parse(v, where) for v in values)


@dataclasses.dataclass(frozen=True)
class PolicyEntry:
    """One rule: ``decision`` for ``actions`` on ``resource`` from ``source_ips`` (any if
    empty)."""

    resource: Resource
    actions: frozenset[Action]
    decision: Decision = Decision.ALLOW
    source_ips: tuple[Network, ...] = ()

    def applies(self, rtype: ResourceType, name: str, action: Action,
                source: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
        if not self.resource.matches(rtype, name):
            return False
        if action not in self.actions and Action.ALL not in self.actions:
            return False
        if self.source_ips:
            return source is not None and any(source in net for net in self.source_ips)
        return True

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "resource": str(self.resource),
            "actions": sorted(a.value for a in self.actions),
            "decision": self.decision.value,
        }
        if self.source_ips:
            out["sourceIps"] = [str(n) for n in self.source_ips]
        return out

    @classmethod
    def from_dict(cls, value: object, where: str) -> PolicyEntry:
        if not isinstance(value, dict):
            raise RemoteProtocolError(f"{where} must be an object")
        decision = value.get("decision")
        return cls(
            Resource.parse(value.get("resource"), f"{where}.resource"),
            parse_actions(value.get("actions"), f"{where}.actions"),
            Decision.parse(decision, f"{where}.decision") if decision is not None
            else Decision.ALLOW,
            parse_source_ips(value.get("sourceIps"), f"{where}.sourceIps"),
        )


def subject_of(username: str) -> str:
    return SUBJECT_PREFIX + username


def parse_subject(text: object, where: str = "subject") -> str:
    """The username of a ``User:NAME`` subject."""
    raw = _text(text, where, USERNAME_MAX_CHARS + len(SUBJECT_PREFIX))
    kind, sep, name = raw.partition(":")
    if not sep or kind.lower() != "user":
        raise RemoteProtocolError(f"{where} {raw!r}: expected User:NAME")
    return check_username(name, where)


@dataclasses.dataclass(frozen=True)
class Acl:
    """The rules of one subject: its entries, of the Custom policy (RocketMQ's Default policy
    is accepted on input and kept apart for its answers)."""

    username: str
    entries: tuple[PolicyEntry, ...] = ()
    default_entries: tuple[PolicyEntry, ...] = ()

    @property
    def subject(self) -> str:
        return subject_of(self.username)

    def all_entries(self) -> tuple[PolicyEntry, ...]:
        return self.entries + self.default_entries

    def to_dict(self) -> dict[str, Any]:
        policies = []
        for ptype, entries in ((PolicyType.CUSTOM, self.entries),
                               (PolicyType.DEFAULT, self.default_entries)):
            if entries:
                policies.append({"policyType": ptype.value,
                                 "entries": [e.to_dict() for e in entries]})
        return {"subject": self.subject, "policies": policies}

    @classmethod
    def from_dict(cls, value: object, subject: str | None = None) -> Acl:
        """An AclInfo body; ``subject`` (the header's) must agree with the body's if both."""
        if not isinstance(value, dict):
            raise RemoteProtocolError(f"AclInfo must be an object, got {type(value).__name__}")
        raw_subject = value.get("subject") or subject
        username = parse_subject(raw_subject, "AclInfo.subject")
        if subject is not None and parse_subject(subject, "subject") != username:
            raise RemoteProtocolError(
                f"AclInfo.subject {raw_subject!r} differs from the header's {subject!r}")
        policies = value.get("policies") or []
        if not isinstance(policies, list):
            raise RemoteProtocolError("AclInfo.policies must be a list")
        custom: list[PolicyEntry] = []
        default: list[PolicyEntry] = []
        for i, policy in enumerate(policies):
            if not isinstance(policy, dict):
                raise RemoteProtocolError(f"AclInfo.policies[{i}] must be an object")
            raw_type = policy.get("policyType")
            ptype = (PolicyType.parse(raw_type, f"AclInfo.policies[{i}].policyType")
                     if raw_type is not None else PolicyType.CUSTOM)
            entries = policy.get("entries") or []
            if not isinstance(entries, list):
                raise RemoteProtocolError(f"AclInfo.policies[{i}].entries must be a list")
            target = custom if ptype is PolicyType.CUSTOM else default
            target.extend(PolicyEntry.from_dict(e, f"AclInfo.policies[{i}].entries[{j}]")
                          for j, e in enumerate(entries))
        if len(custom) + len(default) > ENTRIES_MAX:
            raise RemoteProtocolError(f"AclInfo holds more than {ENTRIES_MAX} entries")
        return cls(username, tuple(custom), tuple(default))

    def merged(self, other: Acl) -> Acl:
        """These rules with ``other``'s added; an entry of ``other`` for the same resource
        replaces ours (RocketMQ's update)."""
        def merge(ours: Sequence[PolicyEntry], theirs: Iterable[PolicyEntry]) -> tuple[
                PolicyEntry, ...]:
            theirs = tuple(theirs)
            replaced = {e.resource for e in theirs}
            return tuple(e for e in ours if e.resource not in replaced) + theirs

        merged = Acl(self.username, merge(self.entries, other.entries),
                     merge(self.default_entries, other.default_entries))
        if len(merged.all_entries()) > ENTRIES_MAX:
            raise RemoteProtocolError(f"the ACL would hold more than {ENTRIES_MAX} entries")
        return merged

    def without(self, resources: Iterable[Resource], policy: PolicyType | None = None) -> Acl:
        """These rules less the entries of ``resources`` (all when ``resources`` is empty)."""
        gone = set(resources)

        def keep(entries: Sequence[PolicyEntry], ptype: PolicyType) -> tuple[PolicyEntry, ...]:
            if policy is not None and policy is not ptype:
                return tuple(entries)
            return tuple(e for e in entries if gone and e.resource not in gone)

        return Acl(self.username, keep(self.entries, PolicyType.CUSTOM),
                   keep(self.default_entries, PolicyType.DEFAULT))
