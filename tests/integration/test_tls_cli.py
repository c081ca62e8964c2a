"""``orbitmq standalone`` in ``enforcing`` mode with client certificates required, every port TLS
(name server, broker, console, metrics): the CLI with ``--tls`` flags or ``ORBITMQ_TLS_*``, and
refusals in one line (docs/tls.md)."""

from __future__ import annotations

import re
import socket
import ssl
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from orbitmq.cli.main import cli
from orbitmq.testing.certs import TestCerts, make_test_certs
from orbitmq.testing.process import ServerProcess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    return make_test_certs(tmp_path_factory.mktemp("certs"))


def client_flags(certs: TestCerts) -> list[str]:
    return ["--tls", "--tls-trust-cert-path", str(certs.ca), "--tls-cert-path",
            str(certs.client_cert), "--tls-key-path", str(certs.client_key)]


@pytest.fixture(scope="module")
def standalone(certs: TestCerts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    store = tmp_path_factory.mktemp("tls-standalone")
    proc = ServerProcess([
        "standalone", "--namesrv-port", "0", "--broker-port", "0", "--grpc-port", "0",
        "--ha-listen-port", "0", "--console-port", str(free_port()), "--store", str(store),
        "--metrics-exporter-type", "PROM", "--metrics-prom-exporter-port", "0",
        "--tls-server-mode", "enforcing", "--tls-server-cert-path", str(certs.server_cert),
        "--tls-server-key-path", str(certs.server_key),
        "--tls-server-trust-cert-path", str(certs.ca), "--tls-server-need-client-auth", "require",
        "--tls-enable", "true", "--tls-client-trust-cert-path", str(certs.ca),
        "--tls-client-cert-path", str(certs.client_cert),
        "--tls-client-key-path", str(certs.client_key)])
    try:
        yield proc.wait_ready("namesrv", "broker", "console", "metrics", timeout=60)
    finally:
        proc.stop()


def https_get(url: str, certs: TestCerts) -> bytes:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    ctx.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    with urllib.request.urlopen(url, context=ctx, timeout=10) as answer:
        assert answer.status == 200
        return bytes(answer.read())


def test_the_cli_with_tls_flags_or_the_environment(standalone: dict[str, str],
                                                   certs: TestCerts) -> None:
    topic = f"TlsCli_{uuid.uuid4().hex[:8]}"
    ns = ["--namesrv", standalone["namesrv"]]
    runner = CliRunner()
    done = runner.invoke(cli, ["topic", "create", "--topic", topic, *ns, *client_flags(certs)])
    assert done.exit_code == 0, done.output
    env = {"ORBITMQ_TLS_ENABLE": "true", "ORBITMQ_TLS_CLIENT_TRUST_CERT_PATH": str(certs.ca),
           "ORBITMQ_TLS_CLIENT_CERT_PATH": str(certs.client_cert),
           "ORBITMQ_TLS_CLIENT_KEY_PATH": str(certs.client_key)}
    listed = CliRunner(env=env).invoke(cli, ["topic", "list", *ns])
    assert listed.exit_code == 0 and topic in listed.output, listed.output


@pytest.mark.parametrize("flags, words", [
    ([], "cannot connect|closed|no answer"),  # plaintext: the port closes it
    (["--tls", "--tls-trust-cert-path", "CA"], "closed|no answer"),  # no client certificate
])
def test_the_cli_without_tls_or_a_certificate_fails_in_one_line(
        standalone: dict[str, str], certs: TestCerts, flags: list[str], words: str) -> None:
    flags = [str(certs.ca) if f == "CA" else f for f in flags]
    result = CliRunner().invoke(cli, ["topic", "list", "--namesrv", standalone["namesrv"], *flags])
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert re.search(words, lines[0]), lines[0]


def test_a_certificate_flag_without_tls_is_a_usage_error(certs: TestCerts) -> None:
    result = CliRunner().invoke(cli, ["topic", "list", "--tls-trust-cert-path", str(certs.ca)])
    assert result.exit_code == 2
    assert "--tls-trust-cert-path needs --tls" in result.output


def test_the_console_and_the_metrics_endpoint_serve_tls(standalone: dict[str, str],
                                                        certs: TestCerts, tmp_path: Path) -> None:
    assert b"rocketmq_" in https_get(f"https://{standalone['metrics']}/metrics", certs)
    assert b"Cluster" in https_get(f"https://{standalone['console']}/", certs)
    for addr in (standalone["metrics"], standalone["console"]):
        with pytest.raises(OSError):  # plaintext HTTP: closed unanswered
            urllib.request.urlopen(f"http://{addr}/", timeout=5).read()
