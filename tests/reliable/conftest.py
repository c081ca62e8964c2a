"""Fixtures of the orbitmq.reliable tests: a real PostgreSQL server (one per session, a fresh
database per test), SQLite files, and an embedded OrbitMQ cluster with short retry delays."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator

import pytest

from orbitmq.config import TEST_MIN_STORE
from orbitmq.testing import EmbeddedCluster
from orbitmq.testing.postgres import PostgresServer, PostgresUnavailable


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """A private PostgreSQL server. Missing PostgreSQL skips on a laptop, fails in CI."""
    server = None
    try:
        server = PostgresServer()
        server.start()
    except PostgresUnavailable as e:
        if server is not None:
            server.stop()
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is required in CI: {e}", pytrace=False)
        pytest.skip(str(e))
    except BaseException:
        server.stop()  # type: ignore[union-attr]
        raise
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A fresh empty database of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'app.db'}"
    server: PostgresServer = request.getfixturevalue("pg_server")
    return server.create_database()


@pytest.fixture
def pg_url(pg_server: PostgresServer) -> str:
    return pg_server.create_database()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    # Retries come back after 1 s instead of 10 s; transaction checks every second.
    store = dataclasses.replace(TEST_MIN_STORE, mapped_file_size_commitlog=8 * 1024 * 1024,
                                message_delay_level="1s 1s 1s 1s 1s 1s")
    with EmbeddedCluster(tmp_path_factory.mktemp("reliable"), store=store,
                         transaction_timeout_ms=1000, transaction_check_interval_ms=1000) as c:
        yield c
