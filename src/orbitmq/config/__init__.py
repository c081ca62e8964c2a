"""Frozen dataclass configs with RocketMQ's defaults, plus a tiny TEST_MIN preset.

Names are RocketMQ's in snake_case; units go last (``flush_interval_ms``). The CLI maps one flag
onto each field and TOML files use the same names.

Every field is declared with :func:`setting`: its default, a one-line doc (the CLI's ``--help``
text) and the values it accepts (a numeric range, or a check for text). Each config checks all of
them when it is built (defaults, a TOML file, environment variables, flags or code alike) and
raises :class:`ConfigError` with one line naming the field, the value and what is allowed.

The settings live in modules by concern (fields.py: what a field is; checks.py: the checks of
text fields; shared.py: the groups of fields the servers share; one module per config;
loading.py: TOML, environment and flags). Every name is importable from here, as before.
"""

from orbitmq.config.broker_config import BrokerConfig, BrokerRole
from orbitmq.config.checks import controller_addr_problem as controller_addr_problem
from orbitmq.config.checks import file_mode_problem as file_mode_problem
from orbitmq.config.checks import host_port_problem as host_port_problem
from orbitmq.config.checks import parse_controller_addr, parse_delay_levels_ms
from orbitmq.config.console_config import ConsoleConfig
from orbitmq.config.fields import CONSOLE_TOKEN_MIN_CHARS as CONSOLE_TOKEN_MIN_CHARS
from orbitmq.config.fields import CONSUME_QUEUE_ENTRY_SIZE as CONSUME_QUEUE_ENTRY_SIZE
from orbitmq.config.fields import DAY_MS as DAY_MS
from orbitmq.config.fields import DELAY_LEVELS_MAX as DELAY_LEVELS_MAX
from orbitmq.config.fields import HOUR_MS as HOUR_MS
from orbitmq.config.fields import I32_MAX as I32_MAX
from orbitmq.config.fields import PORT_MAX as PORT_MAX
from orbitmq.config.fields import (
    QUEUE_NUMS_MAX,
    ConfigError,
    Range,
    field_allowed,
    field_doc,
    setting,
)
from orbitmq.config.fields import GiB as GiB
from orbitmq.config.fields import MiB as MiB
from orbitmq.config.loading import check_toml_keys as check_toml_keys
from orbitmq.config.loading import load_toml, replace_fields
from orbitmq.config.namesrv_config import NamesrvConfig
from orbitmq.config.shared import MetricsExporterType
from orbitmq.config.store_config import TEST_MIN_STORE, FlushDiskType, StoreConfig, StoreType

__all__ = [
    "FlushDiskType",
    "StoreType",
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
