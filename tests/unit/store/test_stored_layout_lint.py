"""The stored message layout is known in one place: the ``protocol/stored`` package (and its C
twin, ``protocol/_native/``: ``stored_rules.h`` names the offsets). The store's own layouts (a
consume queue entry, the IndexFile's header, slots and entries, a planned index entry) are named
once per language too: ``store/consume_queue.py`` and ``store/index_file.py`` in Python,
``store/_native/store_layout.h`` in C, and the last test holds the two to each other.

A grep over ``src/``: the layout's magic codes, header struct formats, field offset names and the
arithmetic that computes field positions by hand (``pos + 36``, ``sys_flag & 48``) appear only in
the codec; the properties text is parsed only in ``protocol/properties.py``. Each pattern is
also required to match inside the codec, so that a renamed constant cannot make this test pass
by matching nothing.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src" / "orbitmq"
CODEC = set((SRC / "protocol" / "stored").glob("*.py"))
NATIVE = SRC / "protocol" / "_native"
# The stored codec's C twin, and the C of the rooms that read stored messages through it. (Not
# stored_encode.c: its CRC lanes step a pointer by 16 and 48 bytes.)
C_TWIN = [NATIVE / "stored_rules.h", NATIVE / "stored_rules.c", NATIVE / "stored_twins.c",
          NATIVE / "stored_columns.c", *sorted((SRC / "store" / "_native").glob("*.c")),
          *sorted((SRC / "broker" / "_native").glob("*.c"))]
STORE_LAYOUT_H = SRC / "store" / "_native" / "store_layout.h"
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


def _c_defines(path: Path) -> dict[str, int]:
    return {name: int(value, 0) for name, value in
            re.findall(r"^#define (\w+) (0x[0-9A-Fa-f]+|\d+)\b", path.read_text(), re.M)}


def _offsets(fmt: struct.Struct) -> list[int]:
    """Where each field of a big-endian struct format starts."""
    codes = fmt.format.lstrip("<>!=@")
    return [struct.calcsize(">" + codes[:i]) for i in range(len(codes))]


def test_the_store_layouts_are_named_the_same_in_c_and_python() -> None:
    """store_layout.h, the one C header of the consume queue entry and the IndexFile layout, says
    what consume_queue.py and index_file.py say: sizes, and each field's offset from the struct
    formats the Python code packs with. The C code reads and writes these files by those names
    only (test_the_c_twin_names_the_same_offsets' scan covers store/_native)."""
    from orbitmq.store import consume_queue, index_file

    c = _c_defines(STORE_LAYOUT_H)
    assert c["CQ_ENTRY_SIZE"] == consume_queue.CQ_ENTRY_SIZE == consume_queue.CQ_ENTRY.size
    assert [c["CQ_PHY_AT"], c["CQ_SIZE_AT"], c["CQ_TAGS_CODE_AT"]] == _offsets(consume_queue.CQ_ENTRY)
    assert c["CQ_BLANK_SIZE"] == consume_queue.BLANK_ENTRY_SIZE_FIELD

    header = index_file._HEADER
    assert c["INDEX_HEADER_SIZE"] == index_file.HEADER_SIZE == header.size
    assert [c["INDEX_BEGIN_TS_AT"], c["INDEX_END_TS_AT"], c["INDEX_BEGIN_PHY_AT"],
            c["INDEX_END_PHY_AT"], c["INDEX_SLOT_COUNT_AT"], c["INDEX_COUNT_AT"]] == _offsets(header)
    assert c["INDEX_SLOT_SIZE"] == index_file.HASH_SLOT_SIZE == index_file._SLOT.size
    entry = index_file._ENTRY
    assert c["INDEX_ENTRY_SIZE"] == index_file.INDEX_ENTRY_SIZE == entry.size
    assert [c["INDEX_ENTRY_HASH_AT"], c["INDEX_ENTRY_PHY_AT"], c["INDEX_ENTRY_TIME_DIFF_AT"],
            c["INDEX_ENTRY_PREV_AT"]] == _offsets(entry)
    planned = index_file.PLANNED_ENTRY
    assert c["PLANNED_ENTRY_SIZE"] == planned.size
    assert [c["PLANNED_HASH_AT"], c["PLANNED_PHY_AT"], c["PLANNED_STORE_TS_AT"]] == _offsets(planned)


def test_the_store_c_writes_its_files_by_name_only() -> None:
    """No bare offset into a queue entry, an index header, slot or entry in store/_native: every
    one is a store_layout.h name (a put_/get_ at a pointer plus a number is one by hand)."""
    for path in sorted((SRC / "store" / "_native").glob("*.c")):
        text = path.read_text()
        assert not re.search(r"\b(put|get)_i(16|32|64)\([^;]*\+\s*\d+\s*[,)]", text), path
        assert not re.search(r"\b(put|get)_i(16|32|64)\(\s*[a-z_]+\s*[,)]", text), \
            f"{path.name}: a field at offset 0 without its name"
