"""Two namespaces, one topic name: each client sees its own namespace only (docs/rocketmq5.md).

Run it with a Python that has `rocketmq-python-client` 5.1.x (`make install` prepares
.venv-rmq5), after creating the topic in both namespaces:

    orbitmq topic create -t shop%Orders
    orbitmq topic create -t bank%Orders
    .venv-rmq5/bin/python examples/rocketmq5_namespaces.py 127.0.0.1:8081
"""

import sys

from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,
                      SimpleConsumer)

endpoint = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8081"

for namespace in ("shop", "bank"):
    config = ClientConfiguration(endpoint, Credentials(), namespace=namespace)
    producer = Producer(config, ("Orders",))
    producer.startup()
    message = Message()
    message.topic, message.body = "Orders", f"{namespace} order 1".encode()
    producer.send(message)
    producer.shutdown()

for namespace in ("shop", "bank"):
    config = ClientConfiguration(endpoint, Credentials(), namespace=namespace)
    consumer = SimpleConsumer(config, "Billing", {"Orders": FilterExpression()}, await_duration=5)
    consumer.startup()
    seen = []
    for _ in range(10):  # each receive long-polls up to 5 s
        for m in consumer.receive(16, 30):
            seen.append((m.topic, m.namespace, m.body.decode()))
            consumer.ack(m)
        if seen:
            break
    consumer.shutdown()
    print(namespace, "received", seen)
