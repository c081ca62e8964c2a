"""Config fields: each documented, each with its allowed values, each checked when a config is
built, with one line naming the field, the value and what is allowed (issue 13: port -1 or 99999,
a disk ratio of 5.0, 0 queues and a 100-byte segment used to be accepted)."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Any

import pytest

from orbitmq.config import (
    TEST_MIN_STORE,
    BrokerConfig,
    ConfigError,
    ConsoleConfig,
    NamesrvConfig,
    StoreConfig,
    field_allowed,
    field_doc,
    load_toml,
    replace_fields,
)
from orbitmq.errors import ClientError

CONFIGS = [StoreConfig, NamesrvConfig, BrokerConfig, ConsoleConfig]


def _fields() -> list[tuple[type, dataclasses.Field[Any]]]:
    return [(cls, f) for cls in CONFIGS for f in dataclasses.fields(cls)]


@pytest.mark.parametrize(("cls", "field"), _fields(),
                         ids=[f"{c.__name__}.{f.name}" for c, f in _fields()])
def test_every_field_is_documented_and_bounded(cls: type, field: dataclasses.Field[Any]) -> None:
    doc = field_doc(field)
    assert doc and "\n" not in doc and len(doc) < 120, field.name
    default = getattr(cls(), field.name)
    if isinstance(default, bool | enum.Enum) or dataclasses.is_dataclass(default):
        return  # the type says what is allowed
    assert field_allowed(field), f"{cls.__name__}.{field.name} accepts anything"


@pytest.mark.parametrize(("cls", "changes", "words"), [
    (NamesrvConfig, {"listen_port": 99999}, "listen_port = 99999 is out of range; allowed: 0..65535"),
    (BrokerConfig, {"listen_port": -1}, "listen_port = -1 is out of range"),
    (StoreConfig, {"disk_max_used_space_ratio": 5.0}, "allowed: (0, 1]"),
    (StoreConfig, {"disk_space_warning_level_ratio": 0.0}, "disk_space_warning_level_ratio"),
    (StoreConfig, {"disk_max_used_space_ratio": float("nan")}, "disk_max_used_space_ratio"),
    (BrokerConfig, {"default_topic_queue_nums": 0}, "allowed: 1..1024"),
    (StoreConfig, {"mapped_file_size_commitlog": 100}, "mapped_file_size_commitlog = 100"),
    (StoreConfig, {"mapped_file_size_consume_queue": 1001}, "multiple of 20"),
    (StoreConfig, {"flush_interval_commitlog_ms": 0}, "flush_interval_commitlog_ms"),
    (StoreConfig, {"delete_when": "25"}, "hours 0-23"),
    (StoreConfig, {"duplication_enable": True}, "duplication_enable"),
    (StoreConfig, {"store_path": " "}, "store_path"),
    (BrokerConfig, {"namesrv_addr": "127.0.0.1:99999"}, "HOST:PORT"),
    (BrokerConfig, {"broker_name": "broker a"}, "broker_name"),
    (BrokerConfig, {"broker_permission": 1}, "broker_permission"),
    (BrokerConfig, {"register_broker_interval_ms": 0}, "register_broker_interval_ms"),
    (ConsoleConfig, {"console_listen_port": 70000}, "console_listen_port = 70000 is out of range"),
    (ConsoleConfig, {"console_token": "s3cret"}, "console_token = (hidden) is refused"),
    (ConsoleConfig, {"console_sample_interval_ms": 10}, "allowed: 100..3600000"),
])
def test_values_out_of_range_are_refused_in_one_line(cls: type, changes: dict[str, Any],
                                                     words: str) -> None:
    with pytest.raises(ConfigError) as refused:
        cls(**changes)
    message = str(refused.value)
    assert words in message and "\n" not in message
    assert refused.value.field == next(iter(changes))
    assert isinstance(refused.value, ClientError) and isinstance(refused.value, ValueError)


def test_defaults_boundaries_and_the_test_preset_are_accepted() -> None:
    for cls in CONFIGS:
        cls()
    assert TEST_MIN_STORE.mapped_file_size_commitlog == 256 * 1024
    NamesrvConfig(listen_port=0)
    NamesrvConfig(listen_port=65535)
    StoreConfig(disk_max_used_space_ratio=1.0, file_reserved_time_hours=0,
                mapped_file_size_commitlog=4096, mapped_file_size_consume_queue=320)
    BrokerConfig(namesrv_addr="a:1;b:65535", broker_permission=4)


def test_converted_values_are_checked_and_nothing_is_converted_silently() -> None:
    cfg = replace_fields(BrokerConfig(), listen_port="0", store={"disk_max_used_space_ratio": "0.5"})
    assert cfg.listen_port == 0 and cfg.store.disk_max_used_space_ratio == 0.5
    for changes, words in (({"listen_port": "99999"}, "out of range"),
                           ({"listen_port": 1.5}, "not an integer"),
                           ({"listen_port": True}, "not an integer"),
                           ({"auto_create_topic": 5}, "not a boolean"),
                           ({"broker_name": ["a"]}, "not text"),
                           ({"store": 3}, "expected a table"),
                           ({"no_such_field": 1}, "unknown config field")):
        with pytest.raises(ConfigError, match=words):
            replace_fields(BrokerConfig(), **changes)


@pytest.mark.parametrize("text, words", [
    ("listen_prot = 1\n", "unknown setting 'listen_prot'; did you mean listen_port"),
    ('flush_disk_type = "SYNC_FLUSH"\n',
     r"unknown setting 'flush_disk_type'; did you mean \[store\] flush_disk_type\?"),
    ('[store]\nflush_disk_typ = "SYNC_FLUSH"\n',
     r"unknown setting \[store\] 'flush_disk_typ'; did you mean flush_disk_type\?"),
], ids=["typo", "outside-its-table", "typo-in-a-table"])
def test_an_unknown_toml_key_suggests_the_nearest_settings(tmp_path: Path, text: str,
                                                           words: str) -> None:
    """A mistyped key used to be refused without a hint of the name meant."""
    path = tmp_path / "broker.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=words):
        load_toml(path, BrokerConfig())
    path.write_text("zzqqxx = 1\n")  # nothing near: no suggestion
    with pytest.raises(ConfigError) as refused:
        load_toml(path, BrokerConfig())
    assert "did you mean" not in str(refused.value)


def test_a_toml_file_is_checked_like_flags(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('listen_port = 10921\n[store]\nmapped_file_size_commitlog = 100\n')
    with pytest.raises(ConfigError, match="mapped_file_size_commitlog = 100 is out of range"):
        load_toml(path, BrokerConfig())
    path.write_text("listen_port = \n")
    with pytest.raises(ConfigError, match="is not TOML"):
        load_toml(path, BrokerConfig())
