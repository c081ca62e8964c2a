"""Fixtures of the RocketMQ 5 client tests: the official Python client against OrbitMQ.

The client (PyPI `rocketmq-python-client` 5.1.x) lives in its own venv, .venv-rmq5, which
`make install` prepares through scripts/rmq5-venv.sh; tests/rmq5/rmq5_driver.py runs it as a
child process. Without .venv-rmq5 these tests are skipped on a developer's machine and fail in
CI (the `CI` environment variable set), where they must never be skipped silently.

Servers: one `orbitmq standalone` child process per module (rmq5_support.Cluster), with short
transaction check times so that a check-back comes within seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rmq5_support import Cluster, Rmq5Driver, in_ci, rmq5_venv_problem

FAST_CHECKS = ("--transaction-timeout-ms", "1000", "--transaction-check-interval-ms", "1000")


@pytest.fixture(scope="session")
def rmq5_ready() -> None:
    problem = rmq5_venv_problem()
    if problem is not None:
        if in_ci():
            pytest.fail(f"RocketMQ 5 client tests cannot run in CI: {problem}", pytrace=False)
        pytest.skip(f"official RocketMQ 5 client unavailable: {problem}")


@pytest.fixture(scope="module")
def cluster(rmq5_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    found = Cluster(tmp_path_factory.mktemp("rmq5-store"), *FAST_CHECKS)
    try:
        yield found
    finally:
        found.stop()


@pytest.fixture
def driver(rmq5_ready: None, tmp_path: Path) -> Iterator[Rmq5Driver]:
    d = Rmq5Driver(tmp_path / "client-home")
    try:
        yield d
    finally:
        d.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test shows the server's output and the client driver's stderr next to it."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    found = funcargs.get("cluster")
    if isinstance(found, Cluster):
        report.sections.append(("orbitmq output (tail)", "\n".join(found.output().splitlines()[-80:])))
    d = funcargs.get("driver")
    if isinstance(d, Rmq5Driver):
        report.sections.append(("client driver stderr (tail)", "".join(d.stderr[-60:])))
