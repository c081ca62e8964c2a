"""TLS of the gRPC endpoint: grpcio's server credentials from the ``tls_server_*`` settings.

grpcio asks :func:`server_credentials`' fetcher before every handshake (from its own threads);
the fetcher stats the files and hands grpcio a new certificate configuration only when one of
them changed, so a rotated certificate is served without a restart, as on the remoting ports
(transport/tls.py). A rotation that cannot be read keeps the previous configuration.

grpcio either requires a client certificate or asks for none: ``tls_server_need_client_auth``
``optional`` asks for none on this port (``require`` requires one).
"""

from __future__ import annotations

import logging
import threading

import grpc

from orbitmq.security.tls import ServerTls, TlsClientAuth, TlsError, file_stamps

__all__ = ["server_credentials"]

log = logging.getLogger(__name__)


def _read(tls: ServerTls) -> grpc.ServerCertificateConfiguration:
    with open(tls.key_path, "rb") as f:
        key = f.read()
    with open(tls.cert_path, "rb") as f:
        cert = f.read()
    roots = None
    if tls.need_client_auth is not TlsClientAuth.NONE and tls.trust_cert_path:
        with open(tls.trust_cert_path, "rb") as f:
            roots = f.read()
    return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=roots)


class _Fetcher:
    """grpcio's certificate configuration fetcher: a new configuration when a file changed."""

    def __init__(self, tls: ServerTls) -> None:
        self._tls = tls
        self._paths = tuple(p for p in (tls.cert_path, tls.key_path, tls.trust_cert_path) if p)
        self._lock = threading.Lock()
        self._stamp = file_stamps(self._paths)
        self.reloads = 0

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        with self._lock:
            stamp = file_stamps(self._paths)
            if stamp == self._stamp:
                return None
            self._stamp = stamp
            try:
                config = _read(self._tls)
            except OSError as e:
                log.warning("gRPC TLS: the changed certificate files cannot be read (%s); still "
                            "using the previous ones", e)
                return None
            self.reloads += 1
            log.info("gRPC TLS: certificates reloaded from %s", ", ".join(self._paths))
            return config


def server_credentials(tls: ServerTls) -> grpc.ServerCredentials:
    """Credentials for ``add_secure_port``.

    Raises:
        TlsError: a file cannot be read (grpcio checks the certificate itself when it listens).
    """
    problem = tls.problem()
    if problem is not None:
        raise TlsError(f"{problem[0]}: {problem[1]}")
    try:
        initial = _read(tls)
    except OSError as e:
        raise TlsError(f"gRPC TLS: cannot read {e.filename}: {e.strerror}") from None
    return grpc.dynamic_ssl_server_credentials(
        initial, _Fetcher(tls),
        require_client_authentication=tls.need_client_auth is TlsClientAuth.REQUIRE)
