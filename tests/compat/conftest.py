"""Fixtures of the compatibility tests: the official C++ client against real OrbitMQ servers.

The C++ client (PyPI `rocketmq` 0.4.4, ctypes over a bundled librocketmq.so) lives in its own venv,
.venv-compat, which `make install` prepares through scripts/compat-venv.sh. Each client scenario runs
as a child process of that venv's Python (tests/compat/cpp_driver.py), so a crash or hang inside the
C++ library cannot take pytest down, and every scenario starts from a fresh client.

Without .venv-compat these tests are skipped on a developer's machine, and fail in CI (the `CI`
environment variable set), where they must never be skipped silently.

Servers: one `orbitmq standalone` child process per test module (name server + broker on ephemeral
ports of 127.0.0.1), shared by the module's tests, which use topics and groups of their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from compat_support import (
    COMPAT_PYTHON,
    CppClient,
    OurClient,
    RawClient,
    Servers,
    compat_venv_problem,
    in_ci,
    tail,
    wait_for_default_route,
)

from orbitmq.testing import standalone_process

SERVER_READY_TIMEOUT_S = 60.0


@pytest.fixture(scope="session")
def compat_python() -> Path:
    problem = compat_venv_problem()
    if problem is not None:
        if in_ci():
            pytest.fail(f"compat tests cannot run in CI: {problem}", pytrace=False)
        pytest.skip(f"C++ client unavailable: {problem}")
    return COMPAT_PYTHON


@pytest.fixture(scope="module")
def servers(compat_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """`orbitmq standalone` as a real child process, ready to serve TBW102 routes."""
    store = tmp_path_factory.mktemp("orbitmq-store")
    proc = standalone_process(str(store))
    try:
        addrs = proc.wait_ready("namesrv", "broker", timeout=SERVER_READY_TIMEOUT_S)
        found = Servers(addrs["namesrv"], addrs["broker"], proc.output)
        wait_for_default_route(found)
        yield found
    finally:
        proc.stop()
        # ServerProcess.stop() leaves the child's stdout pipe open; its garbage collection would
        # raise a ResourceWarning, an error under filterwarnings=error.
        if proc.proc.stdout is not None:
            proc.proc.stdout.close()


@pytest.fixture
def cpp(compat_python: Path, servers: Servers, tmp_path: Path) -> Iterator[CppClient]:
    client = CppClient(compat_python, servers.namesrv, tmp_path / "cpp-home")
    yield client
    client.close()


@pytest.fixture(scope="module")
def module_cpp(compat_python: Path, servers: Servers,
               tmp_path_factory: pytest.TempPathFactory) -> CppClient:
    """A C++ client runner for module-scoped data set-ups (its logs in a directory of its own)."""
    return CppClient(compat_python, servers.namesrv, tmp_path_factory.mktemp("cpp-home"))


@pytest.fixture
def raw(servers: Servers) -> Iterator[RawClient]:
    with RawClient(servers.namesrv) as client:
        yield client


@pytest.fixture
def ours(raw: RawClient) -> OurClient:
    return OurClient(raw)


# ----------------------------------------------------------------------------- failure reports
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed compat test shows the server's output and the C++ client's log next to it."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    srv = funcargs.get("servers")
    if isinstance(srv, Servers):
        report.sections.append(("orbitmq server output (tail)", tail(srv.output(), 80)))
    client = funcargs.get("cpp")
    if isinstance(client, CppClient):
        report.sections.append(("C++ client log (tail)", client.log_tail()))
