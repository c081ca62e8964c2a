"""The ``orbitmq`` pytest plugin: a real OrbitMQ cluster for your own tests (docs/testing.md).

Installed with OrbitMQ and registered through the ``pytest11`` entry point, so pytest loads it by
itself (``-p no:orbitmq`` turns it off; do not list it in ``pytest_plugins`` as well). It starts
nothing until a test asks for one of its fixtures:

- ``orbitmq_cluster``: an embedded name server and broker (in the test process, on a background
  event loop, on free ports of 127.0.0.1, with a store in a temporary directory), started on
  first use and stopped at the end of its scope. Its scope is the ini option
  ``orbitmq_cluster_scope``: ``session`` (the default: one cluster for the whole run, the cheap
  choice), ``package``, ``module``, ``class`` or ``function`` (a fresh cluster per test).
- ``orbitmq_namesrv``: that cluster's name server address (``"127.0.0.1:PORT"``), what the SDK's
  ``namesrv=`` takes.
- ``orbitmq_topic``: a topic of the test's own on ``orbitmq_cluster`` (a new name each test, routed
  before the test starts), so that tests sharing a session cluster do not see each other's
  messages.
- ``orbitmq_cluster_factory``: ``factory(brokers=1, **broker_settings)`` starts another cluster
  with the given :class:`~orbitmq.config.BrokerConfig` fields (``enable_property_filter=True``,
  ``auto_create_topic=False``...); each is stopped when the test ends.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, cast

import pytest

if TYPE_CHECKING:
    from orbitmq.testing.embedded import EmbeddedCluster

__all__ = [
    "orbitmq_cluster",
    "orbitmq_namesrv",
    "orbitmq_topic",
    "orbitmq_cluster_factory",
    "SCOPE_INI",
    "SCOPES",
]

SCOPE_INI = "orbitmq_cluster_scope"
SCOPES = ("session", "package", "module", "class", "function")
TOPIC_QUEUES = 4
ROUTE_WAIT_S = 10.0  # how long orbitmq_topic waits for the name server to route its topic
_topic_count = 0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(SCOPE_INI, f"scope of the orbitmq_cluster fixture: {', '.join(SCOPES)}",
                  default="session")


Scope = Literal["session", "package", "module", "class", "function"]


def _cluster_scope(fixture_name: str, config: pytest.Config) -> Scope:
    scope = str(config.getini(SCOPE_INI)).strip()
    if scope not in SCOPES:
        raise pytest.UsageError(f"{SCOPE_INI} = {scope!r} is not one of {', '.join(SCOPES)}")
    return cast(Scope, scope)


def _start(tmp_path_factory: pytest.TempPathFactory, brokers: int = 1,
           **broker_settings: Any) -> EmbeddedCluster:
    from orbitmq.testing.embedded import EmbeddedCluster

    cluster = EmbeddedCluster(tmp_path_factory.mktemp("orbitmq"), brokers=brokers,
                              **broker_settings)
    try:
        return cluster.start()
    except BaseException:
        cluster.stop()
        raise


@pytest.fixture(scope=_cluster_scope)
def orbitmq_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    """An embedded name server and broker, for the scope set by ``orbitmq_cluster_scope``."""
    cluster = _start(tmp_path_factory)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def orbitmq_namesrv(orbitmq_cluster: EmbeddedCluster) -> str:
    """The name server address of ``orbitmq_cluster``."""
    return orbitmq_cluster.namesrv


def _topic_name(test_name: str) -> str:
    global _topic_count
    _topic_count += 1
    stem = re.sub(r"[^a-zA-Z0-9_-]+", "-", test_name).strip("-")[:80] or "test"
    return f"{stem}-{_topic_count}"


@pytest.fixture
def orbitmq_topic(orbitmq_cluster: EmbeddedCluster, request: pytest.FixtureRequest) -> str:
    """A new topic of TOPIC_QUEUES queues on ``orbitmq_cluster``, named after the test."""
    from orbitmq.client import Admin
    from orbitmq.errors import TopicNotFoundError

    topic = _topic_name(request.node.name)
    with Admin(orbitmq_cluster.namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=TOPIC_QUEUES, write_queue_nums=TOPIC_QUEUES)
        deadline = time.monotonic() + ROUTE_WAIT_S
        while True:  # brokers tell the name server about new topics in the background
            try:
                admin.topic_route(topic)
                return topic
            except TopicNotFoundError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.02)


@pytest.fixture
def orbitmq_cluster_factory(
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., EmbeddedCluster]]:
    """``factory(brokers=1, **broker_settings)``: another cluster, stopped after the test."""
    started: list[EmbeddedCluster] = []

    def factory(brokers: int = 1, **broker_settings: Any) -> EmbeddedCluster:
        cluster = _start(tmp_path_factory, brokers, **broker_settings)
        started.append(cluster)
        return cluster

    try:
        yield factory
    finally:
        for cluster in reversed(started):
            cluster.stop()
