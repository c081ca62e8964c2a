"""The checks of text and number fields (each returns why a value is refused, None when it
is taken), and the parsers of the fields whose text has a structure."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any

from orbitmq.config.fields import (
    CONSOLE_TOKEN_MIN_CHARS,
    CONSUME_QUEUE_ENTRY_SIZE,
    DELAY_LEVELS_MAX,
    PORT_MAX,
    ConfigError,
)
from orbitmq.errors import RemoteProtocolError
from orbitmq.security.model import PASSWORD_MAX_CHARS, PASSWORD_MIN_CHARS, check_username

__all__ = [
    "host_port_problem", "controller_addr_problem", "parse_controller_addr", "file_mode_problem",
    "parse_delay_levels_ms", "parsed_by", "blank_problem", "name_problem", "host_problem",
    "optional_host_problem", "namesrv_addrs_problem", "delete_hours_problem",
    "delay_levels_problem", "optional_username_problem", "optional_password_problem",
    "token_problem", "networks_problem", "false_only_problem", "cq_entries_problem",
]


_DELAY_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_NAME = re.compile(r"^[A-Za-z0-9_.%|-]{1,127}$")  # broker and cluster names


# ------------------------------------------------------------------------------ text checks
def blank_problem(value: str) -> str | None:
    return "it is blank" if not value.strip() else None


def name_problem(value: str) -> str | None:
    return None if _NAME.match(value) else "not a name of 1 to 127 letters, digits or _ . % | -"


def host_problem(value: str) -> str | None:
    if not value.strip() or any(c.isspace() for c in value):
        return "not a host name or IP address"
    return None


def optional_host_problem(value: str) -> str | None:
    return None if value == "" else host_problem(value)


def host_port_problem(addr: str) -> str | None:
    """Why ``addr`` is not ``host:port`` with a port 1..65535 (None when it is)."""
    host, _, port = addr.rpartition(":")
    if not host or host_problem(host) or not port.isdigit() or not 0 < int(port) <= PORT_MAX:
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


def namesrv_addrs_problem(value: str) -> str | None:
    addrs = [a.strip() for a in value.replace(",", ";").split(";") if a.strip()]
    return next((p for p in map(host_port_problem, addrs) if p), None)


def delete_hours_problem(value: str) -> str | None:
    hours = [h.strip() for h in value.split(";") if h.strip()]
    if not hours or not all(h == "*" or (h.isdigit() and 0 <= int(h) <= 23) for h in hours):
        return "not hours 0-23 separated by ';' (or '*')"
    return None


def delay_levels_problem(value: str) -> str | None:
    try:
        parse_delay_levels_ms(value)
    except ValueError as e:  # the field's allowed values say what a delay looks like
        return str(e).removeprefix("message_delay_level: ").split(" such as")[0]
    return None


def optional_username_problem(value: str) -> str | None:
    if not value:
        return None
    try:
        check_username(value)
    except RemoteProtocolError as e:
        return str(e)
    return None


def optional_password_problem(value: str) -> str | None:
    if value and not PASSWORD_MIN_CHARS <= len(value) <= PASSWORD_MAX_CHARS:
        return f"not {PASSWORD_MIN_CHARS} to {PASSWORD_MAX_CHARS} characters"
    return None


def token_problem(value: str) -> str | None:
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


def networks_problem(value: str) -> str | None:
    for item in (i.strip() for i in value.split(",") if i.strip()):
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            return f"{item!r} is not an IP address or CIDR"
    return None


def false_only_problem(value: bool) -> str | None:
    return "OrbitMQ has no duplication (RocketMQ's DLedger feature)" if value else None


def cq_entries_problem(value: int) -> str | None:
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


def parsed_by(parse: Callable[[str], Any]) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        try:
            parse(value)
        except ValueError as e:
            return str(e)
        return None
    return check
