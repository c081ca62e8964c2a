"""An in-process name server and brokers on a background event loop, for tests and examples.

Cheaper than child processes (no interpreter start-up) and still real: clients talk to it over
TCP on 127.0.0.1 ephemeral ports.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from orbitmq.config import TEST_MIN_STORE, BrokerConfig, NamesrvConfig, StoreConfig
from orbitmq.transport.loop import LoopThread

__all__ = ["EmbeddedCluster"]


class EmbeddedCluster:
    """A name server plus ``brokers`` brokers (broker-a, broker-b, ...) with stores under ``root``.

    Use as a context manager; ``namesrv`` is the name server's address, ``brokers`` the controllers.
    ``broker_overrides`` and ``store_overrides`` change config fields of every broker.
    """

    def __init__(
        self,
        root: str | Path,
        *,
        brokers: int = 1,
        namesrv_config: NamesrvConfig | None = None,
        store: StoreConfig = TEST_MIN_STORE,
        **broker_overrides: Any,
    ) -> None:
        self.root = Path(root)
        self._count = brokers
        self._ns_config = namesrv_config or NamesrvConfig(listen_port=0)
        self._store = store
        self._overrides = broker_overrides
        self._loop: LoopThread | None = None
        self.namesrv_server: Any = None
        self.brokers: list[Any] = []

    @property
    def namesrv(self) -> str:
        return str(self.namesrv_server.address)

    def broker_config(self, index: int) -> BrokerConfig:
        name = f"broker-{chr(ord('a') + index)}"
        store = dataclasses.replace(self._store, store_path=str(self.root / name))
        # Every port a free one, the HA port too: its default, the broker's port + 1, may be
        # taken (an outgoing connection's) when a test restarts a broker on its port. No
        # SYSTEM_BUSY for a loop stalled by the test's own work on the same host, unless asked.
        settings: dict[str, Any] = {"ha_listen_port": 0, "broker_fast_failure_enable": False,
                                    **self._overrides}
        return dataclasses.replace(
            BrokerConfig(),
            broker_name=name,
            listen_port=0,
            grpc_listen_port=0,
            namesrv_addr=self.namesrv,
            store=store,
            **settings,
        )

    def start(self) -> EmbeddedCluster:
        from orbitmq.namesrv import NameServer

        self._loop = LoopThread("orbitmq-embedded")
        self.namesrv_server = NameServer(self._ns_config)
        self._loop.call(self.namesrv_server.start(), 30)
        for i in range(self._count):
            self.start_broker(i)
        return self

    def start_broker(self, index: int, config: BrokerConfig | None = None) -> Any:
        """Start (or restart, keeping its store) broker number ``index``."""
        from orbitmq.assembly import build_broker

        assert self._loop is not None, "start() the cluster first"
        controller = build_broker(config or self.broker_config(index))
        self._loop.call(controller.start(), 30)
        if index < len(self.brokers):
            self.brokers[index] = controller
        else:
            self.brokers.append(controller)
        return controller

    def stop_broker(self, index: int) -> None:
        assert self._loop is not None
        self._loop.call(self.brokers[index].stop(), 30)

    def call(self, coro: Any, timeout: float = 30) -> Any:
        """Run a coroutine on the cluster's loop (to reach into a broker from a test)."""
        assert self._loop is not None
        return self._loop.call(coro, timeout)

    def stop(self) -> None:
        if self._loop is None:
            return
        for b in self.brokers:
            try:
                self._loop.call(b.stop(), 30)
            except Exception:  # already stopped by the test
                pass
        self._loop.call(self.namesrv_server.stop(), 30)
        self._loop.stop()
        self._loop = None

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
