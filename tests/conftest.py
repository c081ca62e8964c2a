"""Options every test directory shares: ``--run-slow`` runs the tests marked ``slow`` (long soak
and acceptance runs, too long for ``make test``), which are skipped otherwise; Hypothesis without
its per-example deadline (a timing assertion: on a loaded 2-core box it fails correct code);
gRPC's fork handlers off (below)."""

from __future__ import annotations

import os

# The test process runs embedded brokers, whose gRPC endpoint keeps gRPC threads busy, and
# forks children meanwhile (Spark's JVM, servers under test). With gRPC's fork support on, a
# fork while those threads are in gRPC can leave the child dead before it execs: 2 of 300
# children of a busy gRPC server and client, none with the handlers off. No child here uses
# gRPC it inherited, so the test process turns them off before anything imports grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

settings.register_profile("orbitmq", deadline=None)
settings.load_profile("orbitmq")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run the tests marked slow (long soak and acceptance runs)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: a long run, only with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
