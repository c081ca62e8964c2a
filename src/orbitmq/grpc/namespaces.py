"""Namespaces on the RocketMQ 5 endpoint: every call's topics and groups put in its namespace.

A 5.x client configured with a namespace (``ClientConfiguration(namespace=...)``) names it twice:
in the call's metadata ``x-mq-namespace`` and in the ``resource_namespace`` of every
``Resource`` (topic or group) it sends, with the bare name beside it. :class:`NamespaceInterceptor`
sits in front of every RPC of MessagingService, before authentication, authorization and any
handler, and rewrites each ``Resource`` of the request to the stored name
(``NAMESPACE%name``, protocol/namespaces.py) with its ``resource_namespace`` cleared. Everything
behind it (routes, sends, receives, acks, invisible time, dead letters, transactions, telemetry
settings and subscriptions, access control) sees ordinary names: tenants are apart because their
names are, and a rule on ``Topic:shop%orders`` (or the prefix ``shop%*``) is what authorizes
them. Every ``Resource`` of the answer goes back the other way: the bare name and the namespace
in ``resource_namespace``, so a received message shows the topic the client knows.

A ``Resource``'s own namespace wins; the metadata fills those that carry none. A namespace that
cannot be one, two that disagree within a call, or a name that is too long once wrapped answer
BAD_REQUEST with the reason, in the RPC's own answer (a Telemetry command: in the
stream, and the command never reaches the handler).
A call without any namespace passes untouched: ``shop%orders`` written out by a client works as
any name does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import cache
from typing import Any

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from grpc import aio

from orbitmq.grpc._generated import definition_pb2 as pb
from orbitmq.grpc._generated import service_pb2 as spb
from orbitmq.grpc.codes import INTERNAL_MESSAGE, ApiError, Code, status
from orbitmq.grpc.convert import NAME_MAX
from orbitmq.protocol.namespaces import NamespaceError, check_namespace, unwrap, wrap

__all__ = ["NAMESPACE_METADATA", "NamespaceInterceptor", "apply_namespace", "strip_namespace"]

log = logging.getLogger(__name__)

NAMESPACE_METADATA = "x-mq-namespace"
_SERVICE_PREFIX = "/apache.rocketmq.v2.MessagingService/"
_SERVICE = spb.DESCRIPTOR.services_by_name["MessagingService"]
_RESOURCE = pb.Resource.DESCRIPTOR
_MESSAGE = FieldDescriptor.TYPE_MESSAGE


@cache
def _resource_fields(desc: Descriptor) -> tuple[FieldDescriptor, ...]:
    """The fields of ``desc`` that are, or lead to, a Resource (maps and leaves skipped, so a
    message's properties and body are never walked)."""
    out = []
    for field in desc.fields:
        if field.type != _MESSAGE or field.message_type.GetOptions().map_entry:
            continue
        if field.message_type is _RESOURCE or _resource_fields(field.message_type):
            out.append(field)
    return tuple(out)


def _resources(msg: Message) -> list[pb.Resource]:
    found: list[pb.Resource] = []

    def walk(m: Message) -> None:
        for field in _resource_fields(m.DESCRIPTOR):
            if field.is_repeated:
                items = list(getattr(m, field.name))
            elif m.HasField(field.name):
                items = [getattr(m, field.name)]
            else:
                continue
            for item in items:
                if field.message_type is _RESOURCE:
                    found.append(item)
                else:
                    walk(item)
    walk(msg)
    return found


def call_namespace(metadata: Any) -> str:
    """The namespace the call's metadata names ("" for none); ApiError(BAD_REQUEST) when it is
    not one."""
    for key, value in metadata or ():
        if key == NAMESPACE_METADATA:
            text = value if isinstance(value, str) else value.decode("utf-8", "replace")
            if not text:
                return ""
            try:
                return check_namespace(text)
            except NamespaceError as e:
                raise ApiError(Code.BAD_REQUEST, f"metadata {NAMESPACE_METADATA}: {e}") from None
    return ""


def apply_namespace(request: Message, namespace: str) -> str:
    """Puts every Resource of ``request`` in its namespace (module docstring), in place.

    Returns:
        The namespace the call used ("" for none), for :func:`strip_namespace` on its answer.

    Raises:
        ApiError: a namespace that is not one, two that disagree, or a wrapped name too long.
    """
    used = namespace
    for res in _resources(request):
        own = res.resource_namespace
        if own:
            try:
                check_namespace(own)
            except NamespaceError as e:
                raise ApiError(Code.BAD_REQUEST, f"resource {res.name[:NAME_MAX]!r}: {e}") from None
            if used and own != used:
                raise ApiError(Code.BAD_REQUEST, f"resource {res.name[:NAME_MAX]!r} names namespace "
                                                 f"{own!r} where the call names {used!r}")
            used = own
        ns = own or namespace
        if not ns or not res.name:
            res.ClearField("resource_namespace")
            continue
        wrapped = wrap(ns, res.name)
        if len(wrapped) > NAME_MAX:
            raise ApiError(Code.BAD_REQUEST, f"{res.name[:NAME_MAX]!r} in namespace {ns!r} is "
                                             f"longer than {NAME_MAX} characters")
        res.name = wrapped
        res.ClearField("resource_namespace")
    return used


def strip_namespace(answer: Message, namespace: str) -> Message:
    """Every Resource of ``answer`` in ``namespace`` back to its bare name with the namespace
    beside it, in place (nothing without a namespace)."""
    if namespace:
        for res in _resources(answer):
            bare = unwrap(res.name, namespace)
            if bare != res.name:
                res.name = bare
                res.resource_namespace = namespace
    return answer


def _entered(request: Message, metadata: Any) -> str:
    """apply_namespace with the call's metadata; an unexpected failure is logged and answered
    INTERNAL_SERVER_ERROR (never an exception out of the interceptor)."""
    try:
        return apply_namespace(request, call_namespace(metadata))
    except ApiError:
        raise
    except Exception:
        log.exception("applying a call's namespace failed")
        raise ApiError(Code.INTERNAL_SERVER_ERROR, INTERNAL_MESSAGE) from None


def _refusal(rpc: str, e: ApiError) -> Message:
    output = _SERVICE.methods_by_name[rpc].output_type.name
    answer: Message = getattr(spb, output)(status=status(e.code, e.message))
    return answer


class NamespaceInterceptor(aio.ServerInterceptor):
    """Applies each call's namespace to its request and strips it from its answers."""

    def __init__(self) -> None:
        # RPC -> (the servicer's handler, the wrapped one): made once per RPC, not per call
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
            details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        method = details.method or ""
        if handler is None or not method.startswith(_SERVICE_PREFIX):
            return handler
        rpc = method[len(_SERVICE_PREFIX):]
        if rpc not in _SERVICE.methods_by_name:
            return handler
        known = self._wrapped.get(rpc)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = _wrap_handler(rpc, handler)
        self._wrapped[rpc] = (handler, wrapped)
        return wrapped


def _wrap_handler(rpc: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    kw = {"request_deserializer": handler.request_deserializer,
          "response_serializer": handler.response_serializer}
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(_unary_unary(rpc, handler.unary_unary), **kw)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(_unary_stream(rpc, handler.unary_stream), **kw)
    if handler.stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(_stream_stream(rpc, handler.stream_stream), **kw)
    return handler  # MessagingService has no client-streaming RPC


def _unary_unary(rpc: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def call(request: Message, context: aio.ServicerContext) -> Message:
        try:
            ns = _entered(request, context.invocation_metadata())
        except ApiError as e:
            return _refusal(rpc, e)
        return strip_namespace(await behavior(request, context), ns)
    return call


def _unary_stream(rpc: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def call(request: Message, context: aio.ServicerContext) -> AsyncIterator[Message]:
        try:
            ns = _entered(request, context.invocation_metadata())
        except ApiError as e:
            yield _refusal(rpc, e)
            return
        async for answer in behavior(request, context):
            yield strip_namespace(answer, ns)
    return call


def _stream_stream(rpc: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
    """Telemetry: each command put in the call's namespace on its way in; one that cannot be is
    answered in the stream (its refusal) and never reaches the handler; every answer of the
    handler (settings, transaction checks, verification commands) goes out in bare names."""
    async def call(requests: AsyncIterator[Message],
                   context: aio.ServicerContext) -> AsyncIterator[Message]:
        metadata = context.invocation_metadata()
        try:
            header_ns = call_namespace(metadata)
        except ApiError as e:
            yield _refusal(rpc, e)
            return
        seen = [header_ns]  # the namespace the stream's commands last used
        # (answer, set once it is written: the handler goes on in step, as it would alone)
        out: asyncio.Queue[tuple[Message, asyncio.Event | None] | None] = asyncio.Queue()

        async def commands() -> AsyncIterator[Message]:
            async for command in requests:
                try:
                    seen[0] = _entered(command, metadata) or header_ns
                except ApiError as e:
                    out.put_nowait((_refusal(rpc, e), None))
                    continue
                yield command

        async def answers() -> None:
            try:
                async for answer in behavior(commands(), context):
                    written = asyncio.Event()
                    out.put_nowait((strip_namespace(answer, seen[0]), written))
                    await written.wait()
            finally:
                out.put_nowait(None)

        pump = asyncio.ensure_future(answers())
        try:
            while (item := await out.get()) is not None:
                answer, written = item
                yield answer
                if written is not None:
                    written.set()
            await pump  # its failure (an abort included), if any, is the call's
        finally:
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)
    return call
