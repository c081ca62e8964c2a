"""The console in front of a cluster with authentication and authorization on: people log in as
users of the cluster and act as them (a Normal user is refused what its rules do not allow, and
the page says so), a Super user manages users and rules on the Users and ACLs page, the users'
clients are bounded and closed, and ``orbitmq standalone`` gives its console the servers' own
credentials."""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest
from console_support import start_console, wait_for

import orbitmq
from orbitmq import AccessDeniedError, Credentials
from orbitmq.config import NamesrvConfig
from orbitmq.console import ConsoleServer
from orbitmq.testing import EmbeddedCluster, standalone_process

ROOT = Credentials("root", "root-secret-1")
ALICE = Credentials("alice", "alice-secret-1")
ACCESS = {"authentication_enabled": True, "authorization_enabled": True,
          "init_authentication_user": json.dumps({"username": ROOT.access_key,
                                                  "password": ROOT.secret_key})}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    """A name server (keeping users, so that the SDK's user calls reach it too) and a broker,
    both with authentication and authorization on, and the Super user ``root``."""
    root = tmp_path_factory.mktemp("console-secure")
    ns = NamesrvConfig(listen_port=0, auth_config_path=str(root / "namesrv-users.json"), **ACCESS)
    with EmbeddedCluster(root, namesrv_config=ns, **ACCESS) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def secure_console(secure: EmbeddedCluster) -> Iterator[ConsoleServer]:
    server = start_console(secure, console_access_key=ROOT.access_key,
                           console_secret_key=ROOT.secret_key)
    try:
        yield server
    finally:
        secure.call(server.stop())


