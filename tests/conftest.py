"""Options every test directory shares: ``--run-slow`` runs the tests marked ``slow`` (long soak
and acceptance runs, too long for ``make test``), which are skipped otherwise; Hypothesis without
its per-example deadline (a timing assertion: on a loaded 2-core box it fails correct code)."""

from __future__ import annotations

import pytest
from hypothesis import settings

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
