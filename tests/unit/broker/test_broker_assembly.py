"""The server assembly (orbitmq/assembly.py) mounts the gRPC front on a broker; the broker
itself never imports orbitmq.grpc (import-linter keeps that too)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from orbitmq.config import TEST_MIN_STORE


def test_importing_the_broker_loads_neither_grpc_nor_protobuf() -> None:
    """The gRPC front is mounted by the server assembly (orbitmq/assembly.py), so a broker with
    gRPC off never loads grpcio or protobuf."""
    probe = ("import sys, orbitmq.broker.controller\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'google')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_the_assembly_mounts_grpc_only_when_asked(tmp_path: Path) -> None:
    from orbitmq.assembly import build_broker, grpc_endpoint
    from orbitmq.config import BrokerConfig

    def config(grpc_port: int) -> BrokerConfig:
        store = dataclasses.replace(TEST_MIN_STORE, store_path=str(tmp_path / str(grpc_port)))
        return BrokerConfig(listen_port=0, grpc_listen_port=grpc_port, store=store)

    off = build_broker(config(-1))
    assert grpc_endpoint(off) is None and "grpc" not in off.services.names
    on = build_broker(config(0))
    assert grpc_endpoint(on) is not None
    names = on.services.names
    assert names.index("pop") < names.index("grpc") < names.index("observability")


def test_a_broker_asked_for_grpc_without_the_endpoint_mounted_refuses_to_start(
        tmp_path: Path) -> None:
    """BrokerController on its own cannot open the gRPC port its config asks for: it says so
    instead of serving without it."""
    import asyncio

    import pytest

    from orbitmq.broker.controller import BrokerController
    from orbitmq.config import BrokerConfig, ConfigError

    store = dataclasses.replace(TEST_MIN_STORE, store_path=str(tmp_path))
    broker = BrokerController(BrokerConfig(listen_port=0, grpc_listen_port=0, store=store))
    with pytest.raises(ConfigError, match="build_broker"):
        asyncio.run(broker.start())