class Session:
    """A script's session with the console (cookies kept, redirects followed)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))

    def request(self, path: str, form: dict[str, str] | None = None) -> tuple[int, str, str]:
        """(status, final URL, body)."""
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        try:
            with self.opener.open(self.base + path, data=data, timeout=20) as answer:
                return answer.status, answer.url, answer.read().decode()
        except urllib.error.HTTPError as e:
            with e:
                return e.code, e.url, e.read().decode()

    def csrf(self, path: str = "/login") -> str:
        body = self.request(path)[2]
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', body)
        assert found, body[:500]
        return found.group(1)

    def log_in(self, creds: Credentials) -> tuple[int, str, str]:
        return self.request("/login", {"csrf": self.csrf(), "next": "/topics",
                                       "username": creds.access_key,
                                       "password": creds.secret_key})

    def log_out(self) -> None:
        self.request("/logout", {"csrf": self.csrf("/topics")})


def _ensure_alice(cluster: EmbeddedCluster) -> None:
    with orbitmq.Admin(cluster.namesrv, credentials=ROOT) as admin:
        if "alice" not in [u.username for u in admin.list_users()]:
            admin.create_user(ALICE.access_key, ALICE.secret_key)


def test_a_normal_user_is_refused_what_its_rules_do_not_allow_and_a_super_user_manages_users(
        secure: EmbeddedCluster, secure_console: ConsoleServer, page: Any,
        screenshot: Any) -> None:
    console = secure_console
    with orbitmq.Admin(secure.namesrv, credentials=ROOT) as admin:  # whatever ran before
        if "alice" in [u.username for u in admin.list_users()]:
            admin.delete_user("alice")
    page.goto(console.url + "/users")
    page.wait_for_url("**/login?next=/users")
    assert page.locator("input[name=token]").count() == 0  # no console_token: users only
    page.locator("input[name=username]").fill("root")
    page.locator("input[name=password]").fill("not-the-password")
    page.locator("form.card button").click()
    assert page.locator("p.error").inner_text() == "Wrong user name or password."
    page.locator("input[name=username]").fill(ROOT.access_key)
    page.locator("input[name=password]").fill(ROOT.secret_key)
    page.locator("form.card button").click()
    page.wait_for_url("**/users")
    assert page.locator("#logged-in-as").inner_text() == "root"

    # root (Super) creates alice, a Normal user, and gives her topics console-alice*.
    create = page.locator("#create-user")
    create.locator("input[name=username]").fill("alice")
    create.locator("input[name=password]").fill(ALICE.secret_key)
    create.locator("button").click()
    page.wait_for_url("**/users?notice=user-created")
    alice_row = page.locator("#users tr[data-user=alice]")
    assert "Normal" in alice_row.inner_text() and "enable" in alice_row.inner_text()
    assert ALICE.secret_key not in page.content()  # passwords are never shown
    rule = page.locator("#add-acl")
    rule.locator("input[name=subject]").fill("User:alice")
    rule.locator("input[name=resources]").fill("Topic:console-alice*")
    for action in ("Create", "Pub", "Get"):
        rule.locator(f"input[name=actions][value={action}]").check()
    rule.locator("button").click()
    page.wait_for_url("**/users?notice=acl-added")
    acl_row = page.locator("#acls tbody tr", has_text="Topic:console-alice*")
    assert "User:alice" in acl_row.inner_text() and "Create, Get, Pub" in acl_row.inner_text()
    screenshot(page, "console-users")
    page.locator("header button", has_text="Log out").click()
    page.wait_for_url("**/login?notice=logged-out")

    # alice creates a topic her rules allow, is refused one they do not and the users page.
    page.goto(console.url + "/login?next=/topics")
    page.locator("input[name=username]").fill(ALICE.access_key)
    page.locator("input[name=password]").fill(ALICE.secret_key)
    page.locator("form.card button").click()
    page.wait_for_url("**/topics")
    assert page.locator("#logged-in-as").inner_text() == "alice"
    for topic, allowed in (("console-alice-orders", True), ("console-forbidden", False)):
        page.goto(console.url + "/topics")
        form = page.locator("#create-topic")
        form.locator("input[name=topic]").fill(topic)
        form.locator("input[name=read_queue_nums]").fill("1")
        form.locator("input[name=write_queue_nums]").fill("1")
        form.locator("button").click()
        if allowed:
            page.wait_for_url(f"**/topics/{topic}?notice=created")
            assert "refused to tell which groups" in page.locator("p.error").inner_text()
        else:
            assert page.locator("h1").inner_text() == "Not allowed"
            reason = page.locator("p.error").inner_text()
            assert "no rule allows user alice" in reason and "console-forbidden" in reason
            screenshot(page, "console-refused")
    page.goto(console.url + "/users")
    assert page.locator("h1").inner_text() == "Not allowed"
    assert "needs a Super user" in page.locator("p.error").inner_text()
    page.goto(console.url + "/")  # the runtime info needs Get on the cluster: refused, shown
    assert "not allowed" in page.locator("table.data").first.inner_text()
    with orbitmq.Admin(secure.namesrv, credentials=ROOT) as admin:
        topics = admin.list_topics()
        assert "console-alice-orders" in topics and "console-forbidden" not in topics

    # root deletes alice's rule and then alice.
    page.locator("header button", has_text="Log out").click()
    page.goto(console.url + "/login?next=/users")
    page.locator("input[name=username]").fill(ROOT.access_key)
    page.locator("input[name=password]").fill(ROOT.secret_key)
    page.locator("form.card button").click()
    page.wait_for_url("**/users")
    page.locator("#acls tbody tr", has_text="Topic:console-alice*").locator("button").click()
    page.wait_for_url("**/users?notice=acl-deleted")
    assert page.locator("#acls tbody tr", has_text="Topic:console-alice*").count() == 0
    delete = page.locator("#users tr[data-user=alice] form.delete-user")
    delete.locator("input[name=confirm]").fill("alice")
    delete.locator("button").click()
    page.wait_for_url("**/users?notice=user-deleted")
    assert page.locator("#users tr[data-user=alice]").count() == 0
    with orbitmq.Admin(secure.namesrv, credentials=ALICE) as admin, \
            pytest.raises(AccessDeniedError, match="no user alice"):
        admin.list_topics()


def test_logins_are_bounded_and_their_clients_closed(secure: EmbeddedCluster) -> None:
    _ensure_alice(secure)
    server = start_console(secure, console_access_key=ROOT.access_key,
                           console_secret_key=ROOT.secret_key, console_user_sessions_max=1)
    try:
        assert server._state is not None and server._state.users is not None
        users = server._state.users
        first, second = Session(server.url), Session(server.url)
        status, url, body = first.request("/topics")
        assert url.endswith("/login?next=/topics") and 'name="username"' in body
        status, url, body = first.log_in(Credentials("root", "wrong-secret"))
        assert status == 401 and "Wrong user name or password." in body
        status, url, body = first.log_in(Credentials("nobody", "whatever-1"))
        assert status == 401 and len(users) == 0
        status, url, _ = first.log_in(ROOT)
        assert (status, url) == (200, server.url + "/topics") and len(users) == 1
        status, url, _ = second.log_in(ALICE)
        assert (status, url) == (200, server.url + "/topics") and len(users) == 1
        # one user at a time: root, the least recently active, was logged out
        assert first.request("/topics")[1].endswith("/login?next=/topics")
        assert second.request("/groups")[0] == 403  # alice may not list every group
        second.log_out()
        assert len(users) == 0 and second.request("/topics")[1].endswith("/login?next=/topics")

        # A session that expires has its client closed by the sweep.
        assert first.log_in(ROOT)[0] == 200 and len(users) == 1
        sessions = server._state.guard.sessions
        clock = sessions._clock
        sessions._clock = lambda: clock() + sessions.ttl_s + 1
        secure.call(users.sweep())
        assert len(users) == 0 and first.request("/topics")[1].endswith("/login?next=/topics")
    finally:
        secure.call(server.stop())


def test_standalone_with_authentication_gives_its_console_the_servers_credentials(
        tmp_path: Path) -> None:
    with socket.socket() as s:  # a free port: --console-port 0 runs without a console
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    with standalone_process(str(tmp_path / "store"), "--console-port", port,
                            "--authentication-enabled", "true", "--authorization-enabled",
                            "true", env={"ORBITMQ_INIT_AUTHENTICATION_USER":
                                         ACCESS["init_authentication_user"]}) as proc:
        addrs = proc.wait_ready("namesrv", "broker", "console")
        session = Session(f"http://{addrs['console']}")
        assert session.request("/topics")[1].endswith("/login?next=/topics")
        assert session.log_in(ROOT)[0] == 200
        # the sampler signs as the init user: the cluster page shows the broker's runtime info
        wait_for(lambda: "commitLogMaxOffset" in session.request("/")[2], "a runtime sample")
        assert "TBW102" in session.request("/topics?all=1")[2]
        assert proc.stop() == 0
    assert ROOT.secret_key not in proc.output()
