"""The bench tests' servers keep their logs in the session's temporary directory, not under
bench/results/logs where `make bench` keeps a sitting's (bench/systems.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _server_logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    before = os.environ.get("ORBITMQ_BENCH_LOGS")
    os.environ["ORBITMQ_BENCH_LOGS"] = str(tmp_path_factory.mktemp("server-logs"))
    yield
    if before is None:
        os.environ.pop("ORBITMQ_BENCH_LOGS", None)
    else:
        os.environ["ORBITMQ_BENCH_LOGS"] = before
