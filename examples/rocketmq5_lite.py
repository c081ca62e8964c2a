# A lite consumer of one session's lite topic (docs/rocketmq5.md, "Lite topics").
import sys
import time

from rocketmq import ClientConfiguration, Credentials, LiteSimpleConsumer, Message, Producer
from rocketmq.v5.exception import LiteSubscriptionQuotaExceededException

endpoint = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8081"
config = ClientConfiguration(endpoint, Credentials())

producer = Producer(config, ("Sessions",))
producer.startup()
for session, text in [("session-1", "hello"), ("session-2", "other"), ("session-1", "bye")]:
    message = Message()
    message.topic, message.lite_topic, message.body = "Sessions", session, text.encode()
    producer.send(message)  # the first message of a lite topic creates it
producer.shutdown()

consumer = LiteSimpleConsumer("Sessions", config, "SessionWorkers", await_duration=2)
consumer.startup()
for _ in range(100):  # startup returns before the broker's settings (the quota) reach the client
    try:
        consumer.subscribe_lite("session-1")
        break
    except LiteSubscriptionQuotaExceededException:
        time.sleep(0.1)
consumer.subscribe_lite_all()  # the whole set at once (the client sends it every 30 s anyway)
seen = []
for _ in range(10):
    for message in consumer.receive(16, 30):
        seen.append(f"{message.lite_topic}:{message.body.decode()}")
        consumer.ack(message)  # the next message of session-1 comes after this ack
    if len(seen) == 2:
        break
consumer.shutdown()
print("received", seen)
