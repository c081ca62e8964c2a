"""The Python examples of docs/reliable.md run as written (name server address pointed at an
embedded cluster, files in a temporary directory)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def test_reliable_doc_examples_run(tmp_path, cluster):
    producer, consumer = BLOCK.findall((ROOT / "docs" / "reliable.md").read_text())
    outputs = []
    for code in (producer, consumer):
        out = subprocess.run([sys.executable, "-c", code.replace("127.0.0.1:9876", cluster.namesrv)],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        outputs.append(out.stdout.strip())
    assert "<OutboxStatus.SENT: 1>: 1" in outputs[0]
    assert outputs[1] == "[('order-17', 'DONE')]"
