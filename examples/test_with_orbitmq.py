"""Testing your own code against a real OrbitMQ with the ``orbitmq`` pytest plugin.

Installing OrbitMQ installs the plugin; nothing to configure. Run: ``pytest
examples/test_with_orbitmq.py``. docs/testing.md explains the fixtures.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import orbitmq


def publish_order(producer: orbitmq.Producer, topic: str, order_id: int) -> orbitmq.SendResult:
    """The code under test: an order service publishing an event."""
    body = json.dumps({"order": order_id, "status": "created"}).encode()
    return producer.send(orbitmq.Message(topic, body, tags="created", keys=[f"order-{order_id}"]))


def test_an_order_event_is_published(orbitmq_namesrv: str, orbitmq_topic: str) -> None:
    with orbitmq.Producer("order-service", namesrv=orbitmq_namesrv) as producer:
        sent = publish_order(producer, orbitmq_topic, 7)
    assert sent.status is orbitmq.SendStatus.OK

    with orbitmq.PullConsumer("order-audit", namesrv=orbitmq_namesrv) as consumer:
        pulled = consumer.pull(sent.queue, offset=sent.queue_offset, max_nums=1)
    (message,) = pulled.messages
    assert message.keys == ["order-7"]
    assert json.loads(message.body) == {"order": 7, "status": "created"}


def test_a_topic_of_its_own_starts_empty(orbitmq_namesrv: str, orbitmq_topic: str) -> None:
    with orbitmq.Admin(orbitmq_namesrv) as admin:
        assert all(q.max_offset == 0 for q in admin.topic_status(orbitmq_topic))


def test_a_cluster_with_settings_of_its_own(orbitmq_cluster_factory: Any) -> None:
    cluster = orbitmq_cluster_factory(auto_create_topic=False)  # any BrokerConfig field
    with orbitmq.Producer("order-service", namesrv=cluster.namesrv) as producer, \
            pytest.raises(orbitmq.OrbitMQError, match="NoSuchTopic"):
        publish_order(producer, "NoSuchTopic", 8)  # not created on its first send here
