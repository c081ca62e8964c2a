"""examples/points (user registration -> welcome points) runs as README shows, on both databases."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_points_example(db_url):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "points" / "demo.py"),
                          "--db", db_url], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "registered 3 new users; a second 'ann' rolled back: True"
    assert lines[1].startswith("relay sent 3 messages")
    assert lines[-1] == "every user credited exactly once"


def test_points_example_on_a_private_postgres(pg_server):  # pg_server: skip/fail as the others
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "points" / "demo.py"),
                          "--private-postgres"], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1] == "every user credited exactly once"
