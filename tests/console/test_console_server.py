"""The console's server without a browser: who it refuses (a non-loopback bind without a token,
a request whose Host is not loopback, a script without the bearer token) and how it is started
(``orbitmq console`` and ``orbitmq standalone`` as real processes)."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from console_support import start_console, wait_for

from orbitmq.cli.main import cli
from orbitmq.config import ConfigError, ConsoleConfig
from orbitmq.console import ConsoleServer
from orbitmq.console.security import SECURITY_HEADERS
from orbitmq.testing import EmbeddedCluster, ServerProcess, standalone_process

TOKEN = "console-test-token-0123456789"


def get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "console.example"])
def test_a_non_loopback_bind_without_a_token_refuses_to_start(host: str) -> None:
    result = CliRunner().invoke(cli, ["console", "--namesrv", "127.0.0.1:9", "--host", host,
                                      "--port", "0"])
    assert result.exit_code == 2, result.output
    assert "not a loopback address: set console_token" in result.output
    assert "Traceback" not in result.output
    server = ConsoleServer(ConsoleConfig(namesrv_addr="127.0.0.1:9", console_listen_host=host,
                                         console_listen_port=0))
    with pytest.raises(ConfigError, match="console_token"):
        asyncio.run(server.start())
    assert server.address == ""  # it never listened


def test_a_short_token_is_refused_without_being_shown() -> None:
    result = CliRunner().invoke(cli, ["console", "--console-token", "tiny secret"])
    assert result.exit_code == 2
    assert "console_token = (hidden) is refused" in result.output
    assert "tiny" not in result.output


def test_console_credentials_go_in_pairs_and_the_secret_is_not_shown() -> None:
    result = CliRunner().invoke(cli, ["console", "--console-secret-key", "hidden-secret-1"])
    assert result.exit_code == 2
    assert "console_access_key and console_secret_key go together" in result.output
    assert "hidden-secret-1" not in result.output
    result = CliRunner().invoke(cli, ["console", "--console-access-key", "not a name",
                                      "--console-secret-key", "hidden-secret-1"])
    assert result.exit_code == 2 and "console_access_key" in result.output
    assert "hidden-secret-1" not in result.output


def test_a_request_for_another_host_name_is_refused(cluster: EmbeddedCluster,
                                                   console: ConsoleServer) -> None:
    """A page whose name was rebound to 127.0.0.1 (DNS rebinding) cannot read the console."""
    port = console.address.rpartition(":")[2]
    status, _, body = get(console.url + "/topics", Host=f"rebound.example:{port}")
    assert status == 421 and b"loopback" in body
    status, headers, _ = get(console.url + "/topics", Host=f"localhost:{port}")
    assert status == 200
    for name, value in SECURITY_HEADERS.items():
        assert headers[name] == value


def test_scripts_use_the_bearer_token(cluster: EmbeddedCluster) -> None:
    server = start_console(cluster, console_token=TOKEN)
    try:
        url = server.url + "/api/brokers/series"
        assert get(url)[0] == 401
        assert get(url, Authorization="Bearer not-the-token-at-all")[0] == 401
        assert get(url, Authorization=f"Bearer {TOKEN}")[0] == 200

        def brokers() -> set[str]:  # once the first sample is in
            return {b["broker"] for b in json.loads(get(url, Authorization=f"Bearer {TOKEN}")[2])
                    .values()}

        assert wait_for(brokers, "a runtime sample") == {"broker-a"}
        status, _, body = get(server.url + "/groups")  # redirected to the login form
        assert status == 200 and b'name="token"' in body
    finally:
        cluster.call(server.stop())


def test_orbitmq_console_serves_a_cluster(cluster: EmbeddedCluster) -> None:
    with ServerProcess(["console", "--namesrv", cluster.namesrv, "--port", "0"]) as proc:
        addr = proc.wait_ready("console")["console"]
        status, _, body = get(f"http://{addr}/")
        assert status == 200 and b"broker-a" in body


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_standalone_starts_the_console_unless_its_port_is_0(tmp_path: Path) -> None:
    with standalone_process(str(tmp_path / "a"), "--console-port", str(_free_port())) as proc:
        addrs = proc.wait_ready("namesrv", "broker", "console")
        status, _, body = get(f"http://{addrs['console']}/topics?all=1")
        assert status == 200 and b"TBW102" in body
    proc = standalone_process(str(tmp_path / "b"))  # passes --console-port 0
    try:
        proc.wait_ready("namesrv", "broker")
    finally:
        assert proc.stop() == 0
    assert "console" not in proc.addresses  # all its output is read once it stopped
    assert "stopping" in proc.output()
