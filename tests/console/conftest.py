"""Fixtures of the web console tests: a real embedded cluster, a real console server on a free
port of 127.0.0.1 and a real browser (Debian's headless Chromium driven by Playwright).

Chromium comes from the system (scripts/system-deps.sh installs Debian's ``chromium``); Playwright's
own browser download is never used. Without Chromium these tests are skipped on a developer's
machine and fail in CI (``CI`` set), where they must never be skipped silently.

Screenshots are written to the test's temporary directory, and also to ``$ORBITMQ_SCREENSHOT_DIR``
when it is set (``make console-screenshots`` sets docs/img, which docs/console.md shows).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from console_support import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PAGE_TIMEOUT_MS,
    VIEWPORT,
    start_console,
)

from orbitmq.config import TEST_MIN_STORE
from orbitmq.console import ConsoleServer
from orbitmq.testing import EmbeddedCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    """One name server and broker per module; retries wait 1 s (so dead letters come fast)."""
    store = dataclasses.replace(TEST_MIN_STORE, message_delay_level="1s 1s 1s")
    with EmbeddedCluster(tmp_path_factory.mktemp("console-cluster"), store=store) as c:
        yield c


@pytest.fixture(scope="module")
def console(cluster: EmbeddedCluster) -> Iterator[ConsoleServer]:
    server = start_console(cluster)
    try:
        yield server
    finally:
        cluster.call(server.stop())


def _chromium_problem() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} not found (scripts/system-deps.sh installs Debian's chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium, for one module: while Playwright runs, its event loop counts as running in this
    thread, so that no later test (anywhere in the run) could use asyncio.run here."""
    problem = _chromium_problem()
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the console's browser tests cannot run in CI: {problem}", pytrace=False)
        pytest.skip(problem)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context (no cookies) and a page in it."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def screenshot(tmp_path: Path) -> Callable[[Any, str], Path]:
    """``screenshot(page, name)``: a PNG of the page's viewport (see the module docstring)."""
    target = os.environ.get("ORBITMQ_SCREENSHOT_DIR")

    def take(page: Any, name: str) -> Path:
        path = tmp_path / f"{name}.png"
        page.screenshot(path=str(path))
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name
        if target:
            Path(target).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, Path(target) / path.name)
        return path

    return take
