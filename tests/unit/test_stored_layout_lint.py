"""The stored message layout is known in one place: the ``protocol/stored`` package (and its C
twin, ``_speedups.c`` with ``_stored_rules.h``).

A grep over ``src/``: the layout's magic codes, header struct formats, field offset names and the
arithmetic that computes field positions by hand (``pos + 36``, ``sys_flag & 48``) appear only in
the codec; the properties text is parsed only in ``protocol/properties.py``. Each pattern is
also required to match inside the codec, so that a renamed constant cannot make this test pass
by matching nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "orbitmq"
CODEC = set((SRC / "protocol" / "stored").glob("*.py"))
C_TWIN = [SRC / "protocol" / "_speedups.c", SRC / "protocol" / "_stored_rules.h"]
PROPERTIES = SRC / "protocol" / "properties.py"

# pattern -> what it finds
LAYOUT_PATTERNS = {
    r"(?i)0xDAA320A7|-626843481": "the message magic code",
    r"(?i)0xCBD43194|-875286124": "the blank (end of segment) magic code",
    r"iiiiiqqiq": "the stored header's struct format",
    r"\b(TOTALSIZE|MAGICCODE|BODYCRC|QUEUEID|FLAG|QUEUEOFFSET|PHYSICALOFFSET|SYSFLAG|"
    r"BORNTIMESTAMP|BORNHOST|STORETIMESTAMP)_AT": "a field offset constant",
    r"\b(STORETIMESTAMP_AT_V[46]|HEADER_SIZE_V4|_HEADERS)\b": "a header layout",
}
# Hand-made field arithmetic: a position plus a field offset, or the host-kind / transaction
# bits of sysFlag by number. The codec names them, so it has none of these.
ARITHMETIC_PATTERNS = {
    r"\b(pos|at|offset|phy|start)\s*\+\s*(8|12|16|20|28|36|40|48|56|68|84|88)\b":
        "a position plus a stored field's offset",
    r"&\s*(12|48|0x30|0b110000)\b": "sysFlag bits by number (use MessageSysFlag names)",
    r"\[\s*36\s*:\s*40\s*\]": "SYSFLAG sliced by hand",
}
PROPERTIES_PARSING = {
    r"""split\(\s*b?["']\\x02["']\s*\)""": "properties split at their separator",
    r"""partition\(\s*b?["']\\x01["']\s*\)""": "a property split at its name/value separator",
    r"""find\(\s*b?["']\\x0[12]["']""": "a search for a properties separator",
    r"""b["'](TAGS|KEYS|UNIQ_KEY|DELAY)\\x01["']""": "a property looked up in raw bytes",
}


def _sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if p.is_file())


def _codec_text() -> str:
    assert len(CODEC) >= 3, CODEC
    return "\n".join(p.read_text() for p in sorted(CODEC))


def _hits(patterns: dict[str, str], skip: set[Path]) -> list[str]:
    found = []
    for path in _sources():
        if path in skip:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for pattern, what in patterns.items():
                if re.search(pattern, line):
                    found.append(f"{path.relative_to(SRC)}:{number}: {what}: {line.strip()}")
    return found


def test_the_layout_appears_only_in_the_codec() -> None:
    assert _hits(LAYOUT_PATTERNS, CODEC) == []
    codec = _codec_text()
    for pattern, what in LAYOUT_PATTERNS.items():
        assert re.search(pattern, codec), f"the codec no longer has {what}: update this test"


def test_no_field_arithmetic_by_hand() -> None:
    assert _hits(ARITHMETIC_PATTERNS, set()) == []


def test_properties_are_parsed_only_by_the_one_parser() -> None:
    assert _hits(PROPERTIES_PARSING, {PROPERTIES}) == []
    assert re.search(r"""split\(\s*["']\\x02["']\s*\)""", PROPERTIES.read_text())


def test_the_c_twin_names_the_same_offsets() -> None:
    """The C twin spells every offset by a #define named as in the stored package (no bare
    numbers in its field accesses), so a reader can match the two line by line."""
    c_source = "\n".join(p.read_text() for p in C_TWIN)
    codec = _codec_text()
    for name, value in (("QUEUEOFFSET_AT", 20), ("PHYSICALOFFSET_AT", 28), ("SYSFLAG_AT", 36),
                        ("BORNHOST_AT", 48), ("QUEUEID_AT", 12), ("BODYCRC_AT", 8)):
        assert f"#define {name} {value}" in c_source
        assert f"{name} = {value}" in codec
    assert not re.search(r"\b[mpw]\s*\+\s*(12|16|20|28|36|40|48)\b", c_source), \
        "a field access by number in the C twin"
