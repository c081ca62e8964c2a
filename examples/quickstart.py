"""Send one message and read that message back: run `make run` in another shell first.

    .venv/bin/python examples/quickstart.py [NAMESRV]
"""

import sys

from orbitmq import Message, Producer, PullConsumer

namesrv = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9876"

with Producer("order-service", namesrv=namesrv) as producer:
    result = producer.send(Message("QuickStart", b'{"order": 18}', tags="created", keys=["order-18"]))
    print(result.status, result.msg_id, result.queue, result.queue_offset)

with PullConsumer("quickstart-audit", namesrv=namesrv) as consumer:
    # The queue and offset the send answered: this message, whatever the topic held before.
    pulled = consumer.pull(result.queue, offset=result.queue_offset, max_nums=1, expression="created")
    for msg in pulled.messages:
        print(msg.queue_id, msg.queue_offset, msg.tags, msg.keys, msg.body)
