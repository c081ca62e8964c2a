"""Python examples in docs/ that need no server run as written (store path moved to a temp dir)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def test_store_doc_example_runs(tmp_path):
    text = (ROOT / "docs" / "store.md").read_text()
    (code,) = BLOCK.findall(text)
    code = code.replace("/tmp/orbit-store", str(tmp_path / "store"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["PutMessageStatus.PUT_OK", "GetMessageStatus.FOUND", "1"]
