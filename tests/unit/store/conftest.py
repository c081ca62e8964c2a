"""The consume queue, store and recovery tests run under both store types (``default``: mapped
queue files; ``compact``: pread/pwrite for small queues, switching to mapped past 10 entries
here), through store_fixtures.config; the rest of the store's tests under the default only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import store_fixtures

# Modules whose every test runs under both (they reach the queues through the store's API).
BOTH_STORE_TYPES = frozenset({
    "test_store_put_get",
    "test_store_recovery",
    "test_store_flush_retention",
    "test_store_invariants",
    "test_store_query",
    "test_store_replica",
    "test_store_space",
})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__.rsplit(".", 1)[-1] in BOTH_STORE_TYPES:
        metafunc.parametrize("cq_store_type", ["default", "compact"], indirect=True)


@pytest.fixture(autouse=True)
def cq_store_type(request: pytest.FixtureRequest) -> Iterator[str]:
    """The store type store_fixtures.config gives the test's stores."""
    store_type = getattr(request, "param", "default")
    saved = dict(store_fixtures.STORE_TYPE_CHANGES)
    store_fixtures.STORE_TYPE_CHANGES.clear()
    if store_type == "compact":
        store_fixtures.STORE_TYPE_CHANGES.update(store_fixtures.COMPACT_CHANGES)
    yield store_type
    store_fixtures.STORE_TYPE_CHANGES.clear()
    store_fixtures.STORE_TYPE_CHANGES.update(saved)
