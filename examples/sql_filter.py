"""Filter by message properties with SQL92: the broker delivers only the orders that match.

The broker must allow it (`enable_property_filter`): `make run` turns it on, as does
`orbitmq standalone --enable-property-filter true`. Then

    .venv/bin/python examples/sql_filter.py [NAMESRV]
"""

import sys

from orbitmq import Message, MessageSelector, Producer, PullConsumer

namesrv = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9876"

sent = {}  # queue -> the offset of this run's first message there: a second run reads its own only
with Producer("order-service", namesrv=namesrv) as producer:
    for order, (amount, region) in enumerate([(40, "eu"), (250, "eu"), (900, "us"), (120, "eu")]):
        result = producer.send(Message("SqlOrders", f"order {order}".encode(), tags="created",
                                       properties={"amount": str(amount), "region": region}))
        sent.setdefault(result.queue, result.queue_offset)

big_eu = MessageSelector.by_sql("amount > 100 AND region = 'eu'")
with PullConsumer("big-eu-orders", namesrv=namesrv) as consumer:
    for mq, offset in sent.items():
        for msg in consumer.pull(mq, offset=offset, max_nums=32, expression=big_eu).messages:
            print(msg.body.decode(), msg.properties["amount"], msg.properties["region"])
