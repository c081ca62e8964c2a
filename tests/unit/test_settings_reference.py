"""docs/reference/settings.md is what scripts/gen_settings_reference.py writes from the settings'
own docs: a setting added, renamed or re-documented without running the script fails here."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from types import ModuleType

from orbitmq.config import BrokerConfig, ConsoleConfig, NamesrvConfig, StoreConfig

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_settings_reference.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_settings_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_settings_reference_is_current() -> None:
    gen = _generator()
    committed = gen.PAGE.read_text() if gen.PAGE.exists() else ""
    assert committed == gen.render(), (
        f"docs/reference/settings.md is stale: run {gen.COMMAND} and commit the page")


def test_every_server_setting_has_a_row() -> None:
    page = _generator().render()
    for cls in (BrokerConfig, StoreConfig, NamesrvConfig, ConsoleConfig):
        for f in dataclasses.fields(cls):
            if f.name != "store":  # the nested [store] table has a section of its own
                assert f"| `{f.name}` | `--{f.name.replace('_', '-')}`" in page, f.name


def test_a_row_says_the_type_default_range_and_doc() -> None:
    page = _generator().render()
    assert ("| `flush_disk_type` | `--flush-disk-type` | choice | `\"ASYNC_FLUSH\"` | "
            "ASYNC_FLUSH, SYNC_FLUSH | SYNC_FLUSH: a send is answered after its fsync") in page
    assert "| `listen_port` | `--listen-port`, `--port` | integer | `10911` | 0..65535 |" in page
    assert "1 to 127 letters, digits or _ . % \\| -" in page  # a | inside a cell is escaped
