"""The limits of a remoting server over real sockets on 127.0.0.1 (transport/limits.py): idle
connections and slow frames closed by the sweep, connection counts refused at accept, partial
frames under a shared budget. Each test names its own bound."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand, encode
from orbitmq.protocol.frame import BIG_FRAME_START_BYTES, FrameDecoder
from orbitmq.transport import RemotingServer, run
from orbitmq.transport.limits import ConnectionLimits

ECHO = 9001
CLOSE_BOUND_S = 3.0  # every "is closed" below is waited for this long at most


def make_server(**limits: int) -> RemotingServer:
    server = RemotingServer("127.0.0.1", 0, name="test", limits=ConnectionLimits(**limits))
    server.register(ECHO, lambda cmd, conn: cmd.response(ResponseCode.SUCCESS))
    return server


def echo_frame() -> bytes:
    return encode(RemotingCommand(code=ECHO, opaque=7))


async def closed_within(reader: asyncio.StreamReader, bound_s: float) -> float:
    """Seconds until the server closed the connection (EOF or reset); fails past ``bound_s``."""
    start = time.monotonic()
    try:
        while await asyncio.wait_for(reader.read(65536), bound_s):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - start


async def answered(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(echo_frame())
    await writer.drain()
    (length,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 2))
    return FrameDecoder().feed(struct.pack(">i", length) + await reader.readexactly(length)) != []


def test_an_idle_connection_is_closed_and_a_talking_one_stays():
    async def main() -> None:
        server = make_server(channel_max_idle_ms=300, frame_read_timeout_ms=0)
        await server.start()
        try:
            _, idle_w = idle = await asyncio.open_connection("127.0.0.1", server.port)
            talking = await asyncio.open_connection("127.0.0.1", server.port)
            closed = asyncio.ensure_future(closed_within(idle[0], CLOSE_BOUND_S))
            for _ in range(8):  # 0.8 s of a request every 100 ms: never idle 300 ms
                assert await answered(*talking)
                await asyncio.sleep(0.1)
            assert 0.25 < await closed < CLOSE_BOUND_S
            assert await answered(*talking)
            assert server.limit_counters.counts["channel_idle"] == 1
            idle_w.close()
            talking[1].close()
        finally:
            await server.stop()

    run(main())


def test_a_loop_that_stood_still_counts_that_time_for_no_connection():
    """A pause of the server's process (or a step of its clock) is no peer's silence: the
    sweeps after it must not close a connection for the time the loop could not hear it (a
    client's next request on it then met a closed connection). The idle limit goes on counting
    from the pause's end."""
    async def main() -> None:
        server = make_server(channel_max_idle_ms=300, frame_read_timeout_ms=0)
        discounted: list[float] = []
        server.on_discount(discounted.append)  # the broker's heartbeat table listens so
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            assert await answered(reader, writer)
            time.sleep(1.6)  # the whole loop stands still, past the limit and SWEEP_LATE_MAX_S
            await asyncio.sleep(0.1)  # sweeps run (one each 30 ms here); 0.1 s idle is no 0.3
            assert discounted and discounted[0] > 1.4
            assert await answered(reader, writer)
            assert server.limit_counters.counts["channel_idle"] == 0
            assert 0.25 < await closed_within(reader, CLOSE_BOUND_S) < CLOSE_BOUND_S
            assert server.limit_counters.counts["channel_idle"] == 1
            writer.close()
        finally:
            await server.stop()

    run(main())


def test_a_scan_that_runs_before_the_sweep_has_the_stall_discounted_once():
    """After a stall the broker's client scan may come due before the sweep: it asks the server
    (check_stall) first, so that no heartbeat table judges silences with the stall in them, and
    the sweep then finds nothing left to discount."""
    async def main() -> None:
        server = make_server(channel_max_idle_ms=300, frame_read_timeout_ms=0)
        discounted: list[float] = []
        server.on_discount(discounted.append)
        await server.start()
        try:
            await asyncio.sleep(0.05)
            time.sleep(1.6)  # the loop stands still
            server.check_stall()  # as a scan due before the sweep's timer does
            assert len(discounted) == 1 and discounted[0] > 1.4
            await asyncio.sleep(0.2)  # sweeps run (one each 30 ms here)
            assert len(discounted) == 1
        finally:
            await server.stop()

    run(main())


def test_a_slow_sender_is_closed_when_its_frame_takes_too_long():
    async def main() -> None:
        server = make_server(channel_max_idle_ms=0, frame_read_timeout_ms=400)
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            frame = echo_frame()
            closed = asyncio.ensure_future(closed_within(reader, CLOSE_BOUND_S))
            started = time.monotonic()
            for byte in frame[:-1]:  # one byte every 50 ms: never idle, never whole
                if closed.done():
                    break
                writer.write(bytes([byte]))
                await asyncio.sleep(0.05)
            took = await closed
            assert time.monotonic() - started < 0.4 + 1.0  # the limit and a sweep or two
            assert took < CLOSE_BOUND_S
            assert server.limit_counters.counts["frame_read_timeout"] == 1
            # Whole frames at any pace are no slow frame: a steady client stays.
            steady = await asyncio.open_connection("127.0.0.1", server.port)
            for _ in range(6):
                assert await answered(*steady)
                await asyncio.sleep(0.1)
            writer.close()
            steady[1].close()
        finally:
            await server.stop()

    run(main())


def test_connections_per_ip_and_in_total_are_refused_at_accept():
    async def main() -> None:
        server = make_server(connections_per_ip_max=3, connections_max=5)
        await server.start()
        opened: list[asyncio.StreamWriter] = []

        async def connect(local: str = "127.0.0.1") -> tuple[asyncio.StreamReader,
                                                             asyncio.StreamWriter]:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port,
                                                           local_addr=(local, 0))
            opened.append(writer)
            return reader, writer

        try:
            kept = [await connect() for _ in range(3)]
            for conn in kept:
                assert await answered(*conn)
            refused, _ = await connect()
            assert await closed_within(refused, CLOSE_BOUND_S) < CLOSE_BOUND_S
            assert server.limit_counters.counts["connections_per_ip_max"] == 1
            # Another address of this machine has its own count, until the total is reached.
            for conn in [await connect("127.0.0.2") for _ in range(2)]:
                assert await answered(*conn)
            refused, _ = await connect("127.0.0.3")
            assert await closed_within(refused, CLOSE_BOUND_S) < CLOSE_BOUND_S
            assert server.limit_counters.counts["connections_max"] == 1
            # One leaves: the next one of its address is let in.
            kept[0][1].close()
            deadline = time.monotonic() + CLOSE_BOUND_S
            while server.gate.by_host.get("127.0.0.1") != 2:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            assert await answered(*await connect())
            assert server.gate.total == 5
        finally:
            for writer in opened:
                writer.close()
            await server.stop()

    run(main())


