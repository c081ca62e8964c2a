"""Numbers of the RocketMQ 4.x remoting protocol: request codes, response codes, languages and
serialize types.

The values are RocketMQ's and must never change meaning: real clients (Java, Go, the C++ client in
PyPI's ``rocketmq`` wheel) send and expect exactly these numbers.

OrbitMQ-only request codes, when we add capabilities RocketMQ lacks, live in the range
``ORBITMQ_CODE_MIN..ORBITMQ_CODE_MAX`` (9000-9999), which RocketMQ does not use; a RocketMQ client
never sends them and a broker that does not know one answers NOT_SUPPORTED like for any unknown code.
The few OrbitMQ-only response codes live in the same range: a RocketMQ client treats any code it
does not know as a failure with the code and remark, as it treats SYSTEM_ERROR.
"""

from __future__ import annotations

import enum

__all__ = [
    "RequestCode",
    "ResponseCode",
    "LanguageCode",
    "SerializeType",
    "ORBITMQ_CODE_MIN",
    "ORBITMQ_CODE_MAX",
    "OrbitMQRequestCode",
    "SEND_FAMILY",
    "bad_request_code",
]

ORBITMQ_CODE_MIN = 9000
ORBITMQ_CODE_MAX = 9999


class RequestCode(enum.IntEnum):
    """Request codes (RocketMQ's ``RequestCode``); the comment says who sends it to whom."""

    SEND_MESSAGE = 10  # producer -> broker (V1 header names; the C++ client uses it for batches too)
    PULL_MESSAGE = 11  # consumer -> broker
    QUERY_MESSAGE = 12  # by key, client -> broker
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17  # admin -> broker
    GET_ALL_TOPIC_CONFIG = 21  # slave / admin -> broker
    GET_TOPIC_CONFIG_LIST = 22
    GET_TOPIC_NAME_LIST = 23
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    TRIGGER_DELETE_FILES = 27
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34  # client -> broker
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36  # consumer -> broker: retry a failed message
    END_TRANSACTION = 37  # producer -> broker, oneway
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39  # broker -> producer
    NOTIFY_CONSUMER_IDS_CHANGED = 40  # broker -> consumer
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    PUT_KV_CONFIG = 100  # name server KV table
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103  # broker -> name server
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105  # client -> name server
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    SUSPEND_CONSUMER = 209
    RESUME_CONSUMER = 210
    RESET_CONSUMER_OFFSET_IN_CONSUMER = 211
    RESET_CONSUMER_OFFSET_IN_BROKER = 212
    ADJUST_CONSUMER_THREAD_POOL = 213
    WHO_CONSUME_THE_MESSAGE = 214
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216  # one topic (OrbitMQ brokers: one broker's queues of it)
    REGISTER_TOPIC_IN_NAMESRV = 217  # RocketMQ 5: one topic's route, broker -> name server
    GET_KVLIST_BY_NAMESPACE = 219
    RESET_CONSUMER_CLIENT_OFFSET = 220  # broker -> consumer
    GET_CONSUMER_STATUS_FROM_CLIENT = 221  # broker -> consumer
    INVOKE_BROKER_TO_RESET_OFFSET = 222  # admin -> broker
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    QUERY_CONSUME_TIME_SPAN = 303
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    CLEAN_EXPIRED_CONSUMEQUEUE = 306
    GET_CONSUMER_RUNNING_INFO = 307  # broker -> consumer (on an admin's behalf)
    QUERY_CORRECTION_OFFSET = 308
    CONSUME_MESSAGE_DIRECTLY = 309  # broker -> consumer
    SEND_MESSAGE_V2 = 310  # producer -> broker, short header names a..n
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    CLONE_GROUP_OFFSET = 314
    VIEW_BROKER_STATS_DATA = 315
    CLEAN_UNUSED_TOPIC = 316
    GET_BROKER_CONSUME_STATS = 317
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    SEND_BATCH_MESSAGE = 320  # producer -> broker, V2 header names, batch body
    QUERY_CONSUME_QUEUE = 321
    QUERY_DATA_VERSION = 322  # broker -> name server: does it hold this DataVersion?
    RESUME_CHECK_HALF_MESSAGE = 323
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    ADD_WRITE_PERM_OF_BROKER = 327
    # RocketMQ 5.2's name (its metadata in RocksDB): the broker's metadata store as JSON.
    EXPORT_ROCKSDB_CONFIG_TO_JSON = 355
    RECALL_MESSAGE = 370  # RocketMQ 5.3: cancel a timer message not yet delivered
    GET_BROKER_HA_STATUS = 907  # RocketMQ 5: HARuntimeInfo (replication)


