"""A baseline for the end-to-end benchmark: OrbitMQ's transport answering every send at once.

It decodes each request and answers SUCCESS without storing anything, so OrbitMQ's figures divided
by this sink's show what the broker and the store cost on top of the Python network layer.
Run: python bench/ack_sink.py PORT   (prints "orbitmq sink ready on 127.0.0.1:PORT")
"""

from __future__ import annotations

import asyncio
import itertools
import sys

from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.transport import RemotingServer, run
from orbitmq.transport.connection import RemotingConnection


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    offsets = itertools.count()

    def ack(cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(
            ResponseCode.SUCCESS,
            ext_fields={"msgId": "0" * 32, "queueId": "0", "queueOffset": str(next(offsets))},
        )

    async def serve() -> None:
        server = RemotingServer("127.0.0.1", port, name="sink")
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            server.register(code, ack)
        await server.start()
        print(f"orbitmq sink ready on {server.address}", flush=True)
        await asyncio.Event().wait()

    run(serve())


if __name__ == "__main__":
    main()
