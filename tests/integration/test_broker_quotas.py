"""topics_max and groups_max: a new topic or group past them is refused with LIMIT_EXCEEDED and
a remark naming the setting, whether an admin asks or a send or a pull would create it; what
exists goes on, and the broker's own topics are still made."""

from __future__ import annotations

from pathlib import Path

import pytest

from orbitmq import Message, Producer, PullConsumer
from orbitmq.client import Admin
from orbitmq.client.results import SendStatus
from orbitmq.errors import BrokerError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.testing.embedded import EmbeddedCluster

TOPICS_MAX = 14
GROUPS_MAX = 3


def test_topics_max_refuses_new_topics_from_admins_and_sends(tmp_path: Path):
    with EmbeddedCluster(tmp_path, topics_max=TOPICS_MAX) as cluster, \
            Admin(cluster.namesrv) as admin, \
            Producer("quota-producer", namesrv=cluster.namesrv) as producer:
        broker = cluster.brokers[0]
        room = TOPICS_MAX - len(broker.topics.table)
        assert room >= 2, sorted(broker.topics.table)
        for i in range(room - 1):
            admin.create_topic(f"Quota{i}")
        assert producer.send(Message("QuotaBySend", b"x")).status is SendStatus.OK  # the last
        with pytest.raises(BrokerError) as refused:
            admin.create_topic("OneTooMany")
        assert refused.value.code == ResponseCode.LIMIT_EXCEEDED
        assert "topics_max = 14" in refused.value.remark and "OneTooMany" in refused.value.remark
        with pytest.raises(BrokerError) as refused:
            producer.send(Message("OneTooManyBySend", b"x"))
        assert refused.value.code == ResponseCode.LIMIT_EXCEEDED
        assert "topics_max" in refused.value.remark
        assert len(broker.topics.table) == TOPICS_MAX
        # What exists goes on: sends to it, and changes to it.
        assert producer.send(Message("Quota0", b"y")).status is SendStatus.OK
        admin.update_topic("Quota0", write_queue_nums=2, read_queue_nums=2, force=True)
        assert broker.server.limit_counters.counts["topics_max"] == 2


def test_groups_max_refuses_new_groups_from_admins_and_consumers(tmp_path: Path):
    with EmbeddedCluster(tmp_path, groups_max=GROUPS_MAX) as cluster, \
            Admin(cluster.namesrv) as admin:
        broker = cluster.brokers[0]
        admin.create_topic("GroupQuota")
        room = GROUPS_MAX - len(broker.sub_groups.table)
        assert room >= 1
        for i in range(room):
            admin.update_group(f"quota-group-{i}")
        with pytest.raises(BrokerError) as refused:
            admin.update_group("one-group-too-many")
        assert refused.value.code == ResponseCode.LIMIT_EXCEEDED
        assert "groups_max = 3" in refused.value.remark
        # A consumer of a new group: its first pull would create the group.
        with PullConsumer("another-group-too-many", namesrv=cluster.namesrv) as consumer:
            mq = consumer.fetch_queues("GroupQuota")[0]
            with pytest.raises(BrokerError) as refused:
                consumer.pull(mq, 0, 1)
        assert refused.value.code == ResponseCode.LIMIT_EXCEEDED
        assert "groups_max" in refused.value.remark
        admin.update_group("quota-group-0", retry_max_times=3)  # an existing one may change
        assert len(broker.sub_groups.table) == GROUPS_MAX
        assert broker.server.limit_counters.counts["groups_max"] >= 2  # (an admin may ask twice)
