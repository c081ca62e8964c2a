"""The transport's sampled request timings (RemotingServer.sample_requests): every kind of answer
a handler may give is timed and passed on as it is."""

from __future__ import annotations

import asyncio
from typing import Any

from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.transport.server import RemotingServer

CODE = 4242


class _Answer(RemotingCommand):
    """A handler's answer of a RemotingCommand subclass (a test double, a wrapper)."""

    __slots__ = ()


def _server(handler: Any) -> tuple[RemotingServer, list[tuple[int, int | None]]]:
    server = RemotingServer(name="timing-test")
    server.register(CODE, handler)
    timings: list[tuple[int, int | None]] = []
    server.sample_requests(1, lambda code, answer, seconds: timings.append((code, answer)))
    return server, timings


def test_a_sampled_answer_of_a_command_subclass_is_recorded_and_returned() -> None:
    request = RemotingCommand.request(CODE)
    answer = _Answer(code=ResponseCode.SUCCESS, opaque=request.opaque)
    server, timings = _server(lambda cmd, conn: answer)
    assert server.dispatch(request, None) is answer  # type: ignore[arg-type]
    assert timings == [(CODE, ResponseCode.SUCCESS)]


def test_a_sampled_coroutine_answer_is_timed_when_it_comes() -> None:
    request = RemotingCommand.request(CODE)

    async def handler(cmd: RemotingCommand, conn: object) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS)

    server, timings = _server(handler)

    async def main() -> RemotingCommand | None:
        result = server.dispatch(request, None)  # type: ignore[arg-type]
        assert not isinstance(result, RemotingCommand) and result is not None
        return await result

    answer = asyncio.run(main())
    assert answer is not None and answer.code == ResponseCode.SUCCESS
    assert timings == [(CODE, ResponseCode.SUCCESS)]
