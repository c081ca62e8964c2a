"""The groups of fields several server configs share (metrics, connection limits, access
control, TLS of the ports and of the server's own connections): each config declares the
fields in its own order, their settings come from here."""

from __future__ import annotations

import enum
from typing import Any

from orbitmq.config.checks import (
    optional_host_problem,
    parsed_by,
    token_problem,
)
from orbitmq.config.fields import (
    CONSOLE_TOKEN_MIN_CHARS,
    DAY_MS,
    PORT_MAX,
    setting,
)
from orbitmq.security.settings import (
    STATEFUL_EXPIRED_SECOND_MAX,
    AuthenticationStrategy,
    parse_init_user,
    parse_inner_credentials,
    parse_whitelist,
)
from orbitmq.security.tls import TlsClientAuth, TlsServerMode

__all__ = [
    "MetricsExporterType", "metrics_settings", "limit_settings", "access_settings",
    "tls_server_settings", "tls_client_settings",
]


class MetricsExporterType(enum.StrEnum):
    """How a server exports its metrics (RocketMQ 5's ``metricsExporterType``; OrbitMQ serves
    DISABLE and PROM, a Prometheus text endpoint at ``/metrics``)."""

    DISABLE = "DISABLE"
    PROM = "PROM"


def metrics_settings() -> dict[str, Any]:
    """The metrics fields every server config has, with RocketMQ 5's defaults."""
    return {
        "metrics_exporter_type": setting(
            MetricsExporterType.DISABLE, "PROM: serve Prometheus metrics at "
            "http://HOST:PORT/metrics; DISABLE: none"),
        "metrics_prom_exporter_host": setting(
            "", "address of the metrics endpoint (default: the server's listen_host)",
            check=optional_host_problem, allowed="empty, a host name or an IP address"),
        "metrics_prom_exporter_port": setting(
            5557, "port of the metrics endpoint (0: a free one)", 0, PORT_MAX),
        "metrics_rpc_latency_sample_every": setting(
            16, "time one request in this many for rocketmq_rpc_latency (1: every one)",
            1, 1_000_000),
        "metrics_token": setting(
            "", "secret a scrape must send as 'Authorization: Bearer' (empty: none)",
            check=token_problem, allowed=f"empty, or {CONSOLE_TOKEN_MIN_CHARS}+ characters without "
            "spaces", secret=True),
    }


def limit_settings() -> dict[str, Any]:
    """The connection limits every remoting server has (transport/limits.py; docs/limits.md)."""
    return {
        "frame_buffer_budget_mb": setting(
            256, "MiB all partial frames of the server may hold together; the connection "
            "that would pass it is closed", 1, 1 << 20),
        "server_channel_max_idle_ms": setting(
            120_000, "a connection that sent nothing this long is closed (0: never)", 0, DAY_MS),
        "frame_read_timeout_ms": setting(
            30_000, "a frame begun must be whole within this, or the connection is closed "
            "(0: no limit)", 0, DAY_MS),
        "connections_max": setting(
            10_000, "connections open at once; more are closed as they are accepted (0: no "
            "limit)", 0, 10_000_000),
        "connections_per_ip_max": setting(
            1_000, "connections of one peer address at once (0: no limit)", 0, 10_000_000),
        "fd_reserve": setting(
            64, "file descriptors below RLIMIT_NOFILE that sockets may not take: the store's "
            "(0: none)", 0, 1_000_000),
    }


def access_settings() -> dict[str, Any]:
    """The access-control fields every server config has (RocketMQ 5's names; docs/security.md)."""
    return {
        "authentication_enabled": setting(
            False, "every request must be signed by a known, enabled user"),
        "authorization_enabled": setting(
            False, "every request must be allowed by the user's ACL (needs authentication)"),
        "init_authentication_user": setting(
            "", 'the first Super user, created at start when there is none: JSON '
            '{"username": ..., "password": ...}', check=parsed_by(parse_init_user),
            allowed='empty, or {"username": "NAME", "password": "6+ characters"}', secret=True),
        "inner_client_authentication_credentials": setting(
            "", 'what this server signs its own requests with (a Super user of the others): '
            'JSON {"accessKey": ..., "secretKey": ...}',
            check=parsed_by(parse_inner_credentials),
            allowed='empty, or {"accessKey": "NAME", "secretKey": "SECRET"}', secret=True),
        "authentication_whitelist": setting(
            "", "request codes that need no credentials, separated by commas",
            check=parsed_by(parse_whitelist), allowed="request codes separated by commas"),
        "authentication_strategy": setting(
            AuthenticationStrategy.STATELESS, "stateless: check every request's signature; stateful: "
            "once per connection and user (with TLS)", allowed="stateless or stateful"),
        "stateful_authentication_cache_expired_second": setting(
            60, "stateful: seconds a connection stays trusted for a user", 1,
            STATEFUL_EXPIRED_SECOND_MAX),
        "audit_allowed": setting(False, "log a line for every allowed request too"),
        "allow_anonymous": setting(
            False, "start on an address other than loopback with authentication off "
            "(a warning at every start)"),
    }


def tls_server_settings() -> dict[str, Any]:
    """TLS of a server's ports, RocketMQ's names and modes (docs/tls.md)."""
    return {
        "tls_server_mode": setting(
            TlsServerMode.DISABLED, "disabled; permissive: TLS and plaintext on the same ports "
            "(told apart by the first byte); enforcing: TLS only",
            allowed="disabled, permissive or enforcing"),
        "tls_server_cert_path": setting(
            "", "PEM certificate (chain) the server's ports show (needed unless disabled)",
            allowed="empty or a file path"),
        "tls_server_key_path": setting(
            "", "PEM private key of tls_server_cert_path", allowed="empty or a file path"),
        "tls_server_trust_cert_path": setting(
            "", "PEM CA certificate(s) that sign the clients' certificates",
            allowed="empty or a file path"),
        "tls_server_need_client_auth": setting(
            TlsClientAuth.NONE, "client certificates signed by tls_server_trust_cert_path: "
            "none asked, optional (checked when shown) or require",
            allowed="none, optional or require"),
    }


def tls_client_settings() -> dict[str, Any]:
    """TLS of a server's own connections (to name servers, a master, brokers; docs/tls.md)."""
    return {
        "tls_enable": setting(
            False, "this server's own connections (to name servers, a master, brokers) use TLS"),
        "tls_client_trust_cert_path": setting(
            "", "PEM CA certificate(s) the servers' certificates must chain to (empty: the "
            "system's roots)", allowed="empty or a file path"),
        "tls_client_cert_path": setting(
            "", "PEM certificate shown to servers that ask for one (with tls_client_key_path)",
            allowed="empty or a file path"),
        "tls_client_key_path": setting(
            "", "PEM private key of tls_client_cert_path", allowed="empty or a file path"),
        "tls_client_check_hostname": setting(
            True, "a server's certificate must name the host or IP address connected to"),
    }
