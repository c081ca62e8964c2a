"""What the processor unit tests share: a real broker on a loop thread, a stand-in for the
client's end of a connection, and ``answer`` to call one handler directly.

The broker is whole (``orbitmq.assembly.build_broker``: store, tables, processors, its server on
an ephemeral 127.0.0.1 port, no name server, no gRPC); the tests call its processors' handler
methods themselves, the way processor/handlers.py's table would, with requests built from the
protocol's headers and bodies. Only the peer is a stand-in (:class:`Peer`: the attributes the
processors and the client table use). Handlers run on the broker's own event loop, as the
server runs them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import itertools
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson

from orbitmq.assembly import build_broker
from orbitmq.broker.controller import BrokerController
from orbitmq.config import TEST_MIN_STORE, BrokerConfig
from orbitmq.errors import TimeoutError as OrbitMQTimeout
from orbitmq.protocol.bodies import (
    ConsumerData,
    HeartbeatData,
    MessageModel,
    ProducerData,
    SubscriptionData,
)
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import SendMessageRequestHeader
from orbitmq.protocol.message import MessageExt
from orbitmq.protocol.properties import encode_properties
from orbitmq.protocol.stored import decode_stored_message
from orbitmq.transport.loop import LoopThread
from orbitmq.transport.server import INTERNAL_ERROR_REMARK, call_guarded

__all__ = ["Peer", "RunningBroker", "running_broker", "send_request", "heartbeat", "json_body",
           "stored_messages"]

T = TypeVar("T")
_ports = itertools.count(40001)
CALL_TIMEOUT_S = 15.0


class Peer:
    """The client's end of one connection, as the processors see it (RemotingConnection's
    ``peer``, ``peer_host``, ``attributes``, ``is_open``, ``last_received``, ``send``,
    ``send_parts``, ``invoke_oneway``, ``invoke``, ``flush``, ``close``): what the broker writes to it is
    kept in ``sent`` (answers written by the handler itself) and ``oneway`` (the broker's own
    requests: NOTIFY_CONSUMER_IDS_CHANGED...). ``replies`` answers the broker's ``invoke`` (without it, the
    invoke times out as RemotingConnection.invoke does)."""

    def __init__(self, port: int | None = None,
                 replies: Callable[[RemotingCommand], RemotingCommand] | None = None) -> None:
        self.peer_host = "127.0.0.1"
        self.peer = f"{self.peer_host}:{next(_ports) if port is None else port}"
        self.attributes: dict[str, Any] = {}
        self.is_open = True
        self.last_received = time.monotonic()
        self.sent: list[RemotingCommand] = []
        self.oneway: list[RemotingCommand] = []
        self.invoked: list[RemotingCommand] = []
        self.flushes = 0
        self.replies = replies

    def send(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)

    def send_parts(self, cmd: RemotingCommand, parts: list[bytes | memoryview]) -> None:
        self.sent.append(dataclasses.replace(cmd, body=b"".join(bytes(p) for p in parts)))

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        self.oneway.append(cmd)

    def flush(self) -> None:
        """RemotingConnection.flush: what is sent here is kept at once anyway."""
        self.flushes += 1

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        self.invoked.append(cmd)
        if self.replies is None:
            raise OrbitMQTimeout(f"no answer to request code={cmd.code} from {self.peer}")
        return self.replies(cmd)

    def close(self) -> None:
        self.is_open = False


Handler = Callable[[RemotingCommand, Any], Any]


class RunningBroker:
    """A started broker on its own loop thread; ``answer`` calls one of its handlers."""

    def __init__(self, root: Path, **settings: Any) -> None:
        store_settings = settings.pop("store", {})
        store = dataclasses.replace(TEST_MIN_STORE, store_path=str(root / "store"),
                                    **store_settings)
        config = BrokerConfig(listen_host="127.0.0.1", listen_port=0, grpc_listen_port=-1,
                              ha_listen_port=0, broker_fast_failure_enable=False, store=store,
                              **settings)
        self.loop = LoopThread("processor-tests")
        self.controller: BrokerController = build_broker(config)
        try:
            self.call(self.controller.start())
        except BaseException:
            self.loop.stop()
            raise
        self.processors = self.controller.processors
        self.peer = Peer()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the broker's loop and wait for it."""
        return self.loop.call(coro, CALL_TIMEOUT_S)

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the broker's loop (the tables and the store are the loop's)."""
        async def go() -> T:
            return fn()
        return self.call(go())

    def answer(self, handler: Handler, cmd: RemotingCommand,
               peer: Peer | None = None) -> RemotingCommand:
        """``handler(cmd, peer)`` on the broker's loop, its result taken as the server takes it
        (``call_guarded``: a BrokerError raised is its code and remark, an awaitable is
        awaited); None (the handler writes its answer itself, e.g. with ``send_parts``, maybe
        later: a held pull) is the next command written to the peer. A handler that failed
        (the server's SYSTEM_ERROR "internal error" answer) fails the test."""
        return self.answer_later(handler, cmd, peer).result(CALL_TIMEOUT_S)

    def answer_later(self, handler: Handler, cmd: RemotingCommand,
                     peer: Peer | None = None) -> concurrent.futures.Future[RemotingCommand]:
        """``answer`` without waiting for it: its future (a held pull's answer comes later)."""
        conn = self.peer if peer is None else peer

        async def go() -> RemotingCommand:
            written = len(conn.sent)
            result = call_guarded(handler, cmd, conn)  # type: ignore[arg-type]
            if inspect.isawaitable(result):
                result = await result
            if result is None:
                deadline = time.monotonic() + CALL_TIMEOUT_S
                while len(conn.sent) == written:
                    assert time.monotonic() < deadline, "the handler never answered"
                    await asyncio.sleep(0.002)
                result = conn.sent[written]
            assert isinstance(result, RemotingCommand), result
            assert not (result.remark or "").startswith(INTERNAL_ERROR_REMARK), result.remark
            return result
        return self.loop.submit(go())

    def settle(self) -> None:
        """Wait until every message stored so far is in the consume queues and the index (the
        handlers handlers.py registers ``after_dispatch`` get this wait from the table)."""
        assert self.call(self.controller.wait_dispatched()), "dispatch did not catch up"

    def stop(self) -> None:
        try:
            self.call(self.controller.stop())
        finally:
            self.loop.stop()


def running_broker(root: Path, **settings: Any) -> Iterator[RunningBroker]:
    """A fixture's body: a broker in ``root`` for the fixture's scope, stopped after it."""
    broker = RunningBroker(root, **settings)
    try:
        yield broker
    finally:
        broker.stop()


def send_request(topic: str, body: bytes = b"body", *, queue_id: int = 0,
                 properties: dict[str, str] | None = None, producer_group: str = "PG",
                 reconsume_times: int = 0, max_reconsume_times: int | None = None,
                 sys_flag: int = 0, batch: bool = False) -> RemotingCommand:
    """SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE) with the short a..n names, as Java sends it."""
    header = SendMessageRequestHeader(
        producer_group=producer_group, topic=topic, default_topic="TBW102",
        default_topic_queue_nums=4, queue_id=queue_id, sys_flag=sys_flag,
        born_timestamp=int(time.time() * 1000), flag=0,
        properties=encode_properties(properties or {}).decode() if properties else None,
        reconsume_times=reconsume_times, max_reconsume_times=max_reconsume_times, batch=batch)
    code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
    return RemotingCommand.request(code, header.to_v2_ext_fields(), body)


def json_body(resp: RemotingCommand) -> Any:
    """The answer's JSON body."""
    return orjson.loads(bytes(resp.body))



def heartbeat(client_id: str, *, consumers: dict[str, list[str]] | None = None,
              producers: list[str] | None = None,
              model: MessageModel = MessageModel.CLUSTERING) -> RemotingCommand:
    """HEART_BEAT from ``client_id``: consumer groups (group -> subscribed topics, every tag)
    and producer groups."""
    data = HeartbeatData(
        client_id,
        [ProducerData(g) for g in producers or []],
        [ConsumerData(g, message_model=model,
                      subscription_data_set=[SubscriptionData(t) for t in topics])
         for g, topics in (consumers or {}).items()])
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=data.to_json())


def stored_messages(raw: bytes | memoryview) -> list[MessageExt]:
    """The stored messages lying back to back in ``raw`` (a pull's or a query's body)."""
    data, out, pos = bytes(raw), [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos:pos + 4], "big")
        out.append(decode_stored_message(data[pos:pos + size]))
        pos += size
    return out
