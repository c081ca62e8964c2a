"""What the import-linter contracts cannot see: Spark and the CLI reaching the wire through the
``orbitmq.protocol`` package's re-exports, and PULL_MESSAGE requests built outside the one builder.

``from orbitmq.protocol import RemotingCommand`` imports the package, not ``protocol.command``, so
the contracts "Spark uses the SDK only" and "the CLI's client commands use the
SDK only" would let it pass; this test does not.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src" / "orbitmq"
# What the package re-exports that Spark and the CLI must not use (the wire, not data types).
WIRE_NAMES = {"RemotingCommand", "RequestCode", "ResponseCode", "decode", "encode"}


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            out.extend((a.name, [], node.lineno) for a in node.names)
    return out


def _wire_imports(package: str) -> list[str]:
    found = []
    for path in sorted((SRC / package).rglob("*.py")):
        for module, names, line in _imports(path):
            if module == "orbitmq.protocol" and (
                    not names or any(n.endswith("Header") or n in WIRE_NAMES for n in names)):
                found.append(f"{path.name}:{line} from {module} import {', '.join(names)}")
            if module == "orbitmq" and {"protocol", "transport"} & set(names):
                found.append(f"{path.name}:{line} from orbitmq import {', '.join(names)}")
    return found


def test_spark_and_the_cli_take_no_wire_types_from_the_protocol_package():
    assert _wire_imports("spark") == []
    assert _wire_imports("cli") == []


def test_the_scan_sees_a_wire_import_through_the_package(tmp_path):
    """The check itself can fail: a module importing a header class through the package."""
    bad = tmp_path / "bad.py"
    bad.write_text("from orbitmq.protocol import PullMessageRequestHeader, Message\n")
    assert _imports(bad) == [("orbitmq.protocol", ["PullMessageRequestHeader", "Message"], 1)]


def test_pull_requests_are_built_in_one_place():
    """Every PULL_MESSAGE of the SDK (pull consumer, push consumer, admin reads, raw pulls, and
    so Spark's source) comes from orbitmq.client.consumer.pull_codec."""
    builders = sorted(
        str(path.relative_to(SRC))
        for package in ("client", "spark", "cli", "reliable")
        for path in (SRC / package).rglob("*.py")
        if "PullMessageRequestHeader(" in path.read_text()
        or "RequestCode.PULL_MESSAGE" in path.read_text())
    assert builders == ["client/consumer/pull_codec.py"]


def test_end_transaction_requests_are_built_in_one_place():
    """After a local transaction, in a check's answer, and by a receipt (Spark's commit): the
    same builder, orbitmq.client.producer.transaction_end."""
    builders = sorted(
        str(path.relative_to(SRC))
        for package in ("client", "spark", "cli", "reliable")
        for path in (SRC / package).rglob("*.py")
        if "EndTransactionRequestHeader(" in path.read_text()
        or "RequestCode.END_TRANSACTION" in path.read_text())
    assert builders == ["client/producer/transaction_end.py"]
