"""Settings of a broker (its store's are StoreConfig, in the field ``store``)."""

from __future__ import annotations

import dataclasses
import enum
import re

from orbitmq.config.checks import (
    controller_addr_problem,
    host_port_problem,
    host_problem,
    name_problem,
    namesrv_addrs_problem,
    optional_host_problem,
)
from orbitmq.config.fields import (
    DAY_MS,
    HOUR_MS,
    I32_MAX,
    PORT_MAX,
    QUEUE_NUMS_MAX,
    ConfigError,
    MiB,
    setting,
    validate,
)
from orbitmq.config.shared import (
    MetricsExporterType,
    access_settings,
    limit_settings,
    metrics_settings,
    tls_client_settings,
    tls_server_settings,
)
from orbitmq.config.store_config import StoreConfig
from orbitmq.protocol.topics import TRACE_TOPIC
from orbitmq.security.settings import AuthenticationStrategy
from orbitmq.security.tls import TlsClientAuth, TlsServerMode

__all__ = ["BrokerRole", "BrokerConfig"]

_TOPIC_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")  # RocketMQ's topic characters


class BrokerRole(enum.StrEnum):
    """A broker's part in its broker set (RocketMQ's ``brokerRole``): a master takes sends and
    streams its commit log to its slaves; a SYNC_MASTER answers SEND_OK only once a slave holds
    the bytes; a SLAVE stores the master's bytes and serves reads."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@dataclasses.dataclass(frozen=True)
class BrokerConfig:
    """Settings of a broker (its store settings live in ``store``)."""

    broker_name: str = setting(
        "broker-a", "name of the broker set; one address per name and id on a name server",
        check=name_problem, allowed="1 to 127 letters, digits or _ . % | -")
    broker_cluster_name: str = setting("DefaultCluster", "cluster the broker belongs to",
                                       check=name_problem, allowed="1 to 127 letters, digits or _ . % | -")
    broker_id: int = setting(0, "0 for the master of the broker set, above 0 for a slave "
                             "(broker_role says which)", 0, I32_MAX)
    listen_host: str = setting("127.0.0.1", "address to listen on (0.0.0.0: every interface)",
                               check=host_problem, allowed="a host name or IP address")
    listen_port: int = setting(10911, "port to listen on (0: a free one)", 0, PORT_MAX)
    broker_ip: str = setting(
        "", "address advertised to clients (default: the listening address)",
        check=optional_host_problem, allowed="empty, a host name or an IP address")
    namesrv_addr: str = setting(
        "", "name servers to register with, HOST:PORT separated by ';'", check=namesrv_addrs_problem,
        allowed=f"HOST:PORT[;HOST:PORT...] with ports 1..{PORT_MAX}")
    auto_create_topic: bool = setting(True, "create a topic on its first send (through TBW102)")
    auto_create_subscription_group: bool = setting(
        True, "create a consumer group on its first use")
    default_topic_queue_nums: int = setting(
        8, "queues of TBW102, the most an auto-created topic gets", 1, QUEUE_NUMS_MAX)
    register_broker_interval_ms: int = setting(
        30_000, "how often the broker registers with the name servers (they drop it after 120 s)",
        1, 60_000)
    client_channel_expire_ms: int = setting(
        120_000, "a client silent this long leaves its groups", 1, DAY_MS)
    long_polling_enable: bool = setting(True, "hold a pull that found nothing until messages come")
    short_polling_time_ms: int = setting(
        1000, "without long polling: how long a pull that found nothing is held", 1, HOUR_MS)
    long_polling_recheck_ms: int = setting(
        5000, "how often held pulls are checked again besides wake-ups", 1, HOUR_MS)
    max_frame_size: int = setting(
        16 * MiB, "bytes of the largest frame accepted; larger ones close the connection",
        4096, I32_MAX)
    max_in_flight_per_connection: int = setting(
        256, "requests of one connection handled at once; past it reading pauses", 1, 65_536)
    broker_permission: int = setting(
        6, "PermName bits: READ 4 (pulls allowed), WRITE 2 (sends allowed)", 0, 6,
        check=lambda v: "only the bits READ 4 and WRITE 2 may be set" if v & ~6 else None,
        allowed="0, 2, 4 or 6")
    flush_consumer_offset_interval_ms: int = setting(
        5000, "how often changed tables (consumer offsets...) are saved", 1, HOUR_MS)
    register_broker_timeout_ms: int = setting(
        6000, "how long a registration waits for a name server's answer", 1, 300_000)
    compressed_register: bool = setting(
        False, "send whole-table registrations zlib-compressed, RocketMQ's way (no topicSysFlag)")
    default_query_max_num: int = setting(
        32, "messages a lookup by unique key returns", 1, 10_000)
    max_msgs_num_batch: int = setting(
        64, "most messages a lookup by key returns", 1, 10_000)
    # -- message trace (docs/trace.md): RocketMQ's names and defaults --------------------------
    trace_topic_enable: bool = setting(
        False, "create msg_trace_topic_name (one queue) at start, for traced clients to write to")
    msg_trace_topic_name: str = setting(
        TRACE_TOPIC, "the trace topic trace_topic_enable creates",
        check=lambda v: None if _TOPIC_NAME.match(v) and len(v) <= 127 else
        "a topic name: 1 to 127 letters, digits or _ % | -",
        allowed="1 to 127 letters, digits or _ % | -")
    notify_consumer_ids_changed_enable: bool = setting(
        True, "tell a group's consumers when its membership changes")
    # SQL92 costs the broker a properties parse per scanned message, so the operator opts in.
    enable_property_filter: bool = setting(
        False, "accept SQL92 subscriptions (RocketMQ's enablePropertyFilter)")
    rebalance_lock_max_live_time_ms: int = setting(
        60_000, "orderly consumption: a queue lock not renewed this long is free", 1, DAY_MS)
    transaction_timeout_ms: int = setting(
        6000, "a half message is checked once it is this old", 1, DAY_MS)
    transaction_check_max: int = setting(
        15, "checks of one half message before it is discarded", 1, 10_000)
    transaction_check_interval_ms: int = setting(
        60_000, "how often unresolved half messages are checked", 1, DAY_MS)
    reject_transaction_message: bool = setting(
        False, "refuse transactional messages (NO_PERMISSION)")
    native_fast_path_enable: bool = setting(
        True, "store and answer plain sends in C, per socket read (docs/performance.md)")
    # -- limits (docs/limits.md): RocketMQ's names where it has them --------------------------
    broker_fast_failure_enable: bool = setting(
        True, "answer SYSTEM_BUSY to sends that waited too long in the broker")
    wait_time_mills_in_send_queue: int = setting(
        200, "a send that waited longer in the broker is answered SYSTEM_BUSY "
        "[TIMEOUT_CLEAN_QUEUE]", 1, HOUR_MS)
    os_page_cache_busy_time_out_mills: int = setting(
        1000, "a send held this long by a busy put is answered SYSTEM_BUSY [PCBUSY_CLEAN_QUEUE]",
        1, HOUR_MS)
    topics_max: int = setting(
        100_000, "topics a broker holds; creating more (auto-creation too) is refused", 1,
        100_000_000)
    groups_max: int = setting(
        100_000, "subscription groups a broker holds; creating more is refused", 1, 100_000_000)
    # -- RocketMQ 5: the gRPC endpoint, POP consumption, timer messages (docs/rocketmq5.md) --
    grpc_listen_port: int = setting(
        8081, "port of the RocketMQ 5 gRPC endpoint (0: a free one, -1: none)", -1, PORT_MAX)
    grpc_message_size_max: int = setting(
        16 * 1024 * 1024, "largest gRPC request or answer in bytes", 64 * 1024, 256 * 1024 * 1024)
    grpc_long_polling_max_ms: int = setting(
        30_000, "longest a 5.x receive waits for messages", 0, 300_000)
    pop_invisible_time_default_ms: int = setting(
        60_000, "how long received messages stay invisible when the client names no time",
        1_000, DAY_MS)
    pop_invisible_time_max_ms: int = setting(
        12 * 3_600_000, "longest invisible time a client may ask for", 1_000, 7 * DAY_MS)
    pop_auto_renew_max_ms: int = setting(
        3 * 3_600_000, "how long a push consumer's messages are renewed while it lives",
        1_000, 7 * DAY_MS)
    pop_inflight_max: int = setting(
        200_000, "messages received and not yet acked per broker (receives wait above it)",
        16, 10_000_000)
    pop_log_compact_bytes: int = setting(
        64 * 1024 * 1024, "the in-flight log is rewritten once it grows past this", 4096, 2**40)
    lite_topic_ttl_s: int = setting(
        86_400, "a lite topic with no new message for this long expires (its queue and state "
        "are removed; RocketMQ's most: 30 days)", 1, 30 * 86_400)
    lite_topics_max: int = setting(
        1_000_000, "lite topics a broker holds; a send creating more is refused", 1, 100_000_000)
    lite_subscription_quota: int = setting(
        2_000, "lite topics one lite consumer may subscribe to (told to clients in the settings)",
        1, 1_000_000)
    timer_precision_ms: int = setting(
        100, "a timer message is delivered within this much after its time", 10, 1000)
    timer_max_delay_s: int = setting(
        3 * 86_400, "the furthest ahead a timer message may ask to be delivered", 1, 40 * 86_400)
    recall_message_enable: bool = setting(
        False, "answer RECALL_MESSAGE / RecallMessage: cancel a timer message not yet delivered")
    metrics_exporter_type: MetricsExporterType = metrics_settings()["metrics_exporter_type"]
    metrics_prom_exporter_host: str = metrics_settings()["metrics_prom_exporter_host"]
    metrics_prom_exporter_port: int = metrics_settings()["metrics_prom_exporter_port"]
    metrics_rpc_latency_sample_every: int = metrics_settings()["metrics_rpc_latency_sample_every"]
    metrics_token: str = metrics_settings()["metrics_token"]
    frame_buffer_budget_mb: int = limit_settings()["frame_buffer_budget_mb"]
    server_channel_max_idle_ms: int = limit_settings()["server_channel_max_idle_ms"]
    frame_read_timeout_ms: int = limit_settings()["frame_read_timeout_ms"]
    connections_max: int = limit_settings()["connections_max"]
    connections_per_ip_max: int = limit_settings()["connections_per_ip_max"]
    fd_reserve: int = limit_settings()["fd_reserve"]
    # -- replication (docs/replication.md): RocketMQ's names and defaults ----------------------
    broker_role: BrokerRole = setting(
        BrokerRole.ASYNC_MASTER, "ASYNC_MASTER, SYNC_MASTER (SEND_OK once a slave holds the "
        "bytes) or SLAVE (broker_id above 0)")
    ha_listen_port: int = setting(
        -1, "port slaves replicate from (-1: listen_port + 1, a free one when that is 0; 0: free)",
        -1, PORT_MAX)
    ha_master_address: str = setting(
        "", "a slave's master HA address HOST:PORT (empty: the name server tells it)",
        check=lambda v: None if v == "" else host_port_problem(v),
        allowed=f"empty, or HOST:PORT with a port 1..{PORT_MAX}")
    ha_send_heartbeat_interval_ms: int = setting(
        5000, "an idle HA connection sends a heartbeat this often (either side)", 1, HOUR_MS)
    ha_housekeeping_interval_ms: int = setting(
        20_000, "an HA connection silent this long is closed (either side)", 1, DAY_MS)
    ha_transfer_batch_size: int = setting(
        32 * 1024, "bytes a master streams per frame (one larger message still goes whole)",
        1024, 64 * MiB)
    ha_max_gap_not_in_sync: int = setting(
        256 * MiB, "SYNC_MASTER: SLAVE_NOT_AVAILABLE when the best slave lags this many bytes",
        1, 2**62)
    slave_read_enable: bool = setting(
        False, "pulls may be told to read from a slave (suggestWhichBrokerId) when they lag")
    access_message_in_memory_max_ratio: int = setting(
        40, "% of RAM a consumer may lag behind the commit log end before a slave is suggested",
        0, 100)
    slave_sync_interval_ms: int = setting(
        10_000, "how often a slave copies topics, offsets and groups from its master",
        100, HOUR_MS)
    enable_split_metadata: bool = setting(
        True, "a slave's copy of the topic table goes in pages (RocketMQ 5's enableSplitMetadata)")
    split_metadata_size: int = setting(
        2000, "topics a page of the topic table holds at most, asked by a slave and answered "
        "(RocketMQ 5's splitMetadataSize)", 1, 1_000_000)
    # -- failover (docs/failover.md): RocketMQ 5's names where it has them ---------------------
    enable_controller_mode: bool = setting(
        False, "elect the broker set's master through controller_addr (etcd); needs broker_id >= 1")
    controller_addr: str = setting(
        "", "etcd endpoints of controller mode: etcd://HOST:PORT[,HOST:PORT...]",
        check=controller_addr_problem, allowed=f"empty, or etcd://HOST:PORT[,HOST:PORT...] "
        f"with ports 1..{PORT_MAX}")
    controller_lease_ttl_s: int = setting(
        6, "a master's etcd lease: a new master is elected this long after it was last renewed",
        2, 600)
    controller_fence_margin_ms: int = setting(
        1000, "a master stops acknowledging this long before its lease can expire in etcd",
        100, 300_000)
    controller_poll_interval_ms: int = setting(
        250, "how often a broker reads the broker set's state from etcd", 20, 60_000)
    controller_request_timeout_ms: int = setting(
        1000, "how long one etcd request may take before it counts as failed", 50, 60_000)
    ha_max_time_slave_not_catchup_ms: int = setting(
        15_000, "controller mode: an in-sync slave behind the master this long leaves the set",
        100, DAY_MS)
    authentication_enabled: bool = access_settings()["authentication_enabled"]
    authorization_enabled: bool = access_settings()["authorization_enabled"]
    init_authentication_user: str = access_settings()["init_authentication_user"]
    inner_client_authentication_credentials: str = access_settings()[
        "inner_client_authentication_credentials"]
    authentication_whitelist: str = access_settings()["authentication_whitelist"]
    authentication_strategy: AuthenticationStrategy = access_settings()[
        "authentication_strategy"]
    stateful_authentication_cache_expired_second: int = access_settings()[
        "stateful_authentication_cache_expired_second"]
    audit_allowed: bool = access_settings()["audit_allowed"]
    allow_anonymous: bool = access_settings()["allow_anonymous"]
    tls_server_mode: TlsServerMode = tls_server_settings()["tls_server_mode"]
    tls_server_cert_path: str = tls_server_settings()["tls_server_cert_path"]
    tls_server_key_path: str = tls_server_settings()["tls_server_key_path"]
    tls_server_trust_cert_path: str = tls_server_settings()["tls_server_trust_cert_path"]
    tls_server_need_client_auth: TlsClientAuth = tls_server_settings()[
        "tls_server_need_client_auth"]
    tls_enable: bool = tls_client_settings()["tls_enable"]
    tls_client_trust_cert_path: str = tls_client_settings()["tls_client_trust_cert_path"]
    tls_client_cert_path: str = tls_client_settings()["tls_client_cert_path"]
    tls_client_key_path: str = tls_client_settings()["tls_client_key_path"]
    tls_client_check_hostname: bool = tls_client_settings()["tls_client_check_hostname"]
    store: StoreConfig = setting(StoreConfig(), "the store's settings ([store] in TOML)")

    def __post_init__(self) -> None:
        validate(self)

    def role_problem(self) -> str | None:
        """Why ``broker_role`` and ``broker_id`` do not go together (checked once every layer of
        settings is applied: a TOML file may name the role and a flag the id), or None."""
        if self.enable_controller_mode:
            return self._controller_problem()
        if self.broker_role is BrokerRole.SLAVE and self.broker_id == 0:
            return "broker_role = SLAVE needs broker_id above 0 (0 is the master's id)"
        if self.broker_role is not BrokerRole.SLAVE and self.broker_id != 0:
            return (f"broker_role = {self.broker_role.value} needs broker_id 0 (a master); "
                    f"broker_id {self.broker_id} is a slave's id: set broker_role = SLAVE")
        return None

    def _controller_problem(self) -> str | None:
        """Controller mode: etcd decides who is master; ``broker_id`` names this member."""
        if not self.controller_addr:
            return "enable_controller_mode needs controller_addr (etcd://HOST:PORT[,...])"
        if self.broker_id < 1:
            return ("enable_controller_mode needs broker_id >= 1: this member's id in its broker "
                    "set (it registers as 0 while it is the master)")
        if self.broker_role is BrokerRole.SLAVE:
            return ("enable_controller_mode: broker_role says how this broker acts as master "
                    "(SYNC_MASTER or ASYNC_MASTER); every member starts as a slave")
        if self.controller_fence_margin_ms * 2 > self.controller_lease_ttl_s * 1000:
            return (f"controller_fence_margin_ms {self.controller_fence_margin_ms} must be at most "
                    f"half of controller_lease_ttl_s ({self.controller_lease_ttl_s} s)")
        return None

    def check_whole(self) -> None:
        """ConfigError when the fields disagree with each other (see role_problem)."""
        problem = self.role_problem()
        if problem is not None:
            raise ConfigError("broker_role", problem)

    @property
    def effective_ha_listen_port(self) -> int:
        """The port the HA server binds: ``ha_listen_port``, or listen_port + 1 for -1."""
        if self.ha_listen_port >= 0:
            return self.ha_listen_port
        return self.listen_port + 1 if 0 < self.listen_port < PORT_MAX else 0
