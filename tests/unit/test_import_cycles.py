"""Import circles: none inside any package of orbitmq, TYPE_CHECKING imports included (a
module that names another's type, even for a type hint only, closes the circle as surely as a
call does: processors get a BrokerContext, not the controller's type).

Importing ``a.b.c`` runs ``a/b/__init__.py`` first, so a module importing one of another
package counts here as importing that package's ``__init__`` too (``orbitmq.grpc.endpoint``
importing ``orbitmq.broker.context`` runs ``orbitmq/broker/__init__.py``, which imports the
controller): such a circle fails at import time in one order and not in the other.

One test per package, so that a failure names the package whose modules import each other:
each circle (a strongly connected group of modules) belongs to the innermost package holding
all its modules; a circle across top-level packages belongs to ``orbitmq`` itself. The
layering between packages is import-linter's (pyproject.toml's contracts)."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

import orbitmq


def _packages() -> list[str]:
    """Every package under orbitmq (a folder with an ``__init__.py``), found on disk: importing
    them to list them would load the optional dependencies of some (pyspark, grpc)."""
    root = Path(orbitmq.__file__).parent
    return sorted(
        ".".join(("orbitmq", *init.parent.relative_to(root).parts))
        for init in root.rglob("__init__.py")
    )


def _cycles(graph: grimp.ImportGraph, prefix: str) -> list[list[str]]:
    """Strongly connected groups of more than one module among those under ``prefix``."""
    modules = sorted(m for m in graph.modules if m == prefix or m.startswith(prefix + "."))
    inside = set(modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm (the graph is small: no recursion limit)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.find_modules_directly_imported_by(v) & inside):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for m in modules:
        if m not in index:
            visit(m)
    return found


def _owner(cycle: list[str], packages: set[str]) -> str:
    """The innermost package holding every module of ``cycle`` (a package's own
    ``__init__`` counts as inside it)."""
    homes = [m if m in packages else m.rpartition(".")[0] for m in cycle]
    parts = [home.split(".") for home in homes]
    common: list[str] = []
    for names in zip(*parts, strict=False):
        if len(set(names)) > 1:
            break
        common.append(names[0])
    return ".".join(common)


def _with_package_inits(graph: grimp.ImportGraph) -> grimp.ImportGraph:
    """``graph`` plus, for each import of a module, an import of every package above it that
    is not above the importer as well (Python runs those packages' ``__init__`` first)."""
    def above(module: str) -> set[str]:
        parts = module.split(".")
        return {".".join(parts[:n]) for n in range(1, len(parts))}

    for importer in list(graph.modules):
        own = above(importer) | {importer}
        for imported in list(graph.find_modules_directly_imported_by(importer)):
            for package in above(imported) - own:
                if package in graph.modules:
                    graph.add_import(importer=importer, imported=package)
    return graph


def _cycles_by_package(graph: grimp.ImportGraph, root: str,
                       packages: set[str]) -> dict[str, list[list[str]]]:
    found: dict[str, list[list[str]]] = {}
    for cycle in _cycles(graph, root):
        found.setdefault(_owner(cycle, packages), []).append(cycle)
    return found


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("orbitmq", exclude_type_checking_imports=False)


@pytest.fixture(scope="module")
def cycles_by_package() -> dict[str, list[list[str]]]:
    graph = _with_package_inits(grimp.build_graph("orbitmq", exclude_type_checking_imports=False))
    return _cycles_by_package(graph, "orbitmq", set(_packages()))


@pytest.mark.parametrize("package", _packages())
def test_no_import_cycle_in(package: str, cycles_by_package: dict[str, list[list[str]]]) -> None:
    assert cycles_by_package.get(package, []) == []


def test_every_package_is_checked(cycles_by_package: dict[str, list[list[str]]]) -> None:
    assert set(cycles_by_package) <= set(_packages())


def test_only_the_package_and_the_servers_import_the_controller(graph: grimp.ImportGraph) -> None:
    importers = graph.find_modules_that_directly_import("orbitmq.broker.controller")
    assert {m for m in importers if m.startswith("orbitmq.broker")} == {"orbitmq.broker"}


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for name in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(name)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert _cycles(graph, "pkg") == [["pkg.a", "pkg.b"]]


def test_a_cycle_belongs_to_the_innermost_package_holding_it() -> None:
    graph = grimp.ImportGraph()
    names = ("pkg", "pkg.sub", "pkg.sub.a", "pkg.sub.b", "pkg.other", "pkg.other.c", "pkg.d")
    for name in names:
        graph.add_module(name)
    graph.add_import(importer="pkg.sub.a", imported="pkg.sub.b")
    graph.add_import(importer="pkg.sub.b", imported="pkg.sub.a")
    graph.add_import(importer="pkg.other.c", imported="pkg.d")
    graph.add_import(importer="pkg.d", imported="pkg.other.c")
    graph.add_import(importer="pkg.other", imported="pkg.other.c")
    graph.add_import(importer="pkg.other.c", imported="pkg.other")
    found = _cycles_by_package(graph, "pkg", {"pkg", "pkg.sub", "pkg.other"})
    assert found == {
        "pkg.sub": [["pkg.sub.a", "pkg.sub.b"]],
        "pkg": [["pkg.d", "pkg.other", "pkg.other.c"]],
    }


def test_importing_a_module_of_another_package_runs_that_packages_init() -> None:
    graph = grimp.ImportGraph()
    for name in ("pkg", "pkg.front", "pkg.front.endpoint", "pkg.core", "pkg.core.context",
                 "pkg.core.root"):
        graph.add_module(name)
    graph.add_import(importer="pkg.core", imported="pkg.core.root")  # the package's __init__
    graph.add_import(importer="pkg.core.root", imported="pkg.front.endpoint")
    graph.add_import(importer="pkg.front.endpoint", imported="pkg.core.context")
    assert _cycles(graph, "pkg") == []  # no circle between the modules alone
    found = _cycles_by_package(_with_package_inits(graph), "pkg", {"pkg", "pkg.front", "pkg.core"})
    assert found == {"pkg": [["pkg.core", "pkg.core.root", "pkg.front.endpoint"]]}
