"""The runnable example of docs/spark.md runs as written (on the shared SparkSession)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"


def test_the_spark_doc_example_runs(spark, capsys):
    (code,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[:1]
    exec(compile(code, str(DOC), "exec"), {"__name__": "__doc_example__"})
    assert capsys.readouterr().out.split("\n")[:3] == ["100 orders", "100 copies", "100 offsets"]
