"""The broker's import graph: no cycle among orbitmq.broker modules, TYPE_CHECKING imports
included (a processor that names the controller's type, even for a type hint, is the circle
this forbids: processors get a BrokerContext). The store contract is import-linter's
(pyproject.toml: the broker imports the store's facade and result types only)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import grimp

from orbitmq.config import TEST_MIN_STORE


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


def test_importing_the_broker_loads_neither_grpc_nor_protobuf() -> None:
    """The gRPC front is mounted by the server assembly (orbitmq/assembly.py), so a broker with
    gRPC off never loads grpcio or protobuf."""
    probe = ("import sys, orbitmq.broker.controller\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'google')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_the_assembly_mounts_grpc_only_when_asked(tmp_path: Path) -> None:
    from orbitmq.assembly import build_broker, grpc_endpoint
    from orbitmq.config import BrokerConfig

    def config(grpc_port: int) -> BrokerConfig:
        store = dataclasses.replace(TEST_MIN_STORE, store_path=str(tmp_path / str(grpc_port)))
        return BrokerConfig(listen_port=0, grpc_listen_port=grpc_port, store=store)

    off = build_broker(config(-1))
    assert grpc_endpoint(off) is None and "grpc" not in off.services.names
    on = build_broker(config(0))
    assert grpc_endpoint(on) is not None
    names = on.services.names
    assert names.index("pop") < names.index("grpc") < names.index("observability")
