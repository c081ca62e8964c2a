"""The options of the ``orbitmq`` data source, parsed once and checked with errors naming the option.

Spark hands options over as strings with lower-cased keys; this module turns them into frozen
dataclasses so that the reader and writer never look at raw strings again. Pure code: no pyspark,
no network.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping

from orbitmq.client import MessageSelector
from orbitmq.errors import ExpressionError, SparkOptionError
from orbitmq.protocol.expressions import parse_tags
from orbitmq.security.signature import Credentials
from orbitmq.security.tls import ClientTls, client_tls_from_env
from orbitmq.spark.offsets import EARLIEST, LATEST, Offsets, parse_queue_key
from orbitmq.spark.option_names import normalize

__all__ = [
    "OptionError",
    "ReadOptions",
    "WriteOptions",
    "StartSpec",
    "parse_read_options",
    "include_headers",
    "parse_write_options",
    "parse_duration_ms",
    "COMMIT_TOPIC_DEFAULT",
    "PRODUCER_GROUP_DEFAULT",
    "READER_GROUP_DEFAULT",
    "ACCESS_KEY_ENV",
    "SECRET_KEY_ENV",
]

COMMIT_TOPIC_DEFAULT = "ORBITMQ_SPARK_COMMITS"
PRODUCER_GROUP_DEFAULT = "orbitmq-spark-sink"
READER_GROUP_DEFAULT = "orbitmq-spark-reader"
MAX_TRIGGER_DELAY_DEFAULT_MS = 15 * 60 * 1000  # Kafka's default maxTriggerDelay
MAX_OFFSETS_PER_PARTITION_DEFAULT = 200_000
# Read where the options are parsed (the driver) when neither option is given; the executors get
# the credentials with the options, never from their own environment.
ACCESS_KEY_ENV = "ORBITMQ_ACCESS_KEY"
SECRET_KEY_ENV = "ORBITMQ_SECRET_KEY"
KEY_MAX_CHARS = 256
_TOPIC_NAME = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$")
_DURATION_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                     "d": 86_400_000, None: 1}


OptionError = SparkOptionError  # the name the connector's users know


@dataclasses.dataclass(frozen=True)
class StartSpec:
    """Where reading starts (or, for ``endingOffsets``, ends).

    ``kind`` is ``"earliest"``, ``"latest"``, ``"offsets"`` (``offsets`` holds the JSON, with -2
    for earliest and -1 for latest), ``"timestamp"`` (``timestamp_ms`` for every queue) or
    ``"timestamps"`` (``offsets`` holds a timestamp per queue: startingOffsetsByTimestamp,
    endingOffsetsByTimestamp).
    """

    kind: str
    offsets: Offsets = dataclasses.field(default_factory=dict)
    timestamp_ms: int = 0


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """What a reader needs, checked. See docs/spark.md for each option."""

    namesrv: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    starting: StartSpec = StartSpec(EARLIEST)
    ending: StartSpec = StartSpec(LATEST)
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = MAX_TRIGGER_DELAY_DEFAULT_MS
    fail_on_data_loss: bool = True
    tags: str = "*"
    sql: str | None = None  # an SQL92 filter on properties, instead of tags
    include_properties: bool = False
    include_headers: bool = False
    max_offsets_per_partition: int = MAX_OFFSETS_PER_PARTITION_DEFAULT
    min_partitions: int | None = None
    consumer_group: str = READER_GROUP_DEFAULT
    pull_timeout_ms: int = 10_000
    commit_topic: str = COMMIT_TOPIC_DEFAULT
    credentials: Credentials | None = None  # accessKey / secretKey: every request signed
    tls: ClientTls | None = None  # tls, tlsTrustCertPath, ...: every connection in TLS

    @property
    def tag_set(self) -> frozenset[str] | None:
        """The tags to keep, or None for every message (and with ``sql``: the broker filters)."""
        return None if self.sql is not None else parse_tags(self.tags)

    @property
    def selector(self) -> MessageSelector:
        """What the pulls ask the broker for: ``sql`` when given, else the tags."""
        if self.sql is not None:
            return MessageSelector.by_sql(self.sql)
        return MessageSelector.by_tag(self.tags)


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    """What a writer needs, checked."""

    namesrv: str
    topic: str | None = None
    exactly_once: bool = False
    producer_group: str = PRODUCER_GROUP_DEFAULT
    commit_topic: str = COMMIT_TOPIC_DEFAULT
    send_timeout_ms: int = 10_000
    # half messages are neither checked nor counted by the brokers for this long: the time a
    # crashed query has to come back and commit a batch whose marker is written
    check_immunity_s: int = 3600
    credentials: Credentials | None = None  # accessKey / secretKey: every request signed
    tls: ClientTls | None = None  # tls, tlsTrustCertPath, ...: every connection in TLS


# -- primitive parsers ------------------------------------------------------------------------
def _get(options: Mapping[str, str], name: str) -> str | None:
    """The value of option ``name`` (keys arrive lower-cased; accept both spellings)."""
    value = options.get(name.lower())
    if value is None:
        value = options.get(name)
    return None if value is None else str(value)


def _given_or(options: Mapping[str, str], name: str, default: str) -> str:
    """Option ``name``, or ``default`` when it is not given (an empty value is given: the
    caller's check refuses it rather than quietly using the default)."""
    value = _get(options, name)
    return default if value is None else value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    low = raw.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise OptionError(name, f"expected true or false, got {raw!r}")


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(name, f"expected a positive integer, got {raw!r}") from None
    if value <= 0:
        raise OptionError(name, f"expected a positive integer, got {value}")
    return value


def parse_duration_ms(text: str, option: str) -> int:
    """``"500ms"``, ``"30s"``, ``"15m"``, ``"1h"`` or a bare number of milliseconds."""
    m = _DURATION.match(text.lower())
    if m is None:
        raise OptionError(option, f"expected a duration such as 500ms, 30s, 15m or 1h, got {text!r}")
    return int(m.group(1)) * _DURATION_UNIT_MS[m.group(2)]


def _topic_name(value: str, option: str) -> str:
    if not _TOPIC_NAME.match(value):
        raise OptionError(option, f"{value!r} is not a topic name (1-127 of [%|a-zA-Z0-9_-])")
    return value


def _namesrv(options: Mapping[str, str]) -> str:
    raw = _get(options, "namesrv")
    if raw is None or not raw.strip():
        raise OptionError("namesrv", "required: the name server address(es), host:port;host:port")
    for addr in raw.replace(",", ";").split(";"):
        host, sep, port = addr.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise OptionError("namesrv", f"{addr.strip()!r} is not host:port")
    return raw.strip().replace(",", ";")


_TLS_PATHS = {"tlsTrustCertPath": "trust_cert_path", "tlsCertPath": "cert_path",
              "tlsKeyPath": "key_path"}


def _tls(options: Mapping[str, str]) -> ClientTls | None:
    """``tls`` (true: the other ``tls*`` options; none of them given: ORBITMQ_TLS_ENABLE and
    ORBITMQ_TLS_CLIENT_* of the process that parses the options). The files must be at the same
    paths on the executors."""
    names = ("tls", "tlsCheckHostname", *_TLS_PATHS)
    if all(_get(options, name) is None for name in names):
        try:
            return client_tls_from_env()
        except ValueError as e:
            raise OptionError("tls", str(e)) from None
    paths = {field: (_get(options, name) or "").strip() for name, field in _TLS_PATHS.items()}
    if not _bool(options, "tls", False):
        given = [name for name in (*_TLS_PATHS, "tlsCheckHostname") if _get(options, name)]
        if given:
            raise OptionError(given[0], f"{given[0]} needs tls=true")
        return None
    try:
        return ClientTls(**paths, check_hostname=_bool(options, "tlsCheckHostname", True))
    except ValueError as e:
        raise OptionError("tlsKeyPath" if paths["cert_path"] else "tlsCertPath", str(e)) from None


def _credentials(options: Mapping[str, str]) -> Credentials | None:
    """``accessKey`` and ``secretKey`` (both or neither; neither: ORBITMQ_ACCESS_KEY and
    ORBITMQ_SECRET_KEY of the process that parses the options, both or neither). The secret
    never appears in a message."""
    access, secret = _get(options, "accessKey"), _get(options, "secretKey")
    where = "option"
    if access is None and secret is None:
        access, secret = os.environ.get(ACCESS_KEY_ENV), os.environ.get(SECRET_KEY_ENV)
        where = "environment"
        if not access and not secret:
            return None
    if not access or not access.strip():
        name = "accessKey" if where == "option" else ACCESS_KEY_ENV
        raise OptionError("accessKey", f"{name} is missing or empty: give accessKey and "
                                       "secretKey together (or neither)")
    if not secret:
        name = "secretKey" if where == "option" else SECRET_KEY_ENV
        raise OptionError("secretKey", f"{name} is missing or empty: give accessKey and "
                                       "secretKey together (or neither)")
    if len(access) > KEY_MAX_CHARS or len(secret) > KEY_MAX_CHARS:
        raise OptionError("accessKey" if len(access) > KEY_MAX_CHARS else "secretKey",
                          f"longer than {KEY_MAX_CHARS} characters")
    return Credentials(access.strip(), secret)


def parse_offsets_json(text: str, option: str, *, allow_earliest: bool = True) -> Offsets:
    """``{"topic": {"broker-a:0": 42}}`` checked: -2 means earliest, -1 latest."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise OptionError(option, f"not JSON ({e.msg}): {text[:80]!r}") from None
    if not isinstance(data, dict) or not data:
        raise OptionError(option, 'expected {"topic": {"brokerName:queueId": offset, ...}}')
    out: Offsets = {}
    for topic, queues in data.items():
        _topic_name(str(topic), option)
        if not isinstance(queues, dict):
            raise OptionError(option, f"topic {topic!r}: expected an object of queue offsets")
        out[topic] = {}
        for key, offset in queues.items():
            try:
                parse_queue_key(key)
            except ValueError as e:
                raise OptionError(option, f"topic {topic!r}: {e}") from None
            low = -2 if allow_earliest else -1
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < low:
                raise OptionError(option, f"topic {topic!r} queue {key!r}: offset must be an "
                                          f"integer >= {low}, got {offset!r}")
            out[topic][key] = offset
    return out


def _start_spec(options: Mapping[str, str], name: str, default: str, *,
                ending: bool = False) -> StartSpec:
    raw = _get(options, name)
    if raw is None:
        return StartSpec(default)
    text = raw.strip()
    if text.lower() == LATEST:
        return StartSpec(LATEST)
    if text.lower() == EARLIEST:
        if ending:
            raise OptionError(name, "'earliest' is not a valid end; use 'latest' or JSON offsets")
        return StartSpec(EARLIEST)
    if text.startswith("{"):
        return StartSpec("offsets", parse_offsets_json(text, name, allow_earliest=not ending))
    raise OptionError(name, f"expected earliest, latest or JSON offsets, got {text[:80]!r}")


# -- read options -------------------------------------------------------------------------------
def _topics(options: Mapping[str, str]) -> tuple[tuple[str, ...], str | None]:
    topic, pattern = _get(options, "topic"), _get(options, "topicPattern")
    if (topic is None) == (pattern is None):
        raise OptionError("topic", "give exactly one of 'topic' (a comma list; Kafka's "
                                   "'subscribe') or 'topicPattern' ('subscribePattern')")
    if topic is not None:
        names = tuple(sorted({_topic_name(t.strip(), "topic") for t in topic.split(",")
                              if t.strip()}))
        if not names:
            raise OptionError("topic", "no topic named")
        return names, None
    assert pattern is not None
    try:
        re.compile(pattern)
    except re.error as e:
        raise OptionError("topicPattern", f"not a regular expression: {e}") from None
    return (), pattern


def _tags(options: Mapping[str, str]) -> str:
    """The ``tags`` option, read by the SDK's and the broker's one tag parser."""
    raw = _get(options, "tags")
    try:
        tags = MessageSelector.by_tag(raw).tags
    except ExpressionError as e:
        raise OptionError("tags", f"expected '*' or 'tagA || tagB', got {raw!r}: {e}") from None
    return "*" if tags is None else " || ".join(sorted(tags))


def _sql(options: Mapping[str, str]) -> str | None:
    """The ``sql`` option: an SQL92 filter the broker evaluates (not together with ``tags``)."""
    raw = _get(options, "sql")
    if raw is None:
        return None
    if (_get(options, "tags") or "*").strip() not in ("", "*"):
        raise OptionError("sql", "give either tags or sql, not both")
    try:
        return MessageSelector.by_sql(raw).expression
    except ExpressionError as e:
        raise OptionError("sql", f"not an SQL92 expression: {e}") from None


def _one_of(options: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    """The one of ``names`` given (None: none); OptionError naming the second when two are."""
    given = [n for n in names if _get(options, n) is not None]
    if len(given) > 1:
        raise OptionError(given[1], f"give only one of {', '.join(names)}")
    return given[0] if given else None


def _timestamp(options: Mapping[str, str], name: str) -> StartSpec:
    raw = (_get(options, name) or "").strip()
    if not raw.isdigit():
        raise OptionError(name, f"expected milliseconds since the epoch, got {raw!r}")
    return StartSpec("timestamp", timestamp_ms=int(raw))


def _timestamps(options: Mapping[str, str], name: str) -> StartSpec:
    """``{"topic": {"broker-a:0": ms}}``: where each named queue starts (or ends), by time."""
    text = (_get(options, name) or "").strip()
    stamps = parse_offsets_json(text, name, allow_earliest=False)
    for topic, queues in stamps.items():
        for key, ms in queues.items():
            if ms < 0:
                raise OptionError(name, f"topic {topic!r} queue {key!r}: expected milliseconds "
                                        f"since the epoch, got {ms}")
    return StartSpec("timestamps", stamps)


def _starting(options: Mapping[str, str], streaming: bool) -> StartSpec:
    given = _one_of(options, ("startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp"))
    if given == "startingTimestamp":
        return _timestamp(options, given)
    if given == "startingOffsetsByTimestamp":
        return _timestamps(options, given)
    return _start_spec(options, "startingOffsets", LATEST if streaming else EARLIEST)


def _ending(options: Mapping[str, str], streaming: bool) -> StartSpec:
    given = _one_of(options, ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"))
    if given is None:
        return StartSpec(LATEST)
    if streaming:
        raise OptionError(given, "is for batch queries only")
    if given == "endingTimestamp":
        return _timestamp(options, given)
    if given == "endingOffsetsByTimestamp":
        return _timestamps(options, given)
    return _start_spec(options, "endingOffsets", LATEST, ending=True)


def include_headers(options: Mapping[str, str]) -> bool:
    """The ``includeHeaders`` option (the schema depends on it).

    Raises:
        OptionError: an unknown option, or includeHeaders not a boolean.
    """
    return _bool(normalize(options, "source"), "includeHeaders", False)


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check every read option; defaults as Kafka's source (streaming starts at latest).

    Raises:
        OptionError: naming the first bad option.
    """
    options = normalize(options, "source")
    topics, pattern = _topics(options)
    ending = _ending(options, streaming)
    limits = {name: _positive_int(options, name) for name in
              ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxOffsetsPerPartition",
               "pullTimeoutMs", "minPartitions")}
    mn, mx = limits["minOffsetsPerTrigger"], limits["maxOffsetsPerTrigger"]
    if mn is not None and mx is not None and mn > mx:
        raise OptionError("minOffsetsPerTrigger", f"{mn} is above maxOffsetsPerTrigger {mx}")
    delay = _get(options, "maxTriggerDelay")
    if delay is not None and mn is None:
        raise OptionError("maxTriggerDelay", "only applies with minOffsetsPerTrigger")
    group = _given_or(options, "consumerGroup", READER_GROUP_DEFAULT)
    return ReadOptions(
        namesrv=_namesrv(options),
        topics=topics,
        topic_pattern=pattern,
        starting=_starting(options, streaming),
        ending=ending,
        max_offsets_per_trigger=mx,
        min_offsets_per_trigger=mn,
        max_trigger_delay_ms=(parse_duration_ms(delay, "maxTriggerDelay") if delay is not None
                              else MAX_TRIGGER_DELAY_DEFAULT_MS),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        tags=_tags(options),
        sql=_sql(options),
        include_properties=_bool(options, "includeProperties", False),
        include_headers=_bool(options, "includeHeaders", False),
        max_offsets_per_partition=(limits["maxOffsetsPerPartition"]
                                   or MAX_OFFSETS_PER_PARTITION_DEFAULT),
        min_partitions=limits["minPartitions"],
        consumer_group=_group(group, "consumerGroup"),
        pull_timeout_ms=limits["pullTimeoutMs"] or 10_000,
        commit_topic=_topic_name(_given_or(options, "commitTopic", COMMIT_TOPIC_DEFAULT),
                                 "commitTopic"),
        credentials=_credentials(options),
        tls=_tls(options),
    )


