"""What OrbitMQ's tests and its users' tests share: servers in-process or as child processes, and
the pytest plugin (:mod:`orbitmq.testing.pytest_plugin`, see docs/testing.md).

The names load on first use, so that the pytest plugin, which pytest imports in every test run
of an environment where OrbitMQ is installed, costs a run that does not use it nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["EmbeddedCluster", "ServerProcess", "standalone_process"]

_LAZY = {
    "EmbeddedCluster": "orbitmq.testing.embedded",
    "ServerProcess": "orbitmq.testing.process",
    "standalone_process": "orbitmq.testing.process",
}

if TYPE_CHECKING:
    from orbitmq.testing.embedded import EmbeddedCluster
    from orbitmq.testing.process import ServerProcess, standalone_process


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
