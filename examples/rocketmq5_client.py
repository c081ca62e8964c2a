"""The official RocketMQ 5 Python client against OrbitMQ (docs/rocketmq5.md).

Run it with a Python that has `rocketmq-python-client` 5.1.x (`make install` prepares
.venv-rmq5), after creating its topics:

    orbitmq topic create -t Orders
    orbitmq topic create -t Reminders --attributes +message.type=DELAY
    .venv-rmq5/bin/python examples/rocketmq5_client.py 127.0.0.1:8081

It sends an order and a reminder due 3 s later, then receives and acks both with a
SimpleConsumer.
"""

import sys
import time

from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,
                      SimpleConsumer)

endpoint = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8081"
config = ClientConfiguration(endpoint, Credentials())

producer = Producer(config, ("Orders", "Reminders"))
producer.startup()
order = Message()
order.topic, order.body, order.tag = "Orders", b"order 17 created", "created"
order.keys = "order-17"
print("sent order", producer.send(order).message_id is not None)
reminder = Message()
reminder.topic, reminder.body = "Reminders", b"pay order 17"
reminder.delivery_timestamp = int(time.time()) + 3  # whole seconds, as this client sends them
print("sent reminder", producer.send(reminder).message_id is not None)
producer.shutdown()

consumer = SimpleConsumer(config, "OrderWorkers",
                          {"Orders": FilterExpression("created"), "Reminders": FilterExpression()},
                          await_duration=5)
consumer.startup()
seen = []
for _ in range(10):  # each receive long-polls up to 5 s
    for message in consumer.receive(16, 30):  # up to 16 messages, invisible for 30 s
        seen.append(message.body.decode())
        consumer.ack(message)
    if len(seen) == 2:
        break
consumer.shutdown()
print("received", sorted(seen))
