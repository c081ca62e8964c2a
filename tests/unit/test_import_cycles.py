"""The broker's import graph: no cycle among orbitmq.broker modules, TYPE_CHECKING imports
included (a processor that names the controller's type, even for a type hint, is the circle
this forbids: processors get a BrokerContext). The store contract is import-linter's
(pyproject.toml: the broker imports the store's facade and result types only)."""

from __future__ import annotations

import grimp


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


def test_no_import_cycle_inside_the_broker() -> None:
    graph = grimp.build_graph("orbitmq", exclude_type_checking_imports=False)
    assert _cycles(graph, "orbitmq.broker") == []


def test_only_the_package_and_the_servers_import_the_controller() -> None:
    graph = grimp.build_graph("orbitmq", exclude_type_checking_imports=False)
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
