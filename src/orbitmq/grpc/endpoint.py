"""The broker's gRPC endpoint: grpcio's asyncio server serving apache.rocketmq.v2.MessagingService.

:class:`GrpcEndpoint` listens on ``listen_host:grpc_listen_port`` (0: a free port, which
QueryRoute then names) and logs ``orbitmq grpc ready on HOST:PORT``. Port reuse is off: a second
broker on the same port fails to start instead of sharing it.

With the broker's authentication on, every call is first authenticated by its signed metadata
and authorized for what it asks (access.py: UNAUTHORIZED, FORBIDDEN); a Telemetry stream once,
when it opens, and each settings command it carries for what it declares.

Every call names its client (metadata ``x-mq-client-id``; CLIENT_ID_REQUIRED without it). A
refusal is an answer with an API code and a message (codes.py); an unexpected exception is logged
and answered INTERNAL_SERVER_ERROR with a fixed message. Calls the broker does not offer
(PullMessage and the offset calls) answer NOT_IMPLEMENTED. Lite topics: SyncLiteSubscription and
the lite parts of the other calls are grpc/lite.py's; a lite consumer's settings carry
``lite_subscription_quota`` and ``max_lite_topic_size`` (the 5.x clients refuse to subscribe
without them) and FIFO (a lite topic is consumed in order).

Telemetry: the client's settings are answered with the broker's (publishing: the largest body,
type validation, the send retry policy; subscription: FIFO from the group's
``consume_message_orderly``, the receive batch, the polling time and the retry policy, whose
attempts are the group's ``retry_max_times + 1`` and whose delays are the broker's delay levels);
transaction checks go out as RecoverOrphanedTransactionCommand (clients.py); a client's thread
stack trace or message verification result is logged and matched to the command that asked for
it (:meth:`GrpcEndpoint.print_stack` / :meth:`GrpcEndpoint.verify`, for operators and tests).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from grpc import aio

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.lite.service import LiteService
from orbitmq.broker.pop.pop_service import PopService
from orbitmq.grpc._generated import definition_pb2 as pb
from orbitmq.grpc._generated import service_pb2 as spb
from orbitmq.grpc._generated import service_pb2_grpc as spb_grpc
from orbitmq.grpc.access import GrpcAccess
from orbitmq.grpc.clients import CLIENT_ID_MAX, GrpcClients, TelemetryChannel
from orbitmq.grpc.codes import INTERNAL_MESSAGE, OK, ApiError, Code, status
from orbitmq.grpc.consume import RECEIVE_BATCH_MAX, Consuming
from orbitmq.grpc.convert import resource_name, to_duration
from orbitmq.grpc.front import GrpcFront
from orbitmq.grpc.lite import LiteFront
from orbitmq.grpc.namespaces import NamespaceInterceptor
from orbitmq.grpc.produce import Producing
from orbitmq.grpc.tls import server_credentials
from orbitmq.protocol.bodies import Perm
from orbitmq.protocol.topic_attributes import TopicMessageType, topic_message_type
from orbitmq.security.guard import AccessGuard, Principal
from orbitmq.security.tls import ServerTls, TlsServerMode

__all__ = ["GrpcEndpoint"]

log = logging.getLogger(__name__)

R = TypeVar("R")
STOP_GRACE_S = 2.0
SEND_ATTEMPTS = 3  # a 5.x producer's send attempts (its retry policy)
TELEMETRY_ANSWER_WAIT_S = 10.0
_TYPES = {TopicMessageType.NORMAL: [pb.NORMAL], TopicMessageType.FIFO: [pb.FIFO],
          TopicMessageType.DELAY: [pb.DELAY], TopicMessageType.TRANSACTION: [pb.TRANSACTION],
          TopicMessageType.PRIORITY: [pb.PRIORITY, pb.NORMAL],  # NORMAL: priority 0
          TopicMessageType.MIXED: [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION],
          TopicMessageType.LITE: [pb.LITE]}
_LITE_CONSUMERS = (pb.LITE_PUSH_CONSUMER, pb.LITE_SIMPLE_CONSUMER)


def _peer_ip(peer: str) -> str:
    if peer.startswith("ipv4:"):
        return peer[5:].rsplit(":", 1)[0]
    return "127.0.0.1"


def _client_id(context: aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "x-mq-client-id":
            text = value if isinstance(value, str) else value.decode("utf-8", "replace")
            if 0 < len(text) <= CLIENT_ID_MAX and text.isprintable():
                return text
            break
    raise ApiError(Code.CLIENT_ID_REQUIRED, f"the metadata x-mq-client-id must name the client "
                                            f"(1..{CLIENT_ID_MAX} printable characters)")


class GrpcEndpoint(spb_grpc.MessagingServiceServicer):
    """The MessagingService of one broker (module docstring)."""

    def __init__(self, ctx: BrokerContext, pop: PopService, producing: Producing,
                 guard: AccessGuard | None = None, lite: LiteService | None = None) -> None:
        self.ctx = ctx
        self.access = GrpcAccess(guard)
        cfg = ctx.config
        self.pop = pop
        self.producing = producing
        self.consuming = Consuming(pop, cfg.store.max_message_size, cfg.grpc_long_polling_max_ms,
                                   cfg.pop_invisible_time_max_ms)
        self.clients = GrpcClients(ctx.clients, cfg.client_channel_expire_ms)
        self.lite = LiteFront(lite) if lite is not None else None
        if self.lite is not None:
            self.consuming.lite = self.lite
            producing.lite_store_topic = self.lite.store_topic_for_send
        pop.client_alive = self.clients.alive
        self.port = 0
        self._server: aio.Server | None = None
        self._front: GrpcFront | None = None  # tls_server_mode permissive (grpc/front.py)
        # A call's peer (``ipv4:IP:PORT``): grpcio's, or the client's behind the permissive front.
        self.peer_of: Callable[[aio.ServicerContext], str] = lambda context: context.peer() or ""
        self._answers: dict[str, asyncio.Future[Any]] = {}

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen (OSError when the port is taken)."""
        cfg = self.ctx.config
        size = cfg.grpc_message_size_max
        server = aio.server(interceptors=[NamespaceInterceptor()], options=[("grpc.so_reuseport", 0),
                                     ("grpc.max_receive_message_length", size),
                                     ("grpc.max_send_message_length", size)])
        spb_grpc.add_MessagingServiceServicer_to_server(self, server)
        host = cfg.listen_host
        where = f"[{host}]:{cfg.grpc_listen_port}" if ":" in host else f"{host}:{cfg.grpc_listen_port}"
        tls = ServerTls.of(cfg)
        permissive = tls.mode is TlsServerMode.PERMISSIVE
        try:
            if permissive:  # grpcio on loopback, the port ours (grpc/front.py)
                self.port = server.add_insecure_port("127.0.0.1:0")
            else:
                self.port = (server.add_secure_port(where, server_credentials(tls)) if tls.enabled
                             else server.add_insecure_port(where))
        except RuntimeError as e:
            raise OSError(f"the gRPC endpoint cannot listen on {where}: {e}") from None
        await server.start()
        self._server = server
        if permissive:
            front = GrpcFront(tls, host, cfg.grpc_listen_port, self.port)
            try:
                self.port = await front.start()
            except BaseException:
                await self.stop()
                raise
            self._front = front
            self.peer_of = self.access.peer_of = front.peer_of
        log.info("orbitmq grpc ready on %s:%d", self.ctx.host.store_host[0], self.port)

    async def stop(self) -> None:
        front, self._front = self._front, None
        if front is not None:
            await front.stop()
        server, self._server = self._server, None
        for session in list(self.clients.sessions.values()):
            if session.channel is not None:
                session.channel.close()
        if server is not None:
            await server.stop(STOP_GRACE_S)

    def expire_clients(self) -> int:
        return self.clients.expire()

    # -- the error boundary ---------------------------------------------------------------------
    async def _answer(self, what: str, make: Callable[[pb.Status], R], work: Awaitable[R]) -> R:
        try:
            return await work
        except ApiError as e:
            return make(status(e.code, e.message))
        except Exception:
            log.exception("gRPC %s failed", what)
            return make(status(Code.INTERNAL_SERVER_ERROR, INTERNAL_MESSAGE))

    # -- routes ---------------------------------------------------------------------------------
    def _endpoints(self) -> pb.Endpoints:
        host = self.ctx.host.store_host[0]
        try:
            ip = ipaddress.ip_address(host)
            scheme = pb.IPv4 if ip.version == 4 else pb.IPv6
        except ValueError:
            scheme = pb.DOMAIN_NAME
        return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=self.port)])

    def _broker(self) -> pb.Broker:
        return pb.Broker(name=self.ctx.config.broker_name, id=self.ctx.config.broker_id,
                         endpoints=self._endpoints())

    async def QueryRoute(self, request: spb.QueryRouteRequest, context: aio.ServicerContext,
                         ) -> spb.QueryRouteResponse:
        async def work() -> spb.QueryRouteResponse:
            self.access.admit("QueryRoute", request, context)
            _client_id(context)
            topic = resource_name(request.topic, "topic", Code.ILLEGAL_TOPIC)
            tc = self.ctx.topics.get(topic)
            if tc is None:
                raise ApiError(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
            types = _TYPES[topic_message_type(tc.attributes)]
            broker = self._broker()
            queues = []
            for qid in range(max(tc.read_queue_nums, tc.write_queue_nums)):
                readable = qid < tc.read_queue_nums and tc.perm & Perm.READ
                writable = qid < tc.write_queue_nums and tc.perm & Perm.WRITE
                perm = (pb.READ_WRITE if readable and writable else pb.READ if readable
                        else pb.WRITE if writable else pb.NONE)
                queues.append(pb.MessageQueue(topic=request.topic, id=qid, permission=perm,
                                              broker=broker, accept_message_types=types))
            return spb.QueryRouteResponse(status=OK, message_queues=queues)
        return await self._answer("QueryRoute", lambda s: spb.QueryRouteResponse(status=s), work())

    async def QueryAssignment(self, request: spb.QueryAssignmentRequest,
                              context: aio.ServicerContext) -> spb.QueryAssignmentResponse:
        async def work() -> spb.QueryAssignmentResponse:
            self.access.admit("QueryAssignment", request, context)
            _client_id(context)
            topic = resource_name(request.topic, "topic", Code.ILLEGAL_TOPIC)
            resource_name(request.group, "consumer group", Code.ILLEGAL_CONSUMER_GROUP)
            tc = self.ctx.topics.get(topic)
            if tc is None:
                raise ApiError(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
            if not tc.perm & Perm.READ or tc.read_queue_nums <= 0:
                return spb.QueryAssignmentResponse(status=OK)
            queue = pb.MessageQueue(topic=request.topic, id=-1, permission=pb.READ_WRITE,
                                    broker=self._broker(),
                                    accept_message_types=_TYPES[topic_message_type(tc.attributes)])
            return spb.QueryAssignmentResponse(status=OK, assignments=[pb.Assignment(message_queue=queue)])
        return await self._answer("QueryAssignment",
                                  lambda s: spb.QueryAssignmentResponse(status=s), work())

    # -- clients --------------------------------------------------------------------------------
    async def Heartbeat(self, request: spb.HeartbeatRequest, context: aio.ServicerContext,
                        ) -> spb.HeartbeatResponse:
        async def work() -> spb.HeartbeatResponse:
            self.access.admit("Heartbeat", request, context)
            client_id = _client_id(context)
            if request.client_type not in pb.ClientType.values() or \
                    request.client_type == pb.CLIENT_TYPE_UNSPECIFIED:
                raise ApiError(Code.UNRECOGNIZED_CLIENT_TYPE, f"client type {request.client_type} is unknown")
            group = None
            if request.HasField("group") and request.group.name:
                group = resource_name(request.group, "consumer group", Code.ILLEGAL_CONSUMER_GROUP)
                self.pop.group_config(group)  # created when auto-creation is on
            self.clients.touch(client_id, request.client_type, group)
            return spb.HeartbeatResponse(status=OK)
        return await self._answer("Heartbeat", lambda s: spb.HeartbeatResponse(status=s), work())

    async def NotifyClientTermination(self, request: spb.NotifyClientTerminationRequest,
                                      context: aio.ServicerContext,
                                      ) -> spb.NotifyClientTerminationResponse:
        async def work() -> spb.NotifyClientTerminationResponse:
            self.access.admit("NotifyClientTermination", request, context)
            self.clients.terminated(_client_id(context))
            return spb.NotifyClientTerminationResponse(status=OK)
        return await self._answer("NotifyClientTermination",
                                  lambda s: spb.NotifyClientTerminationResponse(status=s), work())

    # -- producing ------------------------------------------------------------------------------
    async def SendMessage(self, request: spb.SendMessageRequest, context: aio.ServicerContext,
                          ) -> spb.SendMessageResponse:
        async def work() -> spb.SendMessageResponse:
            self.access.admit("SendMessage", request, context)
            _client_id(context)
            return await self.producing.send(request, _peer_ip(self.peer_of(context)))
        return await self._answer("SendMessage", lambda s: spb.SendMessageResponse(status=s), work())

    async def EndTransaction(self, request: spb.EndTransactionRequest,
                             context: aio.ServicerContext) -> spb.EndTransactionResponse:
        async def work() -> spb.EndTransactionResponse:
            self.access.admit("EndTransaction", request, context)
            client_id = _client_id(context)
            session = self.clients.sessions.get(client_id)
            channel = session.channel if session is not None and session.channel is not None \
                else TelemetryChannel(client_id, self.peer_of(context), 0)
            return await self.producing.end_transaction(request, channel)
        return await self._answer("EndTransaction",
                                  lambda s: spb.EndTransactionResponse(status=s), work())

    async def RecallMessage(self, request: spb.RecallMessageRequest,
                            context: aio.ServicerContext) -> spb.RecallMessageResponse:
        async def work() -> spb.RecallMessageResponse:
            self.access.admit("RecallMessage", request, context)
            _client_id(context)
            return await self.producing.recall(request, _peer_ip(self.peer_of(context)))
        return await self._answer("RecallMessage", lambda s: spb.RecallMessageResponse(status=s),
                                  work())

    # -- consuming ------------------------------------------------------------------------------
    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest,
                             context: aio.ServicerContext,
                             ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        try:
            self.access.admit("ReceiveMessage", request, context)
            client_id = _client_id(context)
            async for response in self.consuming.receive(request, client_id):
                yield response
        except ApiError as e:
            yield spb.ReceiveMessageResponse(status=status(e.code, e.message))
        except Exception:
            log.exception("gRPC ReceiveMessage failed")
            yield spb.ReceiveMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, INTERNAL_MESSAGE))

    async def AckMessage(self, request: spb.AckMessageRequest, context: aio.ServicerContext,
                         ) -> spb.AckMessageResponse:
        async def work() -> spb.AckMessageResponse:
            self.access.admit("AckMessage", request, context)
            _client_id(context)
            return await self.consuming.ack(request)
        return await self._answer("AckMessage", lambda s: spb.AckMessageResponse(status=s), work())

    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest,
                                      context: aio.ServicerContext,
                                      ) -> spb.ChangeInvisibleDurationResponse:
        async def work() -> spb.ChangeInvisibleDurationResponse:
            self.access.admit("ChangeInvisibleDuration", request, context)
            _client_id(context)
            return self.consuming.change_invisible(request)
        return await self._answer("ChangeInvisibleDuration",
                                  lambda s: spb.ChangeInvisibleDurationResponse(status=s), work())

    async def ForwardMessageToDeadLetterQueue(
            self, request: spb.ForwardMessageToDeadLetterQueueRequest,
            context: aio.ServicerContext) -> spb.ForwardMessageToDeadLetterQueueResponse:
        async def work() -> spb.ForwardMessageToDeadLetterQueueResponse:
            self.access.admit("ForwardMessageToDeadLetterQueue", request, context)
            _client_id(context)
            return await self.consuming.forward_to_dlq(request)
        return await self._answer("ForwardMessageToDeadLetterQueue",
                                  lambda s: spb.ForwardMessageToDeadLetterQueueResponse(status=s), work())

    async def SyncLiteSubscription(self, request: spb.SyncLiteSubscriptionRequest,
                                   context: aio.ServicerContext) -> spb.SyncLiteSubscriptionResponse:
        async def work() -> spb.SyncLiteSubscriptionResponse:
            self.access.admit("SyncLiteSubscription", request, context)
            client_id = _client_id(context)
            if self.lite is None:
                raise ApiError(Code.NOT_IMPLEMENTED, "lite topics are not served here")
            return self.lite.sync(request, client_id)
        return await self._answer("SyncLiteSubscription",
                                  lambda s: spb.SyncLiteSubscriptionResponse(status=s), work())

    # -- what OrbitMQ does not offer ------------------------------------------------------------
    # (checked as any call is: a caller with no right to ask learns nothing more)
    async def PullMessage(self, request: Any, context: aio.ServicerContext) -> AsyncIterator[Any]:
        yield self._not_offered("PullMessage", request, context, spb.PullMessageResponse)

    async def UpdateOffset(self, request: Any, context: aio.ServicerContext) -> Any:
        return self._not_offered("UpdateOffset", request, context, spb.UpdateOffsetResponse)

    async def GetOffset(self, request: Any, context: aio.ServicerContext) -> Any:
        return self._not_offered("GetOffset", request, context, spb.GetOffsetResponse)

    async def QueryOffset(self, request: Any, context: aio.ServicerContext) -> Any:
        return self._not_offered("QueryOffset", request, context, spb.QueryOffsetResponse)



    def _not_offered(self, rpc: str, request: Any, context: aio.ServicerContext,
                     response: Callable[..., R]) -> R:
        try:
            self.access.admit(rpc, request, context)
        except ApiError as e:
            return response(status=status(e.code, e.message))
        return response(status=_not_offered(rpc))

    # -- telemetry ------------------------------------------------------------------------------
    async def Telemetry(self, request_iterator: AsyncIterator[spb.TelemetryCommand],
                        context: aio.ServicerContext) -> AsyncIterator[spb.TelemetryCommand]:
        try:
            principal = self.access.admit("Telemetry", None, context)
        except ApiError as e:
            # The refusal as the stream's first answer (the protocol's way), then the stream
            # ends with the gRPC status a client logs (the Python client skips status-only
            # answers).
            yield spb.TelemetryCommand(status=status(e.code, e.message))
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, e.message)
            return
        try:
            client_id = _client_id(context)
        except ApiError as e:
            yield spb.TelemetryCommand(status=status(e.code, e.message))
            return
        channel = TelemetryChannel(client_id, self.peer_of(context),
                                   self.ctx.config.store.max_message_size)
        self.clients.attach(client_id, channel)
        reader = asyncio.ensure_future(self._read_telemetry(client_id, channel, request_iterator,
                                                            principal))
        try:
            while True:
                command = await channel.outbox.get()
                if command is None:
                    break
                yield command
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            self.clients.detach(client_id, channel)

    async def _read_telemetry(self, client_id: str, channel: TelemetryChannel,
                              requests: AsyncIterator[spb.TelemetryCommand],
                              principal: Principal | None) -> None:
        try:
            async for command in requests:
                self.clients.touch(client_id)
                kind = command.WhichOneof("command")
                if kind == "settings":
                    channel.push(self._settings_answer(client_id, command, principal))
                elif kind in ("thread_stack_trace", "verify_message_result"):
                    self._client_answered(client_id, kind, getattr(command, kind))
                else:
                    channel.push(spb.TelemetryCommand(status=status(
                        Code.NOT_IMPLEMENTED, f"telemetry command {kind} is not one a client sends")))
        except (grpc.RpcError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("telemetry stream of %s failed", client_id)
        finally:
            channel.close()

    def _settings_answer(self, client_id: str, command: spb.TelemetryCommand,
                         principal: Principal | None) -> spb.TelemetryCommand:
        try:
            self.access.authorize(principal, "Telemetry", command)
            answer = self._settings(client_id, command.settings)
        except ApiError as e:
            return spb.TelemetryCommand(status=status(e.code, e.message))
        return spb.TelemetryCommand(status=OK, settings=answer)

    def _settings(self, client_id: str, got: pb.Settings) -> pb.Settings:
        out = pb.Settings()
        out.CopyFrom(got)
        kind = got.WhichOneof("pub_sub")
        if kind == "publishing":
            topics = [resource_name(t, "topic", Code.ILLEGAL_TOPIC) for t in got.publishing.topics]
            self.clients.touch(client_id, got.client_type or pb.PRODUCER)
            self.clients.publishes(client_id, topics)
            out.publishing.max_body_size = self.ctx.config.store.max_message_size
            out.publishing.validate_message_type = True
            out.backoff_policy.CopyFrom(pb.RetryPolicy(
                max_attempts=SEND_ATTEMPTS, exponential_backoff=pb.ExponentialBackoff(
                    initial=to_duration(10), max=to_duration(1000), multiplier=2.0)))
        elif kind == "subscription":
            group = resource_name(got.subscription.group, "consumer group", Code.ILLEGAL_CONSUMER_GROUP)
            cfg = self.pop.group_config(group)
            self.clients.touch(client_id, got.client_type, group)
            sub = out.subscription
            sub.fifo = cfg.consume_message_orderly
            if got.client_type in _LITE_CONSUMERS and self.lite is not None:
                sub.fifo = True  # each lite topic in order
                sub.lite_subscription_quota = self.lite.subscription_quota
                sub.max_lite_topic_size = self.lite.name_max
            sub.receive_batch_size = RECEIVE_BATCH_MAX
            asked = got.subscription.long_polling_timeout
            poll = asked.seconds * 1000 if got.subscription.HasField("long_polling_timeout") else 20_000
            sub.long_polling_timeout.CopyFrom(to_duration(min(max(poll, 0), self.ctx.config.grpc_long_polling_max_ms)))
            delays = [to_duration(ms) for ms in self.ctx.store.delay_levels_ms] or [to_duration(1000)]
            out.backoff_policy.CopyFrom(pb.RetryPolicy(
                max_attempts=cfg.retry_max_times + 1,
                customized_backoff=pb.CustomizedBackoff(next=delays)))
        out.metric.CopyFrom(pb.Metric(on=False))
        return out

    # -- commands to clients --------------------------------------------------------------------
    def _client_answered(self, client_id: str, kind: str, answer: Any) -> None:
        log.info("client %s answered %s nonce=%s", client_id, kind, answer.nonce)
        waiter = self._answers.pop(answer.nonce, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    async def _ask(self, client_id: str, command: spb.TelemetryCommand, nonce: str) -> Any:
        session = self.clients.sessions.get(client_id)
        if session is None or session.channel is None or not session.channel.push(command):
            raise ApiError(Code.NOT_FOUND, f"client {client_id} has no open telemetry stream")
        waiter = self._answers[nonce] = asyncio.get_running_loop().create_future()
        try:
            return await asyncio.wait_for(waiter, TELEMETRY_ANSWER_WAIT_S)
        finally:
            self._answers.pop(nonce, None)

    async def print_stack(self, client_id: str) -> str:
        """Ask a client for its threads' stack traces (PrintThreadStackTraceCommand)."""
        nonce = uuid.uuid4().hex
        answer = await self._ask(client_id, spb.TelemetryCommand(
            print_thread_stack_trace_command=spb.PrintThreadStackTraceCommand(nonce=nonce)), nonce)
        return str(answer.thread_stack_trace)

    async def verify(self, client_id: str, message: pb.Message) -> None:
        """Ask a client to consume one message as a check (VerifyMessageCommand)."""
        nonce = uuid.uuid4().hex
        await self._ask(client_id, spb.TelemetryCommand(
            verify_message_command=spb.VerifyMessageCommand(nonce=nonce, message=message)), nonce)


def _not_offered(call: str) -> pb.Status:
    return status(Code.NOT_IMPLEMENTED, f"{call} is not offered by OrbitMQ's gRPC endpoint "
                                        "(see docs/rocketmq5.md)")
