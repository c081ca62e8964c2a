"""Which options the source and the sink know, their Kafka-named aliases, and the refusal of any
other: an option accepted and ignored would be a bug (Spark hands every ``.option(...)`` over,
spelled as given or lower-cased, and nothing else complains about a misspelt one).

Pure code: no pyspark, no network.
"""

from __future__ import annotations

from collections.abc import Mapping

from orbitmq.errors import SparkOptionError

__all__ = ["READ_OPTIONS", "WRITE_OPTIONS", "ALIASES", "normalize"]

READ_OPTIONS = (
    "namesrv", "topic", "topicPattern", "startingOffsets", "endingOffsets", "startingTimestamp",
    "startingOffsetsByTimestamp", "endingTimestamp", "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "failOnDataLoss", "tags",
    "sql", "includeProperties", "includeHeaders", "maxOffsetsPerPartition", "minPartitions",
    "consumerGroup", "pullTimeoutMs", "commitTopic", "accessKey", "secretKey",
    "tls", "tlsTrustCertPath", "tlsCertPath", "tlsKeyPath", "tlsCheckHostname",
)
WRITE_OPTIONS = (
    "namesrv", "topic", "exactlyOnce", "producerGroup", "commitTopic", "sendTimeoutMs",
    "transactionCheckImmunitySeconds", "accessKey", "secretKey",
    "tls", "tlsTrustCertPath", "tlsCertPath", "tlsKeyPath", "tlsCheckHostname",
    # Spark's own, handed over by a streaming write (checkpointLocation, .queryName()): Spark
    # uses them
    "checkpointLocation", "queryName",
)
# Kafka's names for the same things -> ours.
ALIASES = {"subscribe": "topic", "subscribePattern": "topicPattern",
           "maxRecordsPerPartition": "maxOffsetsPerPartition"}
# What to say about options of Spark's Kafka connector that have no OrbitMQ counterpart.
_HINTS = {
    "assign": "OrbitMQ reads whole topics: name them with 'topic' and choose queues and offsets "
              "with startingOffsets / endingOffsets JSON",
    "startingOffsetsByTimestampStrategy": "not supported: a queue without a message stored at "
                                          "or after the timestamp starts at its end",
    "groupIdPrefix": "the source's pulls use 'consumerGroup'",
    "kafkaConsumer.pollTimeoutMs": "use 'pullTimeoutMs'",
    "path": "the orbitmq format takes no path: name the topic with option('topic', ...)",
}


def _known(side: str) -> dict[str, str]:
    names = READ_OPTIONS if side == "source" else WRITE_OPTIONS
    known = {name.lower(): name for name in names}
    if side == "source":
        known.update({alias.lower(): target for alias, target in ALIASES.items()})
    return known


def _unknown(name: str, side: str, known: dict[str, str]) -> SparkOptionError:
    hint = _HINTS.get(name) or next((v for k, v in _HINTS.items() if k.lower() == name.lower()),
                                    None)
    if hint is None and name.lower().startswith("kafka."):
        hint = ("OrbitMQ takes no Kafka client options: the name server is 'namesrv', the "
                "consumer group 'consumerGroup'")
    if hint is None:
        names = sorted(set(known.values()) | ({*ALIASES} if side == "source" else set()))
        hint = "the orbitmq " + side + " knows " + ", ".join(names)
    return SparkOptionError(name, f"unknown option; {hint}")


def normalize(options: Mapping[str, str], side: str) -> dict[str, str]:
    """``options`` with every key in our lower-cased spelling (aliases resolved).

    Args:
        side: ``"source"`` or ``"sink"``.

    Raises:
        SparkOptionError: an unknown option (named, with what the connector knows instead), or an
            option given under two names (``topic`` and ``subscribe``).
    """
    known = _known(side)
    out: dict[str, str] = {}
    given: dict[str, str] = {}
    for key, value in options.items():
        name = known.get(str(key).lower())
        if name is None:
            raise _unknown(str(key), side, known)
        if name.lower() in out and given[name.lower()].lower() != str(key).lower():
            raise SparkOptionError(str(key), f"the same option as '{given[name.lower()]}': give one")
        out[name.lower()] = str(value)
        given[name.lower()] = str(key)
    return out
