"""Access control on the RocketMQ 5 endpoint: who makes each call, and what each RPC needs.

Authentication (the broker's ``authentication_enabled``): every call, unary or streaming,
Telemetry included, carries the metadata a 5.x client stamps on it:

- ``x-mq-date-time``: the time of signing, ``yyyyMMddTHHmmssZ`` (the official Python client
  writes its *local* time there with a literal ``Z``);
- ``authorization: MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time,
  Signature=<hex>``: HMAC-SHA1 of that value with the user's secret (security/signature.py).

The date is not compared with the broker's clock: the Python client's ``Z`` is not UTC, so a
skew check would refuse it for a time zone it did not choose. A signature therefore proves who
signed, not when; a captured header can be replayed, which only TLS prevents. A missing or
garbled header, an unknown or disabled user or a wrong signature answers UNAUTHORIZED (40100);
an RPC the user's rules do not allow answers FORBIDDEN (40300) (authorization_enabled), each in
the response's status as every 5.x answer carries one, and each audited by the broker's
AccessGuard. ``authentication_whitelist`` names remoting codes and does not apply here.

:data:`RPC_NEEDS` is the one table of what each RPC of MessagingService needs, with the rules
remoting follows (security/access_table.py): a send Pub on its topics, a consumer's calls Sub on
the topic and the group, a route any user. Audit lines name a call by
``GRPC_AUDIT_CODE_BASE`` + its number in the service (QueryRoute 1000000, SendMessage
1000002, Telemetry 1000012: :func:`audit_code`), apart from every remoting code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from orbitmq.errors import AccessDeniedError, RemoteProtocolError
from orbitmq.grpc._generated import definition_pb2 as pb
from orbitmq.grpc._generated import service_pb2 as spb
from orbitmq.grpc.codes import ApiError, Code
from orbitmq.grpc.convert import resource_name
from orbitmq.security.access_table import SUB_OR_GET, Permission, topic_permission
from orbitmq.security.guard import AccessGuard, Principal
from orbitmq.security.model import Action, ResourceType
from orbitmq.security.signature import parse_grpc_authorization

__all__ = ["GrpcAccess", "RPC_NEEDS", "RpcNeeds", "GRPC_AUDIT_CODE_BASE", "AUTHORIZATION",
           "DATE_TIME", "DATE_TIME_CHARS_MAX", "audit_code", "peer_host"]

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
DATE_TIME_CHARS_MAX = 64  # the clients send 16 (yyyyMMddTHHmmssZ)
GRPC_AUDIT_CODE_BASE = 1_000_000
_SERVICE = spb.DESCRIPTOR.services_by_name["MessagingService"]

RpcNeeds = Callable[[Any], Sequence[Permission]]


def audit_code(rpc: str) -> int:
    """The number audit lines give ``rpc`` (module docstring)."""
    return GRPC_AUDIT_CODE_BASE + _SERVICE.methods_by_name[rpc].index


def _perm(rtype: ResourceType, name: str, *actions: Action) -> Permission:
    return Permission(rtype, name, frozenset(actions))


def _topic(res: pb.Resource) -> str:
    return resource_name(res, "topic", Code.ILLEGAL_TOPIC)


def _group(res: pb.Resource) -> str:
    return resource_name(res, "consumer group", Code.ILLEGAL_CONSUMER_GROUP)


def _anyone(request: Any) -> Sequence[Permission]:
    return ()


def _sub_topic_and_group(request: Any) -> Sequence[Permission]:
    """Sub on ``request.topic`` and ``request.group`` (a consumer's own calls)."""
    return (topic_permission(_topic(request.topic), Action.SUB),
            _perm(ResourceType.GROUP, _group(request.group), Action.SUB))


def _sub_queue_and_group(*actions: Action) -> RpcNeeds:
    """``actions`` on the topic of ``request.message_queue`` and on ``request.group``."""
    def needs(request: Any) -> Sequence[Permission]:
        return (topic_permission(_topic(request.message_queue.topic), *actions),
                _perm(ResourceType.GROUP, _group(request.group), *actions))
    return needs


def _pub_topic(request: Any) -> Sequence[Permission]:
    return (topic_permission(_topic(request.topic), Action.PUB),)


def _send(request: spb.SendMessageRequest) -> Sequence[Permission]:
    topics = dict.fromkeys(_topic(m.topic) for m in request.messages)  # once each, in order
    return [topic_permission(t, Action.PUB) for t in topics]


def _group_if_named(request: Any) -> Sequence[Permission]:
    """Sub on the group a client names (a consumer); a producer names none."""
    if request.HasField("group") and request.group.name:
        return (_perm(ResourceType.GROUP, _group(request.group), Action.SUB),)
    return ()


def _query_offset(request: spb.QueryOffsetRequest) -> Sequence[Permission]:
    return (topic_permission(_topic(request.message_queue.topic), *SUB_OR_GET),)


def _telemetry(command: spb.TelemetryCommand | None) -> Sequence[Permission]:
    """The stream itself needs a user; a client's settings need what the client will do:
    Pub on a producer's topics; Sub on a consumer's group (which the answer may create) and on
    the topics it subscribes."""
    if command is None or command.WhichOneof("command") != "settings":
        return ()
    settings = command.settings
    kind = settings.WhichOneof("pub_sub")
    if kind == "publishing":
        return [topic_permission(_topic(t), Action.PUB) for t in settings.publishing.topics]
    if kind == "subscription":
        sub = settings.subscription
        out = [_perm(ResourceType.GROUP, _group(sub.group), Action.SUB)]
        out += [topic_permission(_topic(e.topic), Action.SUB) for e in sub.subscriptions]
        return out
    return ()


# RPC -> what it needs (every RPC of MessagingService has a row; tests walk the service).
RPC_NEEDS: dict[str, RpcNeeds] = {
    "QueryRoute": _anyone,
    "Heartbeat": _group_if_named,
    "SendMessage": _send,
    "QueryAssignment": _sub_topic_and_group,
    "ReceiveMessage": _sub_queue_and_group(Action.SUB),
    "AckMessage": _sub_topic_and_group,
    "ForwardMessageToDeadLetterQueue": _sub_topic_and_group,
    "PullMessage": _sub_queue_and_group(Action.SUB),
    "UpdateOffset": _sub_queue_and_group(Action.SUB),
    "GetOffset": _sub_queue_and_group(*SUB_OR_GET),
    "QueryOffset": _query_offset,
    "EndTransaction": _pub_topic,
    "Telemetry": _telemetry,
    "NotifyClientTermination": _group_if_named,
    "ChangeInvisibleDuration": _sub_topic_and_group,
    "RecallMessage": _pub_topic,
    "SyncLiteSubscription": _sub_topic_and_group,
}


def peer_host(peer: str) -> str:
    """The host of a grpc peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``, ``unix:...``)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    if kind == "ipv6":
        return rest[1:rest.find("]")] if rest.startswith("[") and "]" in rest else rest
    return peer or "-"


def _metadata(context: Any, key: str) -> str | None:
    for name, value in context.invocation_metadata() or ():
        if name == key:
            return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return None


@dataclasses.dataclass
class GrpcAccess:
    """The endpoint's checks over the broker's AccessGuard (None: nothing is checked)."""

    guard: AccessGuard | None
    # A call's peer (``ipv4:IP:PORT``): grpcio's, or the client's behind the permissive TLS
    # front (grpc/front.py), which the endpoint sets.
    peer_of: Callable[[Any], str] = lambda context: context.peer() or ""

    @property
    def enabled(self) -> bool:
        return self.guard is not None and self.guard.enabled

    def admit(self, rpc: str, request: Any, context: Any) -> Principal | None:
        """Authenticates the call and authorizes ``request`` for ``rpc`` (RPC_NEEDS).

        Returns:
            The caller, or None when authentication is off.

        Raises:
            ApiError: UNAUTHORIZED or FORBIDDEN with the reason; or the code of a malformed
                topic or group name the RPC's needs could not be read without.
        """
        if self.guard is None or not self.guard.enabled:
            return None
        principal = self.authenticate(rpc, context)
        self.authorize(principal, rpc, request)
        return principal

    def authenticate(self, rpc: str, context: Any) -> Principal:
        """The user who signed the call's metadata; ApiError(UNAUTHORIZED) when none did."""
        guard = self.guard
        assert guard is not None
        code = audit_code(rpc)
        peer = peer_host(self.peer_of(context))
        try:
            header = _metadata(context, AUTHORIZATION)
            if not header:
                guard.fail_grpc("no_credentials", peer, f"no credentials: the call carries no "
                                f"{AUTHORIZATION} metadata (authentication is on)", code)
            date_time = _metadata(context, DATE_TIME)
            if not date_time or len(date_time) > DATE_TIME_CHARS_MAX \
                    or not date_time.isascii() or not date_time.isprintable():
                guard.fail_grpc("malformed", peer, f"the call's {DATE_TIME} metadata is missing, "
                                f"longer than {DATE_TIME_CHARS_MAX} characters or not printable "
                                "ASCII: it is what the signature signs", code)
            try:
                auth = parse_grpc_authorization(header)
            except RemoteProtocolError as e:
                guard.fail_grpc("malformed", peer, str(e), code)
            return guard.authenticate_grpc(auth, date_time, peer, code)
        except AccessDeniedError as e:
            raise ApiError(Code.UNAUTHORIZED, e.remark or "authentication failed") from None

    def authorize(self, principal: Principal | None, rpc: str, request: Any) -> None:
        """ApiError(FORBIDDEN) unless ``principal`` may do what ``request`` needs."""
        if principal is None or self.guard is None:
            return
        code = audit_code(rpc)
        try:
            self.guard.authorize(principal, RPC_NEEDS[rpc](request), code)
        except AccessDeniedError as e:
            raise ApiError(Code.FORBIDDEN, e.remark or "access denied") from None
        self.guard.audit.allowed(user=principal.username, source=principal.source, code=code)
