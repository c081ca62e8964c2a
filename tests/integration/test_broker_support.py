"""Shared pieces of the broker integration tests: a real broker on a background event loop and
raw remoting requests to it (the SDK is not used: these tests pin the wire behaviour).

Imported by the other ``test_broker_*`` modules; its one test checks the harness itself.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import struct
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from orbitmq.assembly import build_broker
from orbitmq.config import TEST_MIN_STORE, BrokerConfig
from orbitmq.protocol.batch import encode_batch
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand, decode_command
from orbitmq.protocol.headers import PullMessageRequestHeader, PullSysFlag, SendMessageRequestHeader
from orbitmq.protocol.message import MessageExt, PropertyKey
from orbitmq.protocol.stored import iter_stored_messages
from orbitmq.transport import LoopThread, RemotingClient

T = TypeVar("T")

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


def broker_config(store_dir: Path | str, **overrides: Any) -> BrokerConfig:
    """A broker on 127.0.0.1, port 0, with the tiny TEST_MIN store under ``store_dir``."""
    store = dataclasses.replace(TEST_MIN_STORE, store_path=str(store_dir))
    overrides.setdefault("grpc_listen_port", 0)  # the default 8081 would collide between tests
    overrides.setdefault("broker_fast_failure_enable", False)  # the host's load: no SYSTEM_BUSY
    return BrokerConfig(listen_port=0, store=store, **overrides)


def props_string(props: dict[str, str]) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items())


class BrokerHarness:
    """A started broker and a RemotingClient, both on one LoopThread; blocking helpers."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.loop = LoopThread("broker-test")
        self.broker = build_broker(config)
        self.client = RemotingClient()
        try:
            self.call(self.broker.start())
        except BaseException:
            self.loop.stop()
            raise

    @property
    def addr(self) -> str:
        return self.broker.address

    @property
    def port(self) -> int:
        return int(self.addr.rpartition(":")[2])

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return self.loop.call(coro, timeout)

    def on_loop(self, fn: Callable[[], T]) -> T:
        """Run a plain function on the broker's loop (the broker's tables are loop-owned)."""

        async def run() -> T:
            return fn()

        return self.call(run())

    def invoke(self, code: int, fields: dict[str, str] | None = None, body: bytes = b"",
               timeout: float = 5.0, client: RemotingClient | None = None) -> RemotingCommand:
        cmd = RemotingCommand.request(code, fields, body)
        return self.call((client or self.client).invoke(self.addr, cmd, timeout), timeout + 5)

    # -- sends ----------------------------------------------------------------------------------
    def send_header(self, topic: str, queue_id: int = 0, props: dict[str, str] | None = None,
                    *, batch: bool = False, group: str = "test-producer") -> SendMessageRequestHeader:
        return SendMessageRequestHeader(
            producer_group=group, topic=topic, default_topic="TBW102", default_topic_queue_nums=4,
            queue_id=queue_id, sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0,
            properties=props_string(props or {}), batch=batch,
        )

    def send(self, topic: str, body: bytes, *, tags: str | None = None, keys: str | None = None,
             queue_id: int = 0, code: int = RequestCode.SEND_MESSAGE,
             props: dict[str, str] | None = None) -> RemotingCommand:
        """One message; code 310 uses the short V2 header names."""
        all_props = dict(props or {})
        if tags:
            all_props[PropertyKey.TAGS] = tags
        if keys:
            all_props[PropertyKey.KEYS] = keys
        h = self.send_header(topic, queue_id, all_props)
        fields = h.to_v2_ext_fields() if code == RequestCode.SEND_MESSAGE_V2 else h.to_ext_fields()
        return self.invoke(code, fields, body)

    def send_ok(self, topic: str, body: bytes, **kw: Any) -> RemotingCommand:
        r = self.send(topic, body, **kw)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        return r

    def send_batch(self, topic: str, entries: list[tuple[bytes, dict[str, str]]], *, queue_id: int = 0,
                   code: int = RequestCode.SEND_BATCH_MESSAGE) -> RemotingCommand:
        """A batch: over 320 with V2 names (Java), or over 10 with batch=1 (the C++ client)."""
        body = encode_batch((0, b, p) for b, p in entries)
        h = self.send_header(topic, queue_id, {PropertyKey.WAIT: "true"}, batch=True)
        fields = h.to_ext_fields() if code == RequestCode.SEND_MESSAGE else h.to_v2_ext_fields()
        return self.invoke(code, fields, body)

    # -- pulls ----------------------------------------------------------------------------------
    def pull_fields(self, topic: str, queue_id: int, offset: int, *, group: str = "test-group",
                    expression: str = "*", max_nums: int = 32, suspend_ms: int = 0,
                    commit_offset: int = -1) -> dict[str, str]:
        sys_flag = PullSysFlag.SUBSCRIPTION
        if suspend_ms:
            sys_flag |= PullSysFlag.SUSPEND
        if commit_offset >= 0:
            sys_flag |= PullSysFlag.COMMIT_OFFSET
        return PullMessageRequestHeader(
            consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset,
            max_msg_nums=max_nums, sys_flag=int(sys_flag), commit_offset=commit_offset,
            suspend_timeout_millis=suspend_ms, subscription=expression,
        ).to_ext_fields()

    def pull(self, topic: str, queue_id: int, offset: int, *, timeout: float = 5.0,
             **kw: Any) -> tuple[RemotingCommand, list[MessageExt]]:
        r = self.invoke(RequestCode.PULL_MESSAGE, self.pull_fields(topic, queue_id, offset, **kw),
                        timeout=timeout)
        msgs = list(iter_stored_messages(r.body)) if r.body else []
        return r, msgs

    def pull_all(self, topic: str, queue_id: int, **kw: Any) -> list[MessageExt]:
        """Pull from offset 0 until PULL_NOT_FOUND, like the C++ PullConsumer (after waiting for
        the store to dispatch what was sent: queues are built asynchronously, as in RocketMQ)."""
        self.wait_dispatched()
        offset, out = 0, []
        for _ in range(10_000):
            r, msgs = self.pull(topic, queue_id, offset, **kw)
            out += msgs
            if r.code == ResponseCode.PULL_NOT_FOUND:
                return out
            nxt = int(r.ext_fields["nextBeginOffset"])
            assert nxt != offset, f"pull at {offset} answered {r.code} without moving on"
            offset = nxt
        raise AssertionError("pull loop did not end")

    def wait_dispatched(self) -> None:
        assert self.broker.store.wait_dispatched(5.0)

    # -- lifecycle ------------------------------------------------------------------------------
    def restart(self) -> None:
        """Stop the broker cleanly and start a new one on the same store directory."""
        self.call(self.client.close())
        self.call(self.broker.stop())
        self.broker = build_broker(self.config)
        self.client = RemotingClient()
        self.call(self.broker.start())

    def close(self) -> None:
        try:
            self.call(self.client.close())
            self.call(self.broker.stop())
        finally:
            self.loop.stop()


