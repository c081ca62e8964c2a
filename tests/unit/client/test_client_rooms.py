"""The SDK's rooms (issue 37): no import circle inside ``orbitmq.client`` or ``orbitmq.cli``
(TYPE_CHECKING imports included), the admin areas built on the package-public core rather than
on AsyncAdmin's private members, and one public face (``orbitmq.client``) for what is built on
the SDK (the import-linter contract in pyproject.toml holds Spark, the console, the CLI, the
reliable toolkit and the test plugin to it)."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

ADMIN = Path(__file__).resolve().parents[3] / "src" / "orbitmq" / "client" / "admin"


def _circles(graph: grimp.ImportGraph, package: str) -> list[tuple[str, str]]:
    """Direct imports ``a -> b`` inside ``package`` for which ``b`` leads back to ``a`` there."""
    inside = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    sub = grimp.ImportGraph()
    for m in inside:
        sub.add_module(m)
    for m in inside:
        for w in graph.find_modules_directly_imported_by(m) & set(inside):
            sub.add_import(importer=m, imported=w)
    return [(m, w) for m in inside for w in sorted(sub.find_modules_directly_imported_by(m))
            if sub.find_shortest_chain(importer=w, imported=m) is not None]


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("orbitmq", exclude_type_checking_imports=False)


@pytest.mark.parametrize("package", ["orbitmq.client", "orbitmq.cli"])
def test_no_import_circle_inside(graph: grimp.ImportGraph, package: str) -> None:
    assert _circles(graph, package) == []


def test_the_circle_check_finds_a_circle() -> None:
    g = grimp.ImportGraph()
    for name in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        g.add_module(name)
    g.add_import(importer="pkg.a", imported="pkg.b")
    g.add_import(importer="pkg.b", imported="pkg.a")
    g.add_import(importer="pkg.c", imported="pkg.a")
    assert _circles(g, "pkg") == [("pkg.a", "pkg.b"), ("pkg.b", "pkg.a")]


def test_only_the_package_face_imports_the_admin_client(graph: grimp.ImportGraph) -> None:
    """The areas take an AdminCore; AsyncAdmin (admin/client.py) assembles them."""
    importers = graph.find_modules_that_directly_import("orbitmq.client.admin.client")
    assert {m for m in importers if m.startswith("orbitmq.client")} == {"orbitmq.client"}


def _private_reaches(path: Path) -> list[str]:
    """``x._name`` where ``x`` is not ``self`` or ``cls``: a reach into another object."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
    return found


def test_the_admin_areas_reach_into_no_private_member() -> None:
    assert [r for p in sorted(ADMIN.glob("*.py")) for r in _private_reaches(p)] == []


def test_the_private_reach_scan_sees_one(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("async def f(admin):\n    return await admin._broker('a', 1)\n")
    assert _private_reaches(bad) == ["bad.py:2 ._broker"]


def test_the_public_face_resolves_and_backs_the_top_level_names() -> None:
    import orbitmq
    import orbitmq.client as client

    assert all(hasattr(client, name) for name in client.__all__)
    sdk = {n for n, module in orbitmq._LAZY.items() if module.startswith("orbitmq.client")}
    assert sdk <= set(client.__all__)
    assert all(getattr(orbitmq, n) is getattr(client, n) for n in sdk)
