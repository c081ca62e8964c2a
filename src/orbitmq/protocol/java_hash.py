"""Java's ``String.hashCode()``, which RocketMQ puts on disk and on the wire.

Tag codes in the ConsumeQueue, key hashes in the IndexFile and hash-based queue selectors must
agree with Java clients and brokers bit for bit, so the hash is computed over UTF-16 code units
(a character beyond the BMP counts as its two surrogates) with 32-bit wraparound.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable

from orbitmq.protocol.native import NATIVE

__all__ = ["java_string_hash", "java_string_hash_py"]

_INT32_MAX = 0x7FFF_FFFF
_MASK32 = 0xFFFF_FFFF
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
_CHUNK = 256
_POW31 = [pow(31, i, 1 << 32) for i in range(_CHUNK + 1)]  # 31^i mod 2^32
_POW31_DESC = _POW31[_CHUNK - 1 :: -1]  # 31^(CHUNK-1) ... 31^0


def java_string_hash_py(s: str) -> int:
    """``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, as a signed int32 (the Python
    twin of the C speedup, which ``java_string_hash`` is when it was built)."""
    units: bytes | memoryview
    if s.isascii():
        units = s.encode("ascii")
    else:
        units = memoryview(s.encode(_UTF16_NATIVE, "surrogatepass")).cast("H")
    # sum(map(mul)) runs in C and beats a Python loop; chunks keep the integers small.
    n = len(units)
    h: int
    if n <= _CHUNK:  # the usual case, in one step
        h = sum(map(operator.mul, units, _POW31_DESC[_CHUNK - n :])) & _MASK32
        return h - 0x1_0000_0000 if h > _INT32_MAX else h
    h = 0
    for start in range(0, n, _CHUNK):
        chunk = units[start : start + _CHUNK]
        powers = _POW31_DESC[_CHUNK - len(chunk) :]
        h = (h * _POW31[len(chunk)] + sum(map(operator.mul, chunk, powers))) & _MASK32
    return h - 0x1_0000_0000 if h > _INT32_MAX else h


java_string_hash: Callable[[str], int] = (
    NATIVE.java_string_hash if NATIVE is not None else java_string_hash_py
)