class RawConnection:
    """A plain TCP socket speaking frames by hand: for captured client frames and bad input.

    Frames are split here (not by FrameDecoder) so that tests see each response header's JSON as
    it was sent: ``header_json`` tells whether an extField went out as a string or a number.
    """

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.timeout = timeout
        self._buffer = bytearray()
        self.requests: list[RemotingCommand] = []  # requests the broker sent us (notifications)
        self.header_json: dict[str, Any] = {}  # raw header of the last command returned

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _split(self) -> bytes | None:
        if len(self._buffer) < 4:
            return None
        (total,) = struct.unpack_from(">i", self._buffer)
        if len(self._buffer) < 4 + total:
            return None
        frame = bytes(self._buffer[4 : 4 + total])
        del self._buffer[: 4 + total]
        return frame

    def next_command(self) -> RemotingCommand | None:
        """The next frame from the broker; None once it closed the connection."""
        deadline = time.monotonic() + self.timeout
        frame = self._split()
        while frame is None:
            if time.monotonic() > deadline:
                raise AssertionError("no frame and no close within the timeout")
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                return None
            if not data:
                return None
            self._buffer += data
            frame = self._split()
        header_length = struct.unpack_from(">I", frame)[0] & 0xFFFFFF
        self.header_json = json.loads(frame[4 : 4 + header_length])
        return decode_command(frame)

    def response(self) -> RemotingCommand | None:
        """The next response (requests from the broker are kept in ``requests``)."""
        while True:
            cmd = self.next_command()
            if cmd is None or cmd.is_response:
                return cmd
            self.requests.append(cmd)

    def is_closed_by_peer(self) -> bool:
        try:
            return self.next_command() is None
        except AssertionError:
            return False

    def close(self) -> None:
        self.sock.close()


def length_prefix(total: int) -> bytes:
    return struct.pack(">i", total)


def test_harness_starts_serves_and_stops(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="orbitmq.broker")
    h = BrokerHarness(broker_config(tmp_path))
    try:
        assert h.addr.startswith("127.0.0.1:") and h.port > 0
        assert f"orbitmq broker ready on {h.addr}" in caplog.messages
        r = h.send_ok("HarnessTopic", b"hello")
        assert r.ext_fields["queueOffset"] == "0"
        assert [m.body for m in h.pull_all("HarnessTopic", 0)] == [b"hello"]
    finally:
        h.close()
