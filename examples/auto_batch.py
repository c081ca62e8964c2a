"""Many concurrent sends, few requests (auto-batching): run `make run` in another shell first.

    .venv/bin/python examples/auto_batch.py [NAMESRV]
"""

import asyncio
import sys

from orbitmq import AsyncProducer, Message

namesrv = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9876"


async def main() -> None:
    async with AsyncProducer("order-service", namesrv, auto_batch=True) as producer:
        window = asyncio.Semaphore(256)  # at most 256 sends awaiting their receipt

        async def send(i: int):
            async with window:
                msg = Message("BatchedOrders", b'{"order": %d}' % i, tags="created", keys=[f"order-{i}"])
                return await producer.send(msg)  # this message's own SendResult

        results = await asyncio.gather(*(send(i) for i in range(1000)))
    print(len(results), "messages in", len({r.queue for r in results}), "queues")
    for r in results[:2]:
        print(r.status, r.msg_id, r.offset_msg_id, r.queue.queue_id, r.queue_offset)


asyncio.run(main())
