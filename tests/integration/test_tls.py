"""TLS on the remoting transport, over real sockets on 127.0.0.1: RocketMQ's three server modes,
client certificates, and certificates rotated without a restart (transport/tls.py)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import time
from pathlib import Path

import pytest

from orbitmq.errors import ConnectionClosedError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand, encode
from orbitmq.security.tls import (
    ClientTls,
    ServerTls,
    TlsClientAuth,
    TlsError,
    TlsServerMode,
    client_tls_from_env,
)
from orbitmq.testing.certs import TestCerts, make_test_certs
from orbitmq.testing.waits import EVENT_WAIT_S
from orbitmq.transport import RemotingClient, RemotingServer, run
from orbitmq.transport.tls import HANDSHAKE_TIMEOUT_S, TlsListener

ECHO = 9001
CLOSE_WAIT_S = 1.0  # the acceptance bound: a plaintext frame on an enforcing port


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    return make_test_certs(tmp_path_factory.mktemp("certs"))


def server_tls(certs: TestCerts, mode: TlsServerMode,
               auth: TlsClientAuth = TlsClientAuth.NONE) -> ServerTls:
    return ServerTls(mode, str(certs.server_cert), str(certs.server_key), str(certs.ca), auth)


def trusting(certs: TestCerts, *, cert: bool = False, stranger: bool = False) -> ClientTls:
    if stranger:
        return ClientTls(str(certs.ca), str(certs.stranger_cert), str(certs.stranger_key))
    if cert:
        return ClientTls(str(certs.ca), str(certs.client_cert), str(certs.client_key))
    return ClientTls(str(certs.ca))


def closed_by_peer(s: socket.socket) -> bool:
    """True when the peer closed ``s``: an end of stream, or a reset (a socket closed with bytes
    it had not read, such as half a ClientHello, is reset rather than ended)."""
    try:
        return s.recv(10) == b""
    except ConnectionResetError:
        return True


def echo_server(tls: ServerTls | None) -> RemotingServer:
    server = RemotingServer("127.0.0.1", 0, name="tls-test", tls=tls)
    server.register(ECHO, lambda cmd, conn: cmd.response(ResponseCode.SUCCESS, body=cmd.body))
    return server


async def echo(client: RemotingClient, server: RemotingServer, body: bytes = b"hi") -> bytes:
    resp = await client.invoke(server.address, RemotingCommand.request(ECHO, body=body), 3.0)
    assert resp.code == ResponseCode.SUCCESS
    return resp.body


def plaintext_exchange(port: int) -> bytes | None:
    """Send one plaintext request frame; its answer's bytes (b"" when the server closed without
    a word, None when neither came within CLOSE_WAIT_S)."""
    with socket.create_connection(("127.0.0.1", port), timeout=CLOSE_WAIT_S) as s:
        s.sendall(encode(RemotingCommand.request(ECHO, body=b"plain")))
        got = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return got
                got += chunk
                if len(got) >= 4:
                    return got
        except TimeoutError:
            return None
        except ConnectionResetError:
            return got


def test_enforcing_answers_tls_and_closes_plaintext_unanswered(certs: TestCerts) -> None:
    async def main() -> None:
        server = echo_server(server_tls(certs, TlsServerMode.ENFORCING))
        await server.start()
        client = RemotingClient(tls=trusting(certs))
        try:
            assert await echo(client, server, b"x" * 3_000_000) == b"x" * 3_000_000
            loop = asyncio.get_running_loop()
            started = time.monotonic()
            got = await loop.run_in_executor(None, plaintext_exchange, server.port)
            assert got == b"", f"a plaintext frame got {got!r} (None: not closed in time)"
            assert time.monotonic() - started < CLOSE_WAIT_S
            plain = RemotingClient(connect_timeout=1.0)
            with pytest.raises((ConnectionClosedError, TimeoutError)):
                await plain.invoke(server.address, RemotingCommand.request(ECHO), 1.0)
            await plain.close()
            assert isinstance(server._server, TlsListener)
            assert server._server.refused_plain == 2
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_permissive_serves_both_on_one_port(certs: TestCerts) -> None:
    async def main() -> None:
        server = echo_server(server_tls(certs, TlsServerMode.PERMISSIVE))
        await server.start()
        secure, plain = RemotingClient(tls=trusting(certs)), RemotingClient()
        try:
            assert await echo(secure, server, b"tls") == b"tls"
            assert await echo(plain, server, b"plain") == b"plain"
            conns = list(server.connections)
            assert sorted(c._transport.get_extra_info("sslcontext") is not None  # type: ignore[union-attr]
                          for c in conns) == [False, True]
        finally:
            await secure.close()
            await plain.close()
            await server.stop()

    run(main())


def test_require_refuses_a_client_without_a_trusted_certificate(certs: TestCerts) -> None:
    async def main() -> None:
        server = echo_server(server_tls(certs, TlsServerMode.ENFORCING, TlsClientAuth.REQUIRE))
        await server.start()
        good = RemotingClient(tls=trusting(certs, cert=True))
        try:
            assert await echo(good, server) == b"hi"
            for tls in (trusting(certs), trusting(certs, stranger=True)):
                bad = RemotingClient(tls=tls, connect_timeout=2.0)
                # TLS 1.3: the client's half of the handshake ends before the server has read
                # its certificate, so the refusal (an alert, then the close) meets the request.
                with pytest.raises((ConnectionClosedError, TimeoutError)):
                    await bad.invoke(server.address, RemotingCommand.request(ECHO), 2.0)
                await bad.close()
            assert isinstance(server._server, TlsListener)
            assert server._server.failed_handshakes == 2
            assert len(server.connections) == 1  # a failed handshake never reached the server
        finally:
            await good.close()
            await server.stop()

    run(main())


def test_optional_lets_a_client_without_a_certificate_in(certs: TestCerts) -> None:
    async def main() -> None:
        server = echo_server(server_tls(certs, TlsServerMode.ENFORCING, TlsClientAuth.OPTIONAL))
        await server.start()
        clients = [RemotingClient(tls=trusting(certs)), RemotingClient(tls=trusting(certs, cert=True))]
        try:
            for client in clients:
                assert await echo(client, server) == b"hi"
        finally:
            for client in clients:
                await client.close()
            await server.stop()

    run(main())


def test_a_client_refuses_a_server_it_does_not_trust(certs: TestCerts, tmp_path: Path) -> None:
    other = make_test_certs(tmp_path / "other")

    async def main() -> None:
        server = echo_server(server_tls(certs, TlsServerMode.ENFORCING))
        await server.start()
        client = RemotingClient(tls=ClientTls(str(other.ca)))
        try:
            with pytest.raises(ConnectionClosedError, match="TLS handshake with .* failed"):
                await echo(client, server)
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_certificates_rotate_without_a_restart(certs: TestCerts, tmp_path: Path) -> None:
    """The server's files replaced by a certificate of another CA: the next connection shows
    the new one (a client trusting only the old CA is refused, one trusting the new is not);
    connections made before stay up."""
    live = tmp_path / "live"
    live.mkdir()
    for name in ("server.pem", "server.key"):
        shutil.copy(certs.server_cert.parent / name, live / name)
    rotated = make_test_certs(tmp_path / "rotated")
    tls = ServerTls(TlsServerMode.ENFORCING, str(live / "server.pem"), str(live / "server.key"))

    async def main() -> None:
        server = echo_server(tls)
        await server.start()
        before, old, new = (RemotingClient(tls=trusting(certs)), RemotingClient(tls=trusting(certs)),
                            RemotingClient(tls=ClientTls(str(rotated.ca))))
        try:
            assert await echo(before, server) == b"hi"
            for name, src in (("server.pem", rotated.server_cert), ("server.key", rotated.server_key)):
                shutil.copy(src, live / (name + ".new"))
                (live / (name + ".new")).replace(live / name)
            assert await echo(new, server) == b"hi"
            with pytest.raises(ConnectionClosedError, match="TLS handshake"):
                await echo(old, server)
            assert await echo(before, server) == b"hi"  # the connection made before the change
            assert isinstance(server._server, TlsListener)
            assert server._server.contexts.reloads == 1
            (live / "server.pem").write_text("not a certificate")  # a broken rotation
            after = RemotingClient(tls=ClientTls(str(rotated.ca)))
            assert await echo(after, server) == b"hi"  # the last good certificate still shown
            await after.close()
        finally:
            for client in (before, old, new):
                await client.close()
            await server.stop()

    run(main())


def test_settings_that_cannot_work_are_refused_at_start(certs: TestCerts, tmp_path: Path) -> None:
    async def start(tls: ServerTls) -> None:
        server = echo_server(tls)
        try:
            await server.start()
        finally:
            await server.stop()

    with pytest.raises(TlsError, match="tls_server_cert_path"):
        run(start(ServerTls(TlsServerMode.ENFORCING)))
    with pytest.raises(TlsError, match="tls_server_trust_cert_path"):
        run(start(ServerTls(TlsServerMode.PERMISSIVE, str(certs.server_cert), str(certs.server_key),
                            need_client_auth=TlsClientAuth.REQUIRE)))
    with pytest.raises(TlsError, match="cannot load"):
        run(start(ServerTls(TlsServerMode.ENFORCING, str(certs.server_cert),
                            str(certs.client_key))))  # a key of another certificate
    with pytest.raises(TlsError, match="cannot load"):
        RemotingClient(tls=ClientTls(str(tmp_path / "missing.pem")))
    with pytest.raises(TlsError, match="go together"):
        ClientTls(cert_path=str(certs.client_cert))


def test_client_settings_from_the_environment(certs: TestCerts) -> None:
    assert client_tls_from_env({}) is None
    assert client_tls_from_env({"ORBITMQ_TLS_ENABLE": "false"}) is None
    got = client_tls_from_env({"ORBITMQ_TLS_ENABLE": "true",
                               "ORBITMQ_TLS_CLIENT_TRUST_CERT_PATH": str(certs.ca),
                               "ORBITMQ_TLS_CLIENT_CHECK_HOSTNAME": "off"})
    assert got == ClientTls(str(certs.ca), check_hostname=False)
    with pytest.raises(TlsError, match="ORBITMQ_TLS_ENABLE"):
        client_tls_from_env({"ORBITMQ_TLS_ENABLE": "maybe"})


def test_stopping_closes_connections_still_silent_or_in_their_handshake(certs: TestCerts) -> None:
    """A connection that has sent nothing yet (its first byte is awaited) or only half a
    handshake is closed when the server stops, and the stop does not wait for it."""
    async def main() -> None:
        server = echo_server(server_tls(certs, TlsServerMode.PERMISSIVE))
        await server.start()
        loop = asyncio.get_running_loop()
        silent = socket.create_connection(("127.0.0.1", server.port))
        half = socket.create_connection(("127.0.0.1", server.port))
        half.sendall(b"\x16\x03\x01")  # the start of a ClientHello's record, no more
        listener = server._server
        assert isinstance(listener, TlsListener)
        deadline = time.monotonic() + EVENT_WAIT_S
        while len(listener._admitting) < 2:
            assert time.monotonic() < deadline, "the two connections were not accepted"
            await asyncio.sleep(0.01)
        started = time.monotonic()
        await server.stop()
        # Not the handshake's own timeout: the stop closed them.
        assert time.monotonic() - started < HANDSHAKE_TIMEOUT_S / 2
        for s in (silent, half):
            s.settimeout(HANDSHAKE_TIMEOUT_S / 2)
            assert await loop.run_in_executor(None, closed_by_peer, s)
            s.close()

    run(main())
