"""The console's limits: failed logins throttled per address (429 past
console_login_failures_max in a minute, the right token still working), ``Secure`` cookies
behind a trusted proxy that says https, and a request head too slow closed."""

from __future__ import annotations

import http.client
import re
import socket
import time
import urllib.parse

from console_support import start_console

from orbitmq.console import ConsoleServer
from orbitmq.testing import EmbeddedCluster

TOKEN = "console-limits-token-0123456789"
CLOSE_BOUND_S = 3.0


class Browser:
    """A client of one source address that keeps the console's cookies."""

    def __init__(self, console: ConsoleServer, source: str = "127.0.0.1") -> None:
        host, _, port = console.address.rpartition(":")
        self.host, self.port, self.source = host, int(port), source
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, body: dict[str, str] | None = None,
                **headers: str) -> tuple[int, http.client.HTTPResponse, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10,
                                          source_address=(self.source, 0))
        try:
            head = {"Host": f"{self.host}:{self.port}", **headers}
            if self.cookies:
                head["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
            data = None
            if body is not None:
                data = urllib.parse.urlencode(body).encode()
                head["Content-Type"] = "application/x-www-form-urlencoded"
            conn.request(method, path, body=data, headers=head)
            answer = conn.getresponse()
            content = answer.read()
            for cookie in answer.headers.get_all("Set-Cookie") or []:
                name, _, rest = cookie.partition("=")
                self.cookies[name] = rest.split(";")[0]
            return answer.status, answer, content
        finally:
            conn.close()

    def log_in(self, token: str, **headers: str) -> tuple[int, http.client.HTTPResponse]:
        status, _, form = self.request("GET", "/login")
        csrf = re.search(rb'name="csrf" value="([^"]+)"', form)
        assert csrf is not None, (status, form[:2000])
        status, answer, _ = self.request("POST", "/login", {
            "csrf": csrf.group(1).decode(), "token": token, "next": "/"}, **headers)
        return status, answer


def test_failed_logins_are_throttled_per_address_and_the_right_token_still_works(
        cluster: EmbeddedCluster) -> None:
    console = start_console(cluster, console_token=TOKEN)
    try:
        browser = Browser(console)
        for _ in range(10):
            assert browser.log_in("a-wrong-token-0123456789")[0] == 401
        status, answer = browser.log_in("a-wrong-token-0123456789")
        assert status == 429 and 1 <= int(answer.headers["Retry-After"]) <= 60
        # A wrong Bearer from there is throttled too; the right one works.
        assert browser.request("GET", "/api/cluster",
                               Authorization="Bearer not-it-0123456789")[0] == 429
        assert browser.request("GET", "/topics", Authorization=f"Bearer {TOKEN}")[0] == 200
        # Another address has its own count.
        assert Browser(console, "127.0.0.2").log_in("another-wrong-token-01234")[0] == 401
        # The right token still logs in from the throttled address, and clears its failures.
        status, answer = browser.log_in(TOKEN)
        assert status == 303 and "orbitmq_console_session" in browser.cookies
        assert "Secure" not in (answer.headers["Set-Cookie"] or "")  # plain HTTP, no proxy
        assert browser.request("GET", "/topics")[0] == 200
        assert Browser(console).log_in("a-wrong-token-0123456789")[0] == 401  # cleared
        assert console._state is not None and console._state.guard.throttle.refused == 2
    finally:
        cluster.call(console.stop())


def test_cookies_are_secure_behind_a_trusted_proxy_that_says_https(
        cluster: EmbeddedCluster) -> None:
    console = start_console(cluster, console_token=TOKEN, console_trusted_proxies="127.0.0.1",
                            console_login_failures_max=2)
    try:
        proxied = Browser(console)
        status, answer = proxied.log_in(TOKEN, **{"X-Forwarded-Proto": "https"})
        assert status == 303
        cookies = answer.headers.get_all("Set-Cookie") or []
        assert cookies and all("Secure" in c for c in cookies), cookies
        # Not from a trusted proxy: its header is not believed.
        status, answer = Browser(console, "127.0.0.2").log_in(
            TOKEN, **{"X-Forwarded-Proto": "https"})
        assert status == 303
        assert not any("Secure" in c for c in answer.headers.get_all("Set-Cookie") or [])
        # Behind the proxy, the throttle counts the client it names.
        def wrong_login(client: str) -> int:
            return Browser(console).log_in("wrong-token-0123456789", **{
                "X-Forwarded-For": f"198.51.100.1, {client}"})[0]

        assert [wrong_login("203.0.113.9") for _ in range(3)] == [401, 401, 429]
        assert wrong_login("203.0.113.10") == 401
    finally:
        cluster.call(console.stop())


def test_a_request_head_that_takes_too_long_is_closed(cluster: EmbeddedCluster) -> None:
    console = start_console(cluster, console_token=TOKEN, console_request_head_timeout_ms=400)
    try:
        host, _, port = console.address.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=CLOSE_BOUND_S) as s:
            started = time.monotonic()
            s.sendall(b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ends the head
            closed = False
            while time.monotonic() - started < CLOSE_BOUND_S:
                try:
                    s.sendall(b"X-Slow: 1\r\n")  # a header every 100 ms
                except OSError:
                    closed = True
                    break
                s.settimeout(0.1)
                try:
                    if s.recv(4096) == b"":
                        closed = True
                        break
                except TimeoutError:
                    pass
                except OSError:
                    closed = True
                    break
            took = time.monotonic() - started
        assert closed and 0.35 < took < CLOSE_BOUND_S, took
        # A request that comes whole in time is answered.
        assert Browser(console).request("GET", "/login")[0] == 200
    finally:
        cluster.call(console.stop())