class OrbitMQRequestCode(enum.IntEnum):
    """OrbitMQ-only request codes, in ``ORBITMQ_CODE_MIN..ORBITMQ_CODE_MAX``: kept apart from
    RequestCode, which holds RocketMQ's numbers only.

    LIST_PENDING_TRANSACTIONS (admin -> broker, ``orbitmq transaction list``): the broker's
    unresolved transactions. Optional extField ``limit`` (default 1000). Body (JSON):
    ``{"brokerName", "brokerAddr", "truncated": bool, "transactions": [{"topic", "queueId",
    "msgId", "transactionId", "offsetMsgId", "producerGroup", "tags", "keys", "bornTimestamp",
    "ageMs", "checkTimes", "originOffset", "halfOffset", "commitLogOffset", "messages"}]}``,
    oldest first (``messages``: how many messages the transaction holds: 1 but for a batch).

    Transactions by the batch (docs/transactions.md): a batch of messages of one topic and queue
    stored as ONE half message, committed or rolled back as a unit, checked back as a unit.
    Headers in :mod:`orbitmq.protocol.extension_headers`.

    SEND_TRANSACTION_BATCH (producer -> broker): header SendTransactionBatchRequestHeader
    (``producerGroup``, ``topic``, ``queueId``, ``bornTimestamp``, ``count``, ``properties``:
    the batch's own properties, with its transaction id as UNIQ_KEY), body a batch body
    (:mod:`orbitmq.protocol.batch`; every entry with a UNIQ_KEY, none delayed or transactional).
    Answered as a send (``msgId`` the half message's offset id, ``queueId``, ``queueOffset`` its
    half queue offset, ``transactionId``).

    END_TRANSACTION_BATCH (producer -> broker, two-way or oneway): header
    EndTransactionBatchRequestHeader (``producerGroup``, ``tranStateTableOffset``,
    ``commitLogOffset``, ``commitOrRollback`` 0/8/12, ``transactionId``,
    ``fromTransactionCheck``). A commit re-stores every message of the batch under its topic in
    one write; the answer (once durable) carries ``queueId``, ``queueOffset`` (the first
    message's) and ``count``. A verdict on an ended batch: SUCCESS (same) or TRANSACTION_FAILED.

    CHECK_TRANSACTION_BATCH_STATE (broker -> producer, oneway): a pending batch checked back as a
    unit; header CheckTransactionBatchStateRequestHeader, body the half message (stored form,
    under its real topic, the batch body as its body). The producer answers with
    END_TRANSACTION_BATCH marked ``fromTransactionCheck``. A RocketMQ client never receives one.

    PULL_MESSAGE_BULK (consumer -> broker): PULL_MESSAGE's header and answer, bounded by the
    broker's ``bulk_pull_count_max`` / ``bulk_pull_bytes_max`` instead of the
    ``max_transfer_*_on_message_in_memory`` bounds every RocketMQ pull keeps (bulk readers such
    as Spark's source: few large answers instead of many of 32 messages).
    """

    LIST_PENDING_TRANSACTIONS = 9100
    SEND_TRANSACTION_BATCH = 9101
    END_TRANSACTION_BATCH = 9102
    CHECK_TRANSACTION_BATCH_STATE = 9103
    PULL_MESSAGE_BULK = 9104


class ResponseCode(enum.IntEnum):
    """Response codes (RocketMQ's ``RemotingSysResponseCode`` + ``ResponseCode``)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    NOT_SUPPORTED = 3  # Java calls it REQUEST_CODE_NOT_SUPPORTED; kept as an alias below
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29  # RocketMQ 5: a request field out of range or malformed
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202  # sic, RocketMQ's spelling
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    FLOW_CONTROL = 215
    ILLEGAL_OPERATION = 604  # RocketMQ 5; OrbitMQ: a name server refusing a broker identity
    # OrbitMQ only: a SQL92 subscription on a broker whose enable_property_filter is off.
    # RocketMQ answers SYSTEM_ERROR with the same remark; a code of its own tells the SDK (and a
    # person reading a log) that this is the broker's setting, not a failure.
    FILTER_NOT_SUPPORTED = 9001
    # OrbitMQ only: a topic or subscription group not created because the broker holds
    # ``topics_max`` / ``groups_max`` of them already; the remark names the setting.
    LIMIT_EXCEEDED = 9002


# Requests that store a message: a malformed one is refused with MESSAGE_ILLEGAL, which RocketMQ's
# producers do not retry (the same message would be refused again by any broker).
SEND_FAMILY = frozenset({
    RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2,
    RequestCode.CONSUMER_SEND_MSG_BACK,
})


def bad_request_code(request_code: int) -> ResponseCode:
    """The answer to a request whose header or body does not parse or holds a value out of range
    (the remark names the field): MESSAGE_ILLEGAL for the send family, INVALID_PARAMETER (what
    RocketMQ 5 answers to a bad parameter) for everything else. Never SYSTEM_ERROR: that one means
    the server failed, not the request."""
    return ResponseCode.MESSAGE_ILLEGAL if request_code in SEND_FAMILY else ResponseCode.INVALID_PARAMETER


class LanguageCode(enum.IntEnum):
    """The ``language`` of a command: a name in JSON headers, one byte in binary headers.

    Unknown names or numbers from a peer decode as OTHER (see ``parse``): a client we have never
    heard of must still be served.
    """

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12

    @classmethod
    def parse(cls, value: object) -> LanguageCode:
        """Lenient lookup by name (any case) or number; anything unknown is OTHER."""
        if isinstance(value, str):
            member = cls.__members__.get(value.upper())
            return member if member is not None else cls.OTHER
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                return cls.OTHER
        return cls.OTHER


class SerializeType(enum.IntEnum):
    """How the header of a frame is encoded (the high byte of the second length word)."""

    JSON = 0
    ROCKETMQ = 1
