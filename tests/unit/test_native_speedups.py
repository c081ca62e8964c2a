"""The C speedups (orbitmq.protocol._speedups): built here, and Java's hashes equal to their
Python twins. The stored codec's C twins are compared in test_stored_twins.py."""

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
    assert NATIVE is not None, "orbitmq.protocol._speedups did not build; see hatch_build.py"


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
    assert NATIVE.index_key_hash(topic, key) == index_key_hash(build_key(topic, key))


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
