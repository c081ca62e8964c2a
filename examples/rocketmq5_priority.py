"""Priority messages with the official RocketMQ 5 Python client (docs/rocketmq5.md).

Run it with a Python that has `rocketmq-python-client` 5.1.x (`make install` prepares
.venv-rmq5), after creating its topic, one queue per priority 0..9:

    orbitmq topic create -t Tasks --read-queue-nums 10 --write-queue-nums 10 \
    --attributes +message.type=PRIORITY
    .venv-rmq5/bin/python examples/rocketmq5_priority.py 127.0.0.1:8081

It sends a backlog of 100 routine tasks (priority 0) and then one urgent task (priority 9);
a SimpleConsumer's first receive starts with the urgent one. It receives and acks them all.
"""

import sys

from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,
                      SimpleConsumer)

endpoint = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8081"
config = ClientConfiguration(endpoint, Credentials())

producer = Producer(config, ("Tasks",))
producer.startup()
for i in range(100):
    routine = Message()
    routine.topic, routine.body, routine.priority = "Tasks", f"routine task {i}".encode(), 0
    producer.send(routine)
urgent = Message()
urgent.topic, urgent.body, urgent.priority = "Tasks", b"urgent task", 9  # 0..9, higher first
producer.send(urgent)
producer.shutdown()

consumer = SimpleConsumer(config, "TaskWorkers", {"Tasks": FilterExpression()}, await_duration=5)
consumer.startup()
seen = []
for _ in range(20):  # each receive long-polls up to 5 s
    for message in consumer.receive(32, 30):
        seen.append(message.body.decode())
        consumer.ack(message)
    if len(seen) == 101:
        break
consumer.shutdown()
print("first:", seen[0])
print("received", len(seen))
