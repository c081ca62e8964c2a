"""RocketMQ's system topic and group names, spelled once: the brokers' own topics, the prefixes
of each group's retry and dead letter topics, and the groups the tools consume with.

Every side may import this module (the store, the broker, the SDK, the CLI, Spark): the names
are part of the protocol, since clients of either kind and the brokers must agree on them.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_TOPIC",
    "SCHEDULE_TOPIC",
    "TRANS_HALF_TOPIC",
    "TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "BENCHMARK_TOPIC",
    "TRACE_TOPIC",
    "TIMER_TOPIC",
    "METADATA_LOG_TOPIC",
    "RETRY_GROUP_TOPIC_PREFIX",
    "DLQ_GROUP_TOPIC_PREFIX",
    "SYSTEM_TOPIC_PREFIXES",
    "NOT_ALLOWED_SEND_TOPICS",
    "TOOLS_CONSUMER_GROUP",
    "SYSTEM_GROUP_PREFIX",
]

DEFAULT_TOPIC = "TBW102"  # the template of auto-created topics; a topic without a route rides it
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # delayed messages wait here, one queue per delay level
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"  # half (prepared) transactional messages
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"  # the commit / rollback of each half message
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"  # half messages checked too often
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
BENCHMARK_TOPIC = "BenchmarkTest"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"  # message traces, written by traced clients (docs/trace.md)
TIMER_TOPIC = "rmq_sys_wheel_timer"  # timer messages (RocketMQ 5) wait here until their time
# OrbitMQ's own: a master's metadata changes (topics, groups, committed offsets), one record each,
# carried to its slaves by the replicated commit log (broker/metadata_log.py). It has no topic
# config, so no route names it; clients can neither send to it nor create, delete or pull it.
METADATA_LOG_TOPIC = "rmq_sys_orbitmq_metadata_log"

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"  # + group: the group's retry topic
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"  # + group: the group's dead letter topic
SYSTEM_TOPIC_PREFIXES = ("rmq_sys_", "RMQ_SYS_")  # RocketMQ 5's system topics

# System topics that only brokers write to (RocketMQ's TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET;
# not the trace topic, which traced clients write to).
NOT_ALLOWED_SEND_TOPICS = frozenset({
    DEFAULT_TOPIC,
    SCHEDULE_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    BENCHMARK_TOPIC,
    OFFSET_MOVED_EVENT,
    SELF_TEST_TOPIC,
    METADATA_LOG_TOPIC,
})

TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"  # RocketMQ's group for admin reads (no offsets committed)
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"  # RocketMQ's system consumer groups
