"""What a member does to its tables when it becomes master (controller mode).

A slave copies its master's topic table every ``slave_sync_interval_ms``; a topic created on the
master (by a first send) just before the master died may hold acknowledged messages in the new
master's log without being in its topic table yet, and a topic missing there is missing from
every route: its messages could not be read. So the new master adds every topic that has consume
queues in its store and no config, with as many queues as the store holds (read and write).
"""

from __future__ import annotations

import logging

from orbitmq.broker.tables.topic_config_manager import TopicConfigManager
from orbitmq.config import QUEUE_NUMS_MAX
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.lite import is_lite_queue_topic
from orbitmq.protocol.topics import METADATA_LOG_TOPIC
from orbitmq.store.message_store import MessageStore

__all__ = ["adopt_stored_topics"]

log = logging.getLogger(__name__)


def adopt_stored_topics(store: MessageStore, topics: TopicConfigManager) -> list[str]:
    """Create a config for each stored topic the table lacks; returns their names."""
    added = []
    for topic in sorted(store.topics()):
        if topics.get(topic) is not None or topic == METADATA_LOG_TOPIC:
            continue  # the metadata log is never a client's topic (broker/metadata_log.py)
        if is_lite_queue_topic(topic):
            continue  # a lite topic's queue: broker/lite finds it again, never a topic config
        ids = store.queue_ids(topic)
        nums = min(max(ids) + 1, QUEUE_NUMS_MAX) if ids else 1
        try:
            topics.update(TopicConfig(topic, nums, nums))
        except Exception as e:  # a name the table refuses: logged, the others go on
            log.error("promotion: stored topic %s could not be added: %s", topic, e)
            continue
        added.append(topic)
    if added:
        log.warning("promotion: topics stored but not yet copied from the old master added: %s",
                    ", ".join(added))
    return added
