"""Send one message and read it back: run `make run` in another shell first.

    .venv/bin/python examples/quickstart.py [NAMESRV]
"""

import sys

from orbitmq import Message, Producer, PullConsumer

namesrv = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9876"

with Producer("order-service", namesrv=namesrv) as producer:
    result = producer.send(Message("OrderTopic", b'{"order": 17}', tags="created", keys=["order-17"]))
    print(result.status, result.msg_id, result.queue, result.queue_offset)

with PullConsumer("audit", namesrv=namesrv) as consumer:
    for mq in consumer.fetch_queues("OrderTopic"):
        for msg in consumer.pull(mq, offset=0, max_nums=32, expression="created").messages:
            print(mq.queue_id, msg.queue_offset, msg.tags, msg.keys, msg.body)
