"""The asyncio transport over real sockets on 127.0.0.1: dispatch, errors, back-pressure, reconnects."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from orbitmq.errors import BrokerError, ConnectionClosedError, TimeoutError
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand, encode
from orbitmq.protocol.frame import FrameDecoder
from orbitmq.protocol.headers import GetMaxOffsetRequestHeader
from orbitmq.transport import RemotingClient, RemotingServer, run

ECHO = 9001
SLOW = 9002
FAIL = 9003
ONEWAY = 9004
BROKER_ERR = 9005
BAD_FIELD = 9006


def make_server(**kw) -> tuple[RemotingServer, list[RemotingCommand]]:
    server = RemotingServer("127.0.0.1", 0, name="test", **kw)
    oneways: list[RemotingCommand] = []

    def echo(cmd, conn):
        return cmd.response(ResponseCode.SUCCESS, ext_fields=cmd.ext_fields, body=cmd.body)

    async def slow(cmd, conn):
        await asyncio.sleep(float(cmd.ext_fields.get("delay", "0.05")))
        return cmd.response(ResponseCode.SUCCESS, ext_fields=cmd.ext_fields)

    def fail(cmd, conn):
        raise RuntimeError("boom")

    def oneway(cmd, conn):
        oneways.append(cmd)
        return None

    def broker_err(cmd, conn):
        raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, "bad topic")

    def bad_field(cmd, conn):
        GetMaxOffsetRequestHeader.from_ext_fields(cmd.ext_fields)

    server.register(ECHO, echo)
    server.register(SLOW, slow)
    server.register(FAIL, fail)
    server.register(ONEWAY, oneway)
    server.register(BROKER_ERR, broker_err)
    server.register(BAD_FIELD, bad_field)
    server.register(RequestCode.SEND_MESSAGE, bad_field)
    return server, oneways


def test_request_response_and_errors(caplog: pytest.LogCaptureFixture):
    async def main():
        server, oneways = make_server()
        await server.start()
        client = RemotingClient()
        try:
            r = await client.invoke(server.address, RemotingCommand.request(ECHO, {"a": "1"}, b"xyz"))
            assert (r.code, r.ext_fields, bytes(r.body)) == (0, {"a": "1"}, b"xyz")
            r = await client.invoke(server.address, RemotingCommand.request(12345))
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "12345" in r.remark
            r = await client.invoke(server.address, RemotingCommand.request(FAIL))
            # our bug: SYSTEM_ERROR without our internals, the traceback in the log once
            assert r.code == ResponseCode.SYSTEM_ERROR and r.remark.startswith("internal error")
            assert "boom" not in r.remark and "RuntimeError" not in r.remark
            logged = [rec for rec in caplog.records if rec.exc_info]
            assert len(logged) == 1 and "boom" in str(logged[0].exc_info[1])
            # a field out of range: the request family's code, the field named, nothing logged
            bad = {"topic": "T", "queueId": "99999999999"}
            r = await client.invoke(server.address, RemotingCommand.request(BAD_FIELD, bad))
            assert r.code == ResponseCode.INVALID_PARAMETER and "queueId" in r.remark
            r = await client.invoke(server.address, RemotingCommand.request(
                RequestCode.SEND_MESSAGE, bad))
            assert r.code == ResponseCode.MESSAGE_ILLEGAL and "queueId" in r.remark
            assert len([rec for rec in caplog.records if rec.exc_info]) == 1
            r = await client.invoke(server.address, RemotingCommand.request(BROKER_ERR))
            assert (r.code, r.remark) == (ResponseCode.MESSAGE_ILLEGAL, "bad topic")
            await client.invoke_oneway(server.address, RemotingCommand.request(ONEWAY, {"n": "1"}))
            # A request after the oneway one on the same connection proves it was read.
            await client.invoke(server.address, RemotingCommand.request(ECHO))
            assert [c.ext_fields for c in oneways] == [{"n": "1"}]
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_concurrent_requests_are_matched_by_opaque():
    async def main():
        server, _ = make_server()
        await server.start()
        client = RemotingClient()
        try:
            delays = [0.05, 0.0, 0.03, 0.01] * 25
            reqs = [
                client.invoke(server.address, RemotingCommand.request(SLOW, {"delay": str(d), "i": str(i)}))
                for i, d in enumerate(delays)
            ]
            answers = await asyncio.gather(*reqs)
            assert [a.ext_fields["i"] for a in answers] == [str(i) for i in range(len(delays))]
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_timeout_and_reconnect_after_server_restart():
    async def main():
        server, _ = make_server()
        await server.start()
        port = server.port
        client = RemotingClient()
        try:
            with pytest.raises(TimeoutError):
                await client.invoke(server.address, RemotingCommand.request(SLOW, {"delay": "1"}), timeout=0.1)
            await server.stop()
            with pytest.raises(ConnectionClosedError):
                await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(ECHO), timeout=1)
            server2, _ = make_server()
            server2.port = port
            await server2.start()
            r = await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(ECHO), timeout=2)
            assert r.code == 0
            await server2.stop()
        finally:
            await client.close()

    run(main())


def test_a_timeout_on_a_silent_connection_closes_it_and_an_answering_one_stays():
    """A request timing out with nothing read since it was sent closes the connection (a cut path
    would otherwise wait for TCP's retransmissions); other answers meanwhile keep it open."""

    async def main():
        server, _ = make_server()
        await server.start()
        client = RemotingClient()
        try:
            first = await client.connection(server.address)
            with pytest.raises(TimeoutError):
                await client.invoke(server.address, RemotingCommand.request(SLOW, {"delay": "2"}),
                                    timeout=0.2)
            await asyncio.wait_for(asyncio.shield(first.closed), 5)  # closed by the client
            second = await client.connection(server.address)
            assert second is not first and second.is_open

            async def chatter() -> None:
                for _ in range(40):
                    await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=2)
                    await asyncio.sleep(0.02)

            talk = asyncio.create_task(chatter())
            with pytest.raises(TimeoutError):
                await client.invoke(server.address, RemotingCommand.request(SLOW, {"delay": "2"}),
                                    timeout=0.3)
            await talk
            assert second.is_open and await client.connection(server.address) is second
        finally:
            await client.close()
            await server.stop()

    run(main())


