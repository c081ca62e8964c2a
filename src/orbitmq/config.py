"""Frozen dataclass configs with RocketMQ's defaults, plus a tiny TEST_MIN preset.

Names are RocketMQ's in snake_case; units go last (``flush_interval_ms``). The CLI maps one flag
onto each field and TOML files use the same names.

Every field is declared with :func:`setting`: its default, a one-line doc (the CLI's ``--help``
text) and the values it accepts (a numeric range, or a check for text). Each config checks all of
them when it is built (defaults, a TOML file, environment variables, flags or code alike) and
raises :class:`ConfigError` with one line naming the field, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import ipaddress
import math
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.security.model import PASSWORD_MAX_CHARS, PASSWORD_MIN_CHARS, check_username
from orbitmq.security.settings import parse_init_user, parse_inner_credentials, parse_whitelist
from orbitmq.security.tls import TlsClientAuth, TlsServerMode

__all__ = [
    "FlushDiskType",
    "BrokerRole",
    "MetricsExporterType",
    "StoreConfig",
    "BrokerConfig",
    "NamesrvConfig",
    "ConsoleConfig",
    "TEST_MIN_STORE",
    "ConfigError",
    "Range",
    "setting",
    "field_doc",
    "field_allowed",
    "load_toml",
    "replace_fields",
    "parse_delay_levels_ms",
    "parse_controller_addr",
    "QUEUE_NUMS_MAX",
]

GiB = 1024 * 1024 * 1024
MiB = 1024 * 1024
DELAY_LEVELS_MAX = 64  # a bound on the schedule topic's queues (RocketMQ ships 18 levels)
# Not a RocketMQ limit, but a bound: stats and registration walk every queue of a topic.
QUEUE_NUMS_MAX = 1024
PORT_MAX = 65535
I32_MAX = 2**31 - 1
HOUR_MS = 3_600_000
CONSOLE_TOKEN_MIN_CHARS = 16  # a guessable console secret is no protection
DAY_MS = 24 * HOUR_MS
CONSUME_QUEUE_ENTRY_SIZE = 20  # bytes of one consume queue entry (files are whole entries)
_DELAY_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_NAME = re.compile(r"^[A-Za-z0-9_.%|-]{1,127}$")  # broker and cluster names


class ConfigError(ClientError, ValueError):
    """A config value outside what its field accepts; the message is one line naming the
    field, the value and the allowed values. ``field`` is the field's name."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


@dataclasses.dataclass(frozen=True)
class Range:
    """Numbers ``low..high`` (inclusive; ``low_open`` excludes ``low``, for ratios in (0, 1])."""

    low: float
    high: float
    low_open: bool = False

    def contains(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):
            return False
        return (self.low < value if self.low_open else self.low <= value) and value <= self.high

    def describe(self) -> str:
        if self.low_open:
            return f"({self.low:g}, {self.high:g}]"
        return f"{self.low:g}..{self.high:g}" if isinstance(self.low, float) \
            else f"{self.low}..{self.high}"


