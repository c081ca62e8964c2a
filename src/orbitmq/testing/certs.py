"""A throwaway CA with server and client certificates, made by the ``openssl`` command, for tests
and for docs/tls.md's set-up (``python -m orbitmq.testing.certs DIR``).

Nothing here is for production: the keys are unencrypted and the CA lives next to them.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["TestCerts", "make_test_certs", "OPENSSL_TIMEOUT_S"]

OPENSSL_TIMEOUT_S = 30.0
DAYS = 30
SERVER_NAMES = "DNS:localhost,IP:127.0.0.1,IP:::1"


@dataclasses.dataclass(frozen=True)
class TestCerts:
    """PEM paths: the CA, a server certificate for localhost / 127.0.0.1 / ::1, a client one,
    and a client certificate from another CA (one the servers do not trust)."""

    __test__ = False  # not a pytest test class

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    stranger_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise RuntimeError("the openssl command is needed to make test certificates")
    proc = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=OPENSSL_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {proc.stderr.strip()[-500:]}")


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", str(DAYS),
             "-subj", f"/CN=OrbitMQ test {name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


def _leaf(d: Path, name: str, ca: str, usage: str, names: str | None) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN=OrbitMQ {name}",
             cwd=d)
    ext = d / f"{name}.ext"
    lines = ["basicConstraints=CA:FALSE", f"extendedKeyUsage={usage}"]
    if names:
        lines.append(f"subjectAltName={names}")
    ext.write_text("\n".join(lines) + "\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", str(DAYS), "-extfile", ext.name,
             cwd=d)


def make_test_certs(directory: str | Path) -> TestCerts:
    """Make the CA and certificates in ``directory`` (created; keys 0600)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca")
    _leaf(d, "server", "ca", "serverAuth", SERVER_NAMES)
    _leaf(d, "client", "ca", "clientAuth", None)
    _ca(d, "stranger-ca")
    _leaf(d, "stranger", "stranger-ca", "clientAuth", None)
    for key in d.glob("*.key"):
        os.chmod(key, 0o600)
    return TestCerts(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem",
                     d / "client.key", d / "stranger.pem", d / "stranger.key")


if __name__ == "__main__":  # pragma: no cover - docs/tls.md's set-up
    out = make_test_certs(sys.argv[1] if len(sys.argv) > 1 else "certs")
    for field in dataclasses.fields(out):
        print(f"{field.name}: {getattr(out, field.name)}")