def _raw_roundtrip(port: int, payload: bytes, timeout: float = 5.0) -> tuple[list[RemotingCommand], bool]:
    """Send raw bytes; return the commands read back and whether the server closed the socket."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        decoder = FrameDecoder()
        got: list[RemotingCommand] = []
        while True:
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                return got, True
            if not data:
                return got, True
            got.extend(decoder.feed(data))


def test_garbage_closes_only_that_connection():
    async def main():
        server, _ = make_server(max_frame_size=1024 * 1024)
        await server.start()
        client = RemotingClient()
        loop = asyncio.get_running_loop()
        try:
            absurd = struct.pack(">i", 0x7FFFFFF0) + b"\x00" * 16
            got, closed = await loop.run_in_executor(None, _raw_roundtrip, server.port, absurd)
            assert got == [] and closed
            garbage = struct.pack(">ii", 12, 8) + b"{not json"
            got, closed = await loop.run_in_executor(None, _raw_roundtrip, server.port, garbage)
            assert got == [] and closed
            # A good frame, then a frame cut off mid-way: the good one is answered, then the close.
            good = encode(RemotingCommand(code=ECHO, opaque=7))
            got, closed = await loop.run_in_executor(None, _raw_roundtrip, server.port, good + good[:9])
            assert [c.opaque for c in got] == [7] and closed
            r = await client.invoke(server.address, RemotingCommand.request(ECHO, {"still": "ok"}))
            assert r.ext_fields == {"still": "ok"}
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_bounded_in_flight_still_completes_everything():
    async def main():
        server, _ = make_server(max_in_flight_per_connection=4)
        await server.start()
        client = RemotingClient()
        try:
            reqs = [
                client.invoke(server.address, RemotingCommand.request(SLOW, {"delay": "0.01", "i": str(i)}))
                for i in range(64)
            ]
            answers = await asyncio.gather(*reqs)
            assert sorted(int(a.ext_fields["i"]) for a in answers) == list(range(64))
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_server_initiated_request_reaches_client_handler():
    async def main():
        server, _ = make_server()
        seen: asyncio.Queue[RemotingCommand] = asyncio.Queue()
        await server.start()
        client = RemotingClient()
        client.register(40, lambda cmd, conn: seen.put_nowait(cmd))
        try:
            await client.invoke(server.address, RemotingCommand.request(ECHO))
            (conn,) = server.connections
            conn.invoke_oneway(RemotingCommand.request(40, {"consumerGroup": "g"}))
            cmd = await asyncio.wait_for(seen.get(), 5)
            assert cmd.ext_fields == {"consumerGroup": "g"} and cmd.is_oneway
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_a_client_handler_refuses_a_bad_field_like_a_server():
    """A server's request the client cannot parse is answered with the family's code naming the
    field (it used to be SYSTEM_ERROR with the Python exception inside)."""
    async def main():
        server, _ = make_server()
        await server.start()
        client = RemotingClient()
        client.register(39, lambda cmd, conn: GetMaxOffsetRequestHeader.from_ext_fields(cmd.ext_fields))
        try:
            await client.invoke(server.address, RemotingCommand.request(ECHO))
            (conn,) = server.connections
            r = await conn.invoke(RemotingCommand.request(39, {"topic": "T", "queueId": "-1"}), 5)
            assert r.code == ResponseCode.INVALID_PARAMETER and "queueId" in r.remark
        finally:
            await client.close()
            await server.stop()

    run(main())
