"""What the web console tests share: the browser's settings, bounded waits, and a console of an
embedded cluster on a free port (conftest.py makes fixtures of them)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from orbitmq.config import ConsoleConfig
from orbitmq.console import ConsoleServer
from orbitmq.testing import EmbeddedCluster

T = TypeVar("T")

CHROMIUM = Path(os.environ.get("ORBITMQ_CHROMIUM", "/usr/bin/chromium"))
# Headless (Playwright adds --headless), and nothing that reaches out to the internet (which this
# machine does not have: each refused connection would only slow the browser down).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
VIEWPORT = {"width": 1200, "height": 760}
WAIT_S = 20.0
PAGE_TIMEOUT_MS = 15_000
SAMPLE_INTERVAL_MS = 200


def wait_for(check: Callable[[], T], what: str, timeout: float = WAIT_S) -> T:
    """``check()``'s first truthy value, polled until ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def start_console(cluster: EmbeddedCluster, **settings: Any) -> ConsoleServer:
    """A console of ``cluster`` on a free port of 127.0.0.1, on the cluster's event loop."""
    cfg = ConsoleConfig(namesrv_addr=cluster.namesrv, console_listen_port=0,
                        console_sample_interval_ms=SAMPLE_INTERVAL_MS, **settings)
    server = ConsoleServer(cfg)
    cluster.call(server.start())
    return server
