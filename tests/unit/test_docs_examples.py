"""Python examples in docs/ that need no server run as written (store path moved to a temp dir)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_store_doc_examples_run(tmp_path):
    text = (ROOT / "docs" / "store.md").read_text()
    codec, compact, store = BLOCK.findall(text)
    assert _run(codec).splitlines() == ["a None", "message property 2 has no name/value separator"]
    # store_type compact: the queues' files are read and written, none mapped
    assert _run(compact).splitlines() == ["FOUND 1 queue files mapped: 0"]
    out = _run(store.replace("/tmp/orbit-store", str(tmp_path / "store")))
    assert out.split() == ["PutMessageStatus.PUT_OK", "GetMessageStatus.FOUND", "1", "True"]
