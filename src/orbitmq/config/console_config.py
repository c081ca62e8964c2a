"""Settings of the web console."""

from __future__ import annotations

import dataclasses

from orbitmq.config.checks import (
    host_problem,
    namesrv_addrs_problem,
    networks_problem,
    optional_password_problem,
    optional_username_problem,
    token_problem,
)
from orbitmq.config.fields import (
    CONSOLE_TOKEN_MIN_CHARS,
    DAY_MS,
    HOUR_MS,
    PORT_MAX,
    ConfigError,
    setting,
    validate,
)
from orbitmq.config.shared import (
    tls_client_settings,
    tls_server_settings,
)
from orbitmq.security.model import PASSWORD_MAX_CHARS, PASSWORD_MIN_CHARS
from orbitmq.security.tls import TlsClientAuth, TlsServerMode

__all__ = ["ConsoleConfig"]


@dataclasses.dataclass(frozen=True)
class ConsoleConfig:
    """Settings of the web console (``orbitmq console``, and ``orbitmq standalone``'s console).

    The console refuses to start on an address other than loopback without ``console_token``
    (checked when it starts, not here: the fields come from several layers, TOML to flags).
    """

    namesrv_addr: str = setting(
        "127.0.0.1:9876", "name servers of the cluster to show, HOST:PORT separated by ';'",
        check=namesrv_addrs_problem, allowed=f"HOST:PORT[;HOST:PORT...] with ports 1..{PORT_MAX}")
    console_listen_host: str = setting(
        "127.0.0.1", "address the console listens on (not loopback: console_token required)",
        check=host_problem, allowed="a host name or IP address")
    console_listen_port: int = setting(8080, "port of the console (0: a free one)", 0, PORT_MAX)
    console_token: str = setting(
        "", "secret asked by the login form or as 'Authorization: Bearer' (empty: none)",
        check=token_problem, allowed=f"empty, or {CONSOLE_TOKEN_MIN_CHARS}+ characters without spaces",
        secret=True)
    console_session_ttl_ms: int = setting(
        12 * HOUR_MS, "how long a login lasts without being used", 60_000, 30 * DAY_MS)
    console_sessions_max: int = setting(
        1000, "logins remembered at once; the oldest is forgotten past it", 1, 1_000_000)
    console_sample_interval_ms: int = setting(
        5000, "how often each broker's runtime info is read for the charts", 100, HOUR_MS)
    console_history_max: int = setting(
        720, "runtime info samples kept per broker (the charts' span)", 2, 100_000)
    console_rows_max: int = setting(
        200, "most messages, dead letters or transactions one page lists", 1, 10_000)
    console_admin_timeout_ms: int = setting(
        5000, "how long one request to a name server or broker may take", 100, 300_000)
    console_access_key: str = setting(
        "", "user the console signs with (cluster with authentication); people log in as users",
        check=optional_username_problem, allowed="empty, or a user name (letters, digits, _ and -)")
    console_secret_key: str = setting(
        "", "secret key (password) of console_access_key", check=optional_password_problem,
        allowed=f"empty, or {PASSWORD_MIN_CHARS} to {PASSWORD_MAX_CHARS} characters",
        secret=True)
    console_user_sessions_max: int = setting(
        100, "users logged in at once (each has its own connections to the cluster); the least "
        "recently active is logged out past it", 1, 10_000)
    console_login_failures_max: int = setting(
        10, "failed logins of one address in a minute before its wrong ones get 429", 1, 10_000)
    console_trusted_proxies: str = setting(
        "", "reverse proxies (IPs or CIDRs, by commas) whose X-Forwarded-For/-Proto are believed",
        check=networks_problem, allowed="empty, or IP addresses and CIDRs separated by commas")
    console_request_head_timeout_ms: int = setting(
        30_000, "a connection whose request line and headers take longer is closed",
        100, HOUR_MS)
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

    def __post_init__(self) -> None:
        validate(self)
        if bool(self.console_access_key) != bool(self.console_secret_key):
            raise ConfigError(
                "console_secret_key" if self.console_access_key else "console_access_key",
                "console_access_key and console_secret_key go together: set both or neither")