def _group(value: str, option: str) -> str:
    if not _TOPIC_NAME.match(value):
        raise OptionError(option, f"{value!r} is not a group name (1-127 of [%|a-zA-Z0-9_-])")
    return value


# -- write options ------------------------------------------------------------------------------
def parse_write_options(options: Mapping[str, str], *, streaming: bool) -> WriteOptions:
    """Check every write option; ``exactlyOnce`` defaults to true for streaming writes.

    Raises:
        OptionError: naming the first bad option.
    """
    options = normalize(options, "sink")
    topic = _get(options, "topic")
    return WriteOptions(
        namesrv=_namesrv(options),
        topic=_topic_name(topic.strip(), "topic") if topic is not None else None,
        exactly_once=_bool(options, "exactlyOnce", streaming),
        producer_group=_group(_given_or(options, "producerGroup", PRODUCER_GROUP_DEFAULT),
                              "producerGroup"),
        commit_topic=_topic_name(_given_or(options, "commitTopic", COMMIT_TOPIC_DEFAULT),
                                 "commitTopic"),
        send_timeout_ms=_positive_int(options, "sendTimeoutMs") or 10_000,
        check_immunity_s=_positive_int(options, "transactionCheckImmunitySeconds") or 3600,
        credentials=_credentials(options),
        tls=_tls(options),
    )