def setting(default: Any, doc: str, low: float | None = None, high: float | None = None, *,
            low_open: bool = False, check: Callable[[Any], str | None] | None = None,
            allowed: str | None = None, secret: bool = False) -> Any:
    """A config field: its default, its one-line documentation and what it accepts (a range
    ``low..high`` for numbers, or ``check`` returning why a value is refused, with ``allowed``
    saying in words what it accepts). A ``secret`` field's value is never shown in a refusal."""
    bounds = Range(low, high, low_open) if low is not None and high is not None else None
    metadata = {"doc": doc, "range": bounds, "check": check, "secret": secret,
                "allowed": allowed if allowed is not None else (bounds.describe() if bounds else "")}
    if dataclasses.is_dataclass(default):
        return dataclasses.field(default_factory=lambda: default, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def field_doc(f: dataclasses.Field[Any]) -> str:
    """The field's one-line documentation ("" for a field declared without :func:`setting`)."""
    return str(f.metadata.get("doc", ""))


def field_allowed(f: dataclasses.Field[Any]) -> str:
    """What the field accepts, in words ("" when anything of its type goes)."""
    return str(f.metadata.get("allowed", ""))


def _validate(cfg: Any) -> None:
    """Check every field of ``cfg`` against its setting; ConfigError for the first refused."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        bounds: Range | None = f.metadata.get("range")
        check: Callable[[Any], str | None] | None = f.metadata.get("check")
        if bounds is not None and (isinstance(value, bool) or not bounds.contains(value)):
            raise ConfigError(f.name, f"{f.name} = {value!r} is out of range; allowed: "
                                      f"{field_allowed(f)}")
        reason = check(value) if check is not None else None
        if reason is not None:
            shown = "(hidden)" if f.metadata.get("secret") else repr(value)
            raise ConfigError(f.name, f"{f.name} = {shown} is refused ({reason}); allowed: "
                                      f"{field_allowed(f)}")


# ------------------------------------------------------------------------------ text checks
def _not_blank(value: str) -> str | None:
    return "it is blank" if not value.strip() else None


def _name(value: str) -> str | None:
    return None if _NAME.match(value) else "not a name of 1 to 127 letters, digits or _ . % | -"


def _host(value: str) -> str | None:
    if not value.strip() or any(c.isspace() for c in value):
        return "not a host name or IP address"
    return None


def _optional_host(value: str) -> str | None:
    return None if value == "" else _host(value)


def host_port_problem(addr: str) -> str | None:
    """Why ``addr`` is not ``host:port`` with a port 1..65535 (None when it is)."""
    host, _, port = addr.rpartition(":")
    if not host or _host(host) or not port.isdigit() or not 0 < int(port) <= PORT_MAX:
        return f"{addr!r} is not HOST:PORT with a port 1..{PORT_MAX}"
    return None


def controller_addr_problem(value: str) -> str | None:
    """Why ``value`` is not empty nor ``etcd://HOST:PORT[,HOST:PORT...]`` (None when it is)."""
    if value == "":
        return None
    if not value.startswith("etcd://"):
        return "not etcd://HOST:PORT[,HOST:PORT...]"
    addrs = [a.strip() for a in value[len("etcd://"):].split(",")]
    if not addrs or any(not a for a in addrs):
        return "an empty endpoint"
    return next((p for p in map(host_port_problem, addrs) if p), None)


def parse_controller_addr(value: str) -> list[str]:
    """``etcd://a:2379,b:2379`` -> ``["a:2379", "b:2379"]`` (ConfigError when malformed)."""
    problem = controller_addr_problem(value) if value else "it is empty"
    if problem is not None:
        raise ConfigError("controller_addr", f"controller_addr = {value!r} is refused ({problem})")
    return [a.strip() for a in value[len("etcd://"):].split(",")]


def _namesrv_addrs(value: str) -> str | None:
    addrs = [a.strip() for a in value.replace(",", ";").split(";") if a.strip()]
    return next((p for p in map(host_port_problem, addrs) if p), None)


def _delete_hours(value: str) -> str | None:
    hours = [h.strip() for h in value.split(";") if h.strip()]
    if not hours or not all(h == "*" or (h.isdigit() and 0 <= int(h) <= 23) for h in hours):
        return "not hours 0-23 separated by ';' (or '*')"
    return None


def _delay_levels(value: str) -> str | None:
    try:
        parse_delay_levels_ms(value)
    except ValueError as e:  # the field's allowed values say what a delay looks like
        return str(e).removeprefix("message_delay_level: ").split(" such as")[0]
    return None


def _optional_username(value: str) -> str | None:
    if not value:
        return None
    try:
        check_username(value)
    except RemoteProtocolError as e:
        return str(e)
    return None


def _optional_password(value: str) -> str | None:
    if value and not PASSWORD_MIN_CHARS <= len(value) <= PASSWORD_MAX_CHARS:
        return f"not {PASSWORD_MIN_CHARS} to {PASSWORD_MAX_CHARS} characters"
    return None


def _token(value: str) -> str | None:
    if value and (len(value) < CONSOLE_TOKEN_MIN_CHARS or any(c.isspace() for c in value)):
        return f"shorter than {CONSOLE_TOKEN_MIN_CHARS} characters, or it holds spaces"
    return None


def file_mode_problem(text: str) -> str | None:
    """Why ``text`` is not a store file mode (store/file_mode.py; None when it is)."""
    digits = text.strip()
    if not digits or len(digits) > 4 or any(c not in "01234567" for c in digits):
        return "not an octal mode such as 0600 or 0640"
    mode = int(digits, 8)
    if mode & ~0o666:
        return "a data file takes no execute, setuid, setgid or sticky bit"
    if mode & 0o600 != 0o600:
        return "the broker itself must read and write its files (owner rw)"
    return None


def _networks_problem(value: str) -> str | None:
    for item in (i.strip() for i in value.split(",") if i.strip()):
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            return f"{item!r} is not an IP address or CIDR"
    return None


def _false_only(value: bool) -> str | None:
    return "OrbitMQ has no duplication (RocketMQ's DLedger feature)" if value else None


def _cq_entries(value: int) -> str | None:
    return (f"not a multiple of {CONSUME_QUEUE_ENTRY_SIZE} (a file holds whole entries)"
            if value % CONSUME_QUEUE_ENTRY_SIZE else None)


def parse_delay_levels_ms(spec: str) -> tuple[int, ...]:
    """``message_delay_level`` (``"1s 5s 10s 30s 1m ..."``) as the delay of each level in ms,
    level 1 first. Units: s, m, h, d; every delay a positive whole number of its unit.

    Raises:
        ValueError: an empty list, more than DELAY_LEVELS_MAX levels, or an item that is not
            ``<digits><unit>`` (the message names the item).
    """
    items = spec.split()
    if not items:
        raise ValueError("message_delay_level: no delay level given (expected e.g. '1s 5s 10s')")
    if len(items) > DELAY_LEVELS_MAX:
        raise ValueError(f"message_delay_level: {len(items)} levels, at most {DELAY_LEVELS_MAX}")
    levels = []
    for item in items:
        number, unit = item[:-1], item[-1:]
        if unit not in _DELAY_UNIT_MS or not number.isdigit() or int(number) <= 0:
            raise ValueError(f"message_delay_level: {item!r} is not a delay such as 5s, 10m, "
                             "2h or 1d (a positive whole number and a unit s, m, h or d)")
        levels.append(int(number) * _DELAY_UNIT_MS[unit])
    return tuple(levels)


class FlushDiskType(enum.StrEnum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(enum.StrEnum):
    """A broker's part in its broker set (RocketMQ's ``brokerRole``): a master takes sends and
    streams its commit log to its slaves; a SYNC_MASTER answers SEND_OK only once a slave holds
    the bytes; a SLAVE stores the master's bytes and serves reads."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class MetricsExporterType(enum.StrEnum):
    """How a server exports its metrics (RocketMQ 5's ``metricsExporterType``; OrbitMQ serves
    DISABLE and PROM, a Prometheus text endpoint at ``/metrics``)."""

    DISABLE = "DISABLE"
    PROM = "PROM"


def _metrics_settings() -> dict[str, Any]:
    """The metrics fields every server config has, with RocketMQ 5's defaults."""
    return {
        "metrics_exporter_type": setting(
            MetricsExporterType.DISABLE, "PROM: serve Prometheus metrics at "
            "http://HOST:PORT/metrics; DISABLE: none"),
        "metrics_prom_exporter_host": setting(
            "", "address of the metrics endpoint (default: the server's listen_host)",
            check=_optional_host, allowed="empty, a host name or an IP address"),
        "metrics_prom_exporter_port": setting(
            5557, "port of the metrics endpoint (0: a free one)", 0, PORT_MAX),
        "metrics_rpc_latency_sample_every": setting(
            16, "time one request in this many for rocketmq_rpc_latency (1: every one)",
            1, 1_000_000),
        "metrics_token": setting(
            "", "secret a scrape must send as 'Authorization: Bearer' (empty: none)",
            check=_token, allowed=f"empty, or {CONSOLE_TOKEN_MIN_CHARS}+ characters without "
            "spaces", secret=True),
    }


def _limit_settings() -> dict[str, Any]:
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


def _parsed_by(parse: Callable[[str], Any]) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        try:
            parse(value)
        except ValueError as e:
            return str(e)
        return None
    return check


def _access_settings() -> dict[str, Any]:
    """The access-control fields every server config has (RocketMQ 5's names; docs/security.md)."""
    return {
        "authentication_enabled": setting(
            False, "every request must be signed by a known, enabled user"),
        "authorization_enabled": setting(
            False, "every request must be allowed by the user's ACL (needs authentication)"),
        "init_authentication_user": setting(
            "", 'the first Super user, created at start when there is none: JSON '
            '{"username": ..., "password": ...}', check=_parsed_by(parse_init_user),
            allowed='empty, or {"username": "NAME", "password": "6+ characters"}', secret=True),
        "inner_client_authentication_credentials": setting(
            "", 'what this server signs its own requests with (a Super user of the others): '
            'JSON {"accessKey": ..., "secretKey": ...}',
            check=_parsed_by(parse_inner_credentials),
            allowed='empty, or {"accessKey": "NAME", "secretKey": "SECRET"}', secret=True),
        "authentication_whitelist": setting(
            "", "request codes that need no credentials, separated by commas",
            check=_parsed_by(parse_whitelist), allowed="request codes separated by commas"),
        "audit_allowed": setting(False, "log a line for every allowed request too"),
        "allow_anonymous": setting(
            False, "start on an address other than loopback with authentication off "
            "(a warning at every start)"),
    }


def _tls_server_settings() -> dict[str, Any]:
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


def _tls_client_settings() -> dict[str, Any]:
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


@dataclasses.dataclass(frozen=True)
class StoreConfig:
    """Settings of one broker's message store (directory layout in docs/store.md)."""

    store_path: str = setting(
        "./data/broker-a", "directory of the commit log, consume queues, index and tables",
        check=_not_blank, allowed="a directory path")
    mapped_file_size_commitlog: int = setting(
        GiB, "bytes of one commit log segment (no message may be larger)", 4096, I32_MAX)
    mapped_file_size_consume_queue: int = setting(
        300_000 * CONSUME_QUEUE_ENTRY_SIZE, "bytes of one consume queue file, 20 per entry",
        16 * CONSUME_QUEUE_ENTRY_SIZE, I32_MAX - I32_MAX % CONSUME_QUEUE_ENTRY_SIZE,
        check=_cq_entries, allowed=f"a multiple of 20 in 320..{I32_MAX - I32_MAX % 20}")
    max_hash_slot_num: int = setting(5_000_000, "hash slots of one index file", 16, 50_000_000)
    max_index_num: int = setting(20_000_000, "entries of one index file", 16, 80_000_000)
    flush_disk_type: FlushDiskType = setting(
        FlushDiskType.ASYNC_FLUSH,
        "SYNC_FLUSH: a send is answered after its fsync; ASYNC_FLUSH: flushed in the background")
    flush_interval_commitlog_ms: int = setting(
        500, "ASYNC_FLUSH: how often the commit log is flushed", 1, HOUR_MS)
    flush_interval_consume_queue_ms: int = setting(
        1000, "how often consume queues and the index are flushed", 1, HOUR_MS)
    sync_flush_timeout_ms: int = setting(
        5000, "how long a send waits for its fsync (SYNC_FLUSH) or its slave (SYNC_MASTER)",
        1, HOUR_MS)
    max_message_size: int = setting(
        4 * MiB, "bytes of the largest message body a broker stores", 1, GiB)
    max_transfer_count_on_message_in_memory: int = setting(
        32, "most messages one pull answer carries", 1, 100_000)
    max_transfer_bytes_on_message_in_memory: int = setting(
        256 * 1024, "most bytes one pull answer carries (at least one message)", 1, GiB)
    bulk_pull_count_max: int = setting(
        8192, "most messages one PULL_MESSAGE_BULK answer carries (OrbitMQ's bulk readers)",
        1, 1_000_000)
    bulk_pull_bytes_max: int = setting(
        4 * MiB, "most bytes one PULL_MESSAGE_BULK answer carries (at least one message)",
        1, 12 * MiB)
    file_reserved_time_hours: float = setting(
        72.0, "hours a commit log segment is kept before retention may delete it", 0.0, 876_000.0)
    disk_max_used_space_ratio: float = setting(
        0.75, "disk use past which expired segments are deleted at any hour", 0.0, 1.0,
        low_open=True)
    clean_resource_interval_ms: int = setting(
        10_000, "how often retention looks for segments to delete", 1, HOUR_MS)
    delete_when: str = setting(
        "04", "hours of the day when expired segments are deleted ('04', '01;02', '*')",
        check=_delete_hours, allowed="hours 0-23 separated by ';', or '*'")
    message_index_enable: bool = setting(True, "build the index for lookups by key and id")
    duplication_enable: bool = setting(
        False, "RocketMQ's DLedger duplication: not supported, accepted as false only",
        check=_false_only, allowed="false")
    disk_space_clean_forcibly_ratio: float = setting(
        0.85, "disk use past which the oldest segments are deleted even if not expired",
        0.0, 1.0, low_open=True)
    disk_space_warning_level_ratio: float = setting(
        0.90, "disk use past which sends are refused", 0.0, 1.0, low_open=True)
    delete_files_batch_max: int = setting(
        10, "most segments one retention round deletes", 1, 10_000)
    message_delay_level: str = setting(
        "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
        "the delay of each delay level, level 1 first", check=_delay_levels,
        allowed=f"1 to {DELAY_LEVELS_MAX} delays such as 5s, 10m, 2h, 1d")
    dispatch_round_max: int = setting(
        4096, "most messages one dispatch round turns into queue entries", 1, 1_000_000)
    store_file_mode: str = setting(
        "0600", "mode of the store's files; its directories get x where it has r (0700)",
        check=file_mode_problem, allowed="an octal mode with owner rw, no x bit: 0600, 0640...")
    page_cache_keep_mb: int = setting(
        256, "newest commit log MB kept in the page cache; older ones all groups read are "
        "dropped (0: never)", 0, 1 << 20)

    def __post_init__(self) -> None:
        # A typo (the delay levels included) stops the broker at start, not when it is used.
        _validate(self)


# Small segments and short delays so that edge cases (segment rolls, index rolls) come fast.
TEST_MIN_STORE = StoreConfig(
    mapped_file_size_commitlog=256 * 1024,
    mapped_file_size_consume_queue=1000 * 20,
    max_hash_slot_num=1000,
    max_index_num=4000,
    flush_interval_commitlog_ms=10,
    flush_interval_consume_queue_ms=10,
    clean_resource_interval_ms=100,
    # The host's disk is shared with work a test cannot foresee: its use must neither delete a
    # test's segments nor refuse its sends. Tests of those ratios set their own.
    disk_max_used_space_ratio=1.0,
    disk_space_clean_forcibly_ratio=1.0,
    disk_space_warning_level_ratio=1.0,
)


@dataclasses.dataclass(frozen=True)
class NamesrvConfig:
    """Settings of a name server."""

    listen_host: str = setting("127.0.0.1", "address to listen on (0.0.0.0: every interface)",
                               check=_host, allowed="a host name or IP address")
    listen_port: int = setting(9876, "port to listen on (0: a free one)", 0, PORT_MAX)
    broker_expire_ms: int = setting(
        120_000, "a broker silent this long is dropped from the routes", 1, DAY_MS)
    scan_not_active_broker_interval_ms: int = setting(
        5_000, "how often silent brokers are looked for", 1, HOUR_MS)
    metrics_exporter_type: MetricsExporterType = _metrics_settings()["metrics_exporter_type"]
    metrics_prom_exporter_host: str = _metrics_settings()["metrics_prom_exporter_host"]
    metrics_prom_exporter_port: int = _metrics_settings()["metrics_prom_exporter_port"]
    metrics_rpc_latency_sample_every: int = _metrics_settings()["metrics_rpc_latency_sample_every"]
    metrics_token: str = _metrics_settings()["metrics_token"]
    frame_buffer_budget_mb: int = _limit_settings()["frame_buffer_budget_mb"]
    server_channel_max_idle_ms: int = _limit_settings()["server_channel_max_idle_ms"]
    frame_read_timeout_ms: int = _limit_settings()["frame_read_timeout_ms"]
    connections_max: int = _limit_settings()["connections_max"]
    connections_per_ip_max: int = _limit_settings()["connections_per_ip_max"]
    fd_reserve: int = _limit_settings()["fd_reserve"]
    authentication_enabled: bool = _access_settings()["authentication_enabled"]
    authorization_enabled: bool = _access_settings()["authorization_enabled"]
    init_authentication_user: str = _access_settings()["init_authentication_user"]
    inner_client_authentication_credentials: str = _access_settings()[
        "inner_client_authentication_credentials"]
    authentication_whitelist: str = _access_settings()["authentication_whitelist"]
    audit_allowed: bool = _access_settings()["audit_allowed"]
    allow_anonymous: bool = _access_settings()["allow_anonymous"]
    auth_config_path: str = setting(
        "", "file of the name server's users and ACLs (0600); empty: only the init user and "
        "the inner credentials, kept in memory", allowed="empty or a file path")
    tls_server_mode: TlsServerMode = _tls_server_settings()["tls_server_mode"]
    tls_server_cert_path: str = _tls_server_settings()["tls_server_cert_path"]
    tls_server_key_path: str = _tls_server_settings()["tls_server_key_path"]
    tls_server_trust_cert_path: str = _tls_server_settings()["tls_server_trust_cert_path"]
    tls_server_need_client_auth: TlsClientAuth = _tls_server_settings()[
        "tls_server_need_client_auth"]

    def __post_init__(self) -> None:
        _validate(self)


@dataclasses.dataclass(frozen=True)
class BrokerConfig:
    """Settings of a broker (its store settings live in ``store``)."""

    broker_name: str = setting(
        "broker-a", "name of the broker set; one address per name and id on a name server",
        check=_name, allowed="1 to 127 letters, digits or _ . % | -")
    broker_cluster_name: str = setting("DefaultCluster", "cluster the broker belongs to",
                                       check=_name, allowed="1 to 127 letters, digits or _ . % | -")
    broker_id: int = setting(0, "0 for the master of the broker set, above 0 for a slave "
                             "(broker_role says which)", 0, I32_MAX)
    listen_host: str = setting("127.0.0.1", "address to listen on (0.0.0.0: every interface)",
                               check=_host, allowed="a host name or IP address")
    listen_port: int = setting(10911, "port to listen on (0: a free one)", 0, PORT_MAX)
    broker_ip: str = setting(
        "", "address advertised to clients (default: the listening address)",
        check=_optional_host, allowed="empty, a host name or an IP address")
    namesrv_addr: str = setting(
        "", "name servers to register with, HOST:PORT separated by ';'", check=_namesrv_addrs,
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
    default_query_max_num: int = setting(
        32, "messages a lookup by unique key returns", 1, 10_000)
    max_msgs_num_batch: int = setting(
        64, "most messages a lookup by key returns", 1, 10_000)
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
    timer_precision_ms: int = setting(
        100, "a timer message is delivered within this much after its time", 10, 1000)
    timer_max_delay_s: int = setting(
        3 * 86_400, "the furthest ahead a timer message may ask to be delivered", 1, 40 * 86_400)
    metrics_exporter_type: MetricsExporterType = _metrics_settings()["metrics_exporter_type"]
    metrics_prom_exporter_host: str = _metrics_settings()["metrics_prom_exporter_host"]
    metrics_prom_exporter_port: int = _metrics_settings()["metrics_prom_exporter_port"]
    metrics_rpc_latency_sample_every: int = _metrics_settings()["metrics_rpc_latency_sample_every"]
    metrics_token: str = _metrics_settings()["metrics_token"]
    frame_buffer_budget_mb: int = _limit_settings()["frame_buffer_budget_mb"]
    server_channel_max_idle_ms: int = _limit_settings()["server_channel_max_idle_ms"]
    frame_read_timeout_ms: int = _limit_settings()["frame_read_timeout_ms"]
    connections_max: int = _limit_settings()["connections_max"]
    connections_per_ip_max: int = _limit_settings()["connections_per_ip_max"]
    fd_reserve: int = _limit_settings()["fd_reserve"]
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
    authentication_enabled: bool = _access_settings()["authentication_enabled"]
    authorization_enabled: bool = _access_settings()["authorization_enabled"]
    init_authentication_user: str = _access_settings()["init_authentication_user"]
    inner_client_authentication_credentials: str = _access_settings()[
        "inner_client_authentication_credentials"]
    authentication_whitelist: str = _access_settings()["authentication_whitelist"]
    audit_allowed: bool = _access_settings()["audit_allowed"]
    allow_anonymous: bool = _access_settings()["allow_anonymous"]
    tls_server_mode: TlsServerMode = _tls_server_settings()["tls_server_mode"]
    tls_server_cert_path: str = _tls_server_settings()["tls_server_cert_path"]
    tls_server_key_path: str = _tls_server_settings()["tls_server_key_path"]
    tls_server_trust_cert_path: str = _tls_server_settings()["tls_server_trust_cert_path"]
    tls_server_need_client_auth: TlsClientAuth = _tls_server_settings()[
        "tls_server_need_client_auth"]
    tls_enable: bool = _tls_client_settings()["tls_enable"]
    tls_client_trust_cert_path: str = _tls_client_settings()["tls_client_trust_cert_path"]
    tls_client_cert_path: str = _tls_client_settings()["tls_client_cert_path"]
    tls_client_key_path: str = _tls_client_settings()["tls_client_key_path"]
    tls_client_check_hostname: bool = _tls_client_settings()["tls_client_check_hostname"]
    store: StoreConfig = setting(StoreConfig(), "the store's settings ([store] in TOML)")

    def __post_init__(self) -> None:
        _validate(self)

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


@dataclasses.dataclass(frozen=True)
class ConsoleConfig:
    """Settings of the web console (``orbitmq console``, and ``orbitmq standalone``'s console).

    The console refuses to start on an address other than loopback without ``console_token``
    (checked when it starts, not here: the fields come from several layers, TOML to flags).
    """

    namesrv_addr: str = setting(
        "127.0.0.1:9876", "name servers of the cluster to show, HOST:PORT separated by ';'",
        check=_namesrv_addrs, allowed=f"HOST:PORT[;HOST:PORT...] with ports 1..{PORT_MAX}")
    console_listen_host: str = setting(
        "127.0.0.1", "address the console listens on (not loopback: console_token required)",
        check=_host, allowed="a host name or IP address")
    console_listen_port: int = setting(8080, "port of the console (0: a free one)", 0, PORT_MAX)
    console_token: str = setting(
        "", "secret asked by the login form or as 'Authorization: Bearer' (empty: none)",
        check=_token, allowed=f"empty, or {CONSOLE_TOKEN_MIN_CHARS}+ characters without spaces",
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
        check=_optional_username, allowed="empty, or a user name (letters, digits, _ and -)")
    console_secret_key: str = setting(
        "", "secret key (password) of console_access_key", check=_optional_password,
        allowed=f"empty, or {PASSWORD_MIN_CHARS} to {PASSWORD_MAX_CHARS} characters",
        secret=True)
    console_user_sessions_max: int = setting(
        100, "users logged in at once (each has its own connections to the cluster); the least "
        "recently active is logged out past it", 1, 10_000)
    console_login_failures_max: int = setting(
        10, "failed logins of one address in a minute before its wrong ones get 429", 1, 10_000)
    console_trusted_proxies: str = setting(
        "", "reverse proxies (IPs or CIDRs, by commas) whose X-Forwarded-For/-Proto are believed",
        check=_networks_problem, allowed="empty, or IP addresses and CIDRs separated by commas")
    console_request_head_timeout_ms: int = setting(
        30_000, "a connection whose request line and headers take longer is closed",
        100, HOUR_MS)
    tls_server_mode: TlsServerMode = _tls_server_settings()["tls_server_mode"]
    tls_server_cert_path: str = _tls_server_settings()["tls_server_cert_path"]
    tls_server_key_path: str = _tls_server_settings()["tls_server_key_path"]
    tls_server_trust_cert_path: str = _tls_server_settings()["tls_server_trust_cert_path"]
    tls_server_need_client_auth: TlsClientAuth = _tls_server_settings()[
        "tls_server_need_client_auth"]
    tls_enable: bool = _tls_client_settings()["tls_enable"]
    tls_client_trust_cert_path: str = _tls_client_settings()["tls_client_trust_cert_path"]
    tls_client_cert_path: str = _tls_client_settings()["tls_client_cert_path"]
    tls_client_key_path: str = _tls_client_settings()["tls_client_key_path"]
    tls_client_check_hostname: bool = _tls_client_settings()["tls_client_check_hostname"]

    def __post_init__(self) -> None:
        _validate(self)
        if bool(self.console_access_key) != bool(self.console_secret_key):
            raise ConfigError(
                "console_secret_key" if self.console_access_key else "console_access_key",
                "console_access_key and console_secret_key go together: set both or neither")


T = TypeVar("T")


def replace_fields(cfg: T, **changes: Any) -> T:
    """Return a copy of a frozen config with ``changes`` applied, converting strings to field
    types (ConfigError, a ValueError, for a value of the wrong type or out of range)."""
    fields = {f.name: f for f in dataclasses.fields(cfg)}  # type: ignore[arg-type]
    converted: dict[str, Any] = {}
    for name, value in changes.items():
        if name not in fields:
            raise ConfigError(name, f"unknown config field {name!r} for {type(cfg).__name__}")
        current = getattr(cfg, name)
        converted[name] = _coerce(name, value, current)
    return dataclasses.replace(cfg, **converted)  # type: ignore[type-var]


def _coerce(name: str, value: Any, current: Any) -> Any:
    """``value`` (from TOML, the environment or a flag) as the type of ``current``; nothing is
    converted silently into something else (1.5 is not an integer, 5 not a boolean)."""
    if dataclasses.is_dataclass(current):
        if not isinstance(value, dict):
            raise ConfigError(name, f"{name} = {value!r} is refused (expected a table [{name}])")
        return replace_fields(current, **value)
    if isinstance(current, enum.Enum):
        try:
            return type(current)(value.upper() if isinstance(value, str) else value)
        except ValueError:
            allowed = ", ".join(m.value for m in type(current))
            raise ConfigError(name, f"{name} = {value!r} is refused; allowed: {allowed}") from None
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS | _FALSE_WORDS:
            return value.strip().lower() in _TRUE_WORDS
        raise ConfigError(name, f"{name} = {value!r} is not a boolean (true or false)")
    if isinstance(current, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if type(value) is int:
            return value
        try:
            if isinstance(value, str):
                return int(value.strip())
        except ValueError:
            pass
        raise ConfigError(name, f"{name} = {value!r} is not an integer")
    if isinstance(current, float):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        try:
            if isinstance(value, str):
                return float(value.strip())
        except ValueError:
            pass
        raise ConfigError(name, f"{name} = {value!r} is not a number")
    if isinstance(value, str):
        return value
    if type(value) is int:
        return str(value)
    raise ConfigError(name, f"{name} = {value!r} is not text")


_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def load_toml(path: str | Path, cfg: T) -> T:
    """Apply the fields of a TOML file to ``cfg``; unknown names are an error, not silently
    ignored (ConfigError, or OSError for a file that cannot be read)."""
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError("", f"{path} is not TOML: {e}") from None
    check_toml_keys(data, cfg)
    return replace_fields(cfg, **data)


def check_toml_keys(data: dict[str, Any], cfg: Any, table: str = "") -> None:
    """Refuse a key ``cfg`` has no setting for with the nearest names, since a mistyped key
    would otherwise leave its setting at the default without a word (ConfigError)."""
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    for key, value in data.items():
        if key not in values:
            where = f"[{table}] " if table else ""
            raise ConfigError(key, f"unknown setting {where}{key!r}{_nearest(key, values)}")
        if isinstance(value, dict) and dataclasses.is_dataclass(values[key]):
            check_toml_keys(value, values[key], f"{table}.{key}" if table else key)


def _nearest(key: str, values: dict[str, Any]) -> str:
    """``; did you mean a or b?`` from this table's names and those of the tables around it."""
    names = {n: n for n in values}
    for name, value in values.items():  # a key written outside its table: say which table
        if dataclasses.is_dataclass(value):
            names.update({f.name: f"[{name}] {f.name}" for f in dataclasses.fields(value)})
    close = difflib.get_close_matches(key, list(names), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(names[c] for c in close)}?" if close else ""
