"""Settings of a name server."""

from __future__ import annotations

import dataclasses

from orbitmq.config.checks import (
    host_problem,
)
from orbitmq.config.fields import (
    DAY_MS,
    HOUR_MS,
    PORT_MAX,
    setting,
    validate,
)
from orbitmq.config.shared import (
    MetricsExporterType,
    access_settings,
    limit_settings,
    metrics_settings,
    tls_server_settings,
)
from orbitmq.security.settings import AuthenticationStrategy
from orbitmq.security.tls import TlsClientAuth, TlsServerMode

__all__ = ["NamesrvConfig"]


@dataclasses.dataclass(frozen=True)
class NamesrvConfig:
    """Settings of a name server."""

    listen_host: str = setting("127.0.0.1", "address to listen on (0.0.0.0: every interface)",
                               check=host_problem, allowed="a host name or IP address")
    listen_port: int = setting(9876, "port to listen on (0: a free one)", 0, PORT_MAX)
    broker_expire_ms: int = setting(
        120_000, "a broker silent this long is dropped from the routes", 1, DAY_MS)
    scan_not_active_broker_interval_ms: int = setting(
        5_000, "how often silent brokers are looked for", 1, HOUR_MS)
    register_body_decompressed_max_bytes: int = setting(
        64 * 1024 * 1024, "the most a compressed REGISTER_BROKER body may inflate to "
        "(refused LIMIT_EXCEEDED past it)", 1024, 2**31 - 1)
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
    auth_config_path: str = setting(
        "", "file of the name server's users and ACLs (0600); empty: only the init user and "
        "the inner credentials, kept in memory", allowed="empty or a file path")
    tls_server_mode: TlsServerMode = tls_server_settings()["tls_server_mode"]
    tls_server_cert_path: str = tls_server_settings()["tls_server_cert_path"]
    tls_server_key_path: str = tls_server_settings()["tls_server_key_path"]
    tls_server_trust_cert_path: str = tls_server_settings()["tls_server_trust_cert_path"]
    tls_server_need_client_auth: TlsClientAuth = tls_server_settings()[
        "tls_server_need_client_auth"]

    def __post_init__(self) -> None:
        validate(self)