def test_a_length_word_reserves_nothing_and_partial_frames_share_a_budget():
    async def main() -> None:
        budget = 2 * 1024 * 1024
        server = make_server(frame_buffer_budget_bytes=budget)
        await server.start()
        opened: list[asyncio.StreamWriter] = []

        async def connect_and_send(data: bytes) -> asyncio.StreamReader:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            opened.append(writer)
            writer.write(data)
            await writer.drain()
            return reader

        async def held_at_least(n: int) -> None:
            deadline = time.monotonic() + CLOSE_BOUND_S
            while server.budget.held_bytes < n:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)

        try:
            # 9 bytes of a 16 MiB frame: the server holds what came, 64 KiB at most, not 16 MiB.
            announce = struct.pack(">i", 16 * 1024 * 1024 - 4)
            for _ in range(4):
                await connect_and_send(announce)
            await held_at_least(4 * 4)  # read: the next read goes where the frame will be
            for writer in opened:
                writer.write(b"\x00" * 5)
            deadline = time.monotonic() + CLOSE_BOUND_S
            while server.budget.held_bytes < 4 * BIG_FRAME_START_BYTES:
                assert time.monotonic() < deadline, server.budget.held_bytes
                await asyncio.sleep(0.01)
            assert server.budget.held_bytes == 4 * BIG_FRAME_START_BYTES
            # 300 KiB of a big frame: at most twice that held each.
            for i in range(2):
                await connect_and_send(announce + b"\x00" * (300 * 1024))
                await held_at_least(4 * BIG_FRAME_START_BYTES + (i + 1) * 300 * 1024)
            held = server.budget.held_bytes
            assert held <= 4 * BIG_FRAME_START_BYTES + 2 * 600 * 1024
            # 1.5 MiB more on a seventh connection would pass the budget: that one is closed.
            greedy = await connect_and_send(announce + b"\x00" * (1536 * 1024))
            assert await closed_within(greedy, CLOSE_BOUND_S) < CLOSE_BOUND_S
            assert server.limit_counters.counts["frame_buffer_budget"] == 1
            assert server.budget.held_bytes == held <= budget
            assert len(server.connections) == 6  # the others stay
            for writer in opened:
                writer.close()
            deadline = time.monotonic() + CLOSE_BOUND_S
            while server.budget.held_bytes:  # every charge is given back as they close
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
        finally:
            for writer in opened:
                writer.close()
            await server.stop()

    run(main())


@pytest.mark.parametrize("size", [300 * 1024, 5 * 1024 * 1024 + 3])
def test_a_big_frame_in_pieces_still_arrives_whole(size: int):
    """The buffer of a big frame grows with what arrives: the body comes out intact."""
    async def main() -> None:
        server = RemotingServer("127.0.0.1", 0, name="test")
        server.register(ECHO, lambda cmd, conn: cmd.response(
            ResponseCode.SUCCESS, ext_fields={"n": str(len(cmd.body)), "sum": str(sum(cmd.body[::4099]))}))
        await server.start()
        try:
            body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
            frame = encode(RemotingCommand(code=ECHO, opaque=9, body=body))
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            for i in range(0, len(frame), 70_000):
                writer.write(frame[i : i + 70_000])
                await writer.drain()
            (length,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
            [resp] = FrameDecoder().feed(struct.pack(">i", length) + await reader.readexactly(length))
            assert resp.ext_fields == {"n": str(size), "sum": str(sum(body[::4099]))}
            assert server.budget.held_bytes == 0
            writer.close()
        finally:
            await server.stop()

    run(main())
