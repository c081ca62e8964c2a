"""The C speedups (orbitmq._native._speedups, each room's part loaded by
orbitmq.<room>.native): built here, each room's part what its native.pyi says, and Java's hashes
equal to their Python twins. The stored codec's C twins are compared in test_stored_twins.py."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sysconfig
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbitmq.protocol.java_hash import java_string_hash_py
from orbitmq.protocol.native import NATIVE
from orbitmq.store.index_file import build_key, index_key_hash
from orbitmq.store.native import NATIVE as STORE_NATIVE

needs_native = pytest.mark.skipif(NATIVE is None, reason="C speedups not built or turned off")


def _compiler_runs() -> bool:
    """Whether the C compiler the install uses (hatch_build.py: ``$CC``, else the one Python
    was built with) compiles a trivial file here."""
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    with tempfile.TemporaryDirectory() as d:
        source = Path(d, "probe.c")
        source.write_text("int probe(void) { return 0; }\n")
        try:
            done = subprocess.run([*cc, "-c", str(source), "-o", str(Path(d, "probe.o"))],
                                  capture_output=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            return False
    return done.returncode == 0


def test_the_speedups_are_built_here() -> None:
    """The install compiles them on this machine (hatch_build.py): a silent fallback to Python
    would only show as a slower broker, so it fails here instead, unless the install was told
    to build without them (``CC=false make install``, ``ORBITMQ_NO_NATIVE_BUILD=1``)."""
    if os.environ.get("ORBITMQ_PURE_PYTHON") == "1":
        pytest.skip("turned off by ORBITMQ_PURE_PYTHON=1")
    if NATIVE is None and (os.environ.get("ORBITMQ_NO_NATIVE_BUILD") == "1"
                           or not _compiler_runs()):
        pytest.skip("installed without the C speedups: no C compiler that runs, or "
                    "ORBITMQ_NO_NATIVE_BUILD=1")
    assert NATIVE is not None, "orbitmq._native._speedups did not build; see hatch_build.py"


# -- Java's String.hashCode ----------------------------------------------------------------------

_surrogates = st.sampled_from(["\ud800", "\udfff", "a\udc00b", "\ud83d\ude00"])


@needs_native
@given(st.one_of(st.text(), st.text(alphabet=st.characters(max_codepoint=0x7F)), _surrogates))
def test_java_string_hash_matches_python(s: str) -> None:
    assert NATIVE.java_string_hash(s) == java_string_hash_py(s)


@needs_native
def test_java_string_hash_known_values() -> None:
    assert NATIVE.java_string_hash("") == 0
    assert NATIVE.java_string_hash("TagA") == 2598919
    assert NATIVE.java_string_hash("polygenelubricants") == -2147483648
    assert NATIVE.java_string_hash("\U0001f600") == java_string_hash_py("\U0001f600") == 1772899


@needs_native
@given(st.text(max_size=40), st.text(max_size=40))
def test_index_key_hash_matches_the_joined_key(topic: str, key: str) -> None:
    assert STORE_NATIVE is not None
    assert STORE_NATIVE.index_key_hash(topic, key) == index_key_hash(build_key(topic, key))


# -- the body CRC ----------------------------------------------------------------------------------

@needs_native
def test_the_carry_less_crc32_is_in_use_on_this_machine() -> None:
    """x86-64 with PCLMULQDQ (this machine): the fast path, checked against the table at load."""
    if platform.machine() == "x86_64":
        assert NATIVE.CRC32_CLMUL == 1


@needs_native
@given(st.binary(max_size=5000), st.integers(0, 15))
def test_crc32_is_zlibs_at_every_length_and_alignment(data: bytes, skip: int) -> None:
    view = memoryview(data)[min(skip, len(data)):]  # unaligned starts too
    assert NATIVE.crc32(view) == zlib.crc32(view)


@needs_native
@pytest.mark.parametrize("n", [0, 1, 15, 16, 63, 64, 65, 79, 80, 127, 128, 129, 1024, 4096 + 13,
                               1 << 20])
def test_crc32_is_zlibs_around_the_lane_sizes(n: int) -> None:
    data = bytes((i * 131 + 7) & 0xFF for i in range(n))
    assert NATIVE.crc32(data) == zlib.crc32(data)
    assert NATIVE.crc32(b"\xff" * n) == zlib.crc32(b"\xff" * n)


# -- each room's part, and its stub ----------------------------------------------------------------

ROOMS = {"protocol": "ProtocolNative", "store": "StoreNative", "broker": "BrokerNative"}
SRC = Path(__file__).resolve().parents[3] / "src" / "orbitmq"


def _stub_names(room: str) -> set[str]:
    """The members the room's native.pyi declares on its NATIVE's type."""
    import ast

    tree = ast.parse((SRC / room / "native.pyi").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == ROOMS[room]]
    names = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


@needs_native
@pytest.mark.parametrize("room", sorted(ROOMS))
def test_each_rooms_native_is_what_its_stub_says(room: str) -> None:
    """orbitmq.<room>.native.NATIVE holds that room's C entry points, exactly the ones its
    native.pyi types: a stub that falls behind the C fails here."""
    import importlib

    native = importlib.import_module(f"orbitmq.{room}.native").NATIVE
    assert native is not None
    assert native.__name__ == f"orbitmq._native._speedups.{room}"
    public = {n for n in dir(native) if not n.startswith("_")}
    assert public == _stub_names(room)


@needs_native
def test_the_rooms_share_no_entry_point() -> None:
    """No room reaches another's C through its own loader: the protocol exports no store or
    broker work (dispatch_plan, index_put, FastPath...)."""
    names = {room: _stub_names(room) for room in ROOMS}
    assert not names["protocol"] & (names["store"] | names["broker"])
    assert not names["store"] & names["broker"]
    assert {"dispatch_plan", "queue_runs", "index_put", "index_key_hash"} <= names["store"]
    assert "FastPath" in names["broker"]


def test_the_rooms_load_together_or_not_at_all() -> None:
    """One extension: with it every room's NATIVE is there, without it (not built, or
    ORBITMQ_PURE_PYTHON=1) none is."""
    from orbitmq.broker.native import NATIVE as BROKER_NATIVE

    assert (NATIVE is None) == (STORE_NATIVE is None) == (BROKER_NATIVE is None)
    if os.environ.get("ORBITMQ_PURE_PYTHON") == "1":
        assert NATIVE is None


def test_each_room_imports_its_own_native_loader_only() -> None:
    """Store code takes its C from orbitmq.store.native, broker code from orbitmq.broker.native:
    never another room's loader (import-linter forbids the other directions and the extension
    itself)."""
    import ast

    found = []
    for room in ("store", "broker"):
        others = {f"orbitmq.{r}.native" for r in ROOMS if r != room}
        for path in sorted((SRC / room).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom):  # from orbitmq.x.native / from orbitmq.x
                    names = [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
                found += [f"{path.relative_to(SRC)}: {n}" for n in names if n in others]
    assert found == []
