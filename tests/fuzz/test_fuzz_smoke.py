"""A short seeded run of the native entry points' fuzzer (scripts/sanitize-speedups.sh --fuzz,
fuzz/speedups_fuzz.c) under AddressSanitizer and UndefinedBehaviorSanitizer, inside ``make test``;
``make fuzz`` runs it for longer. Skipped, saying why, where clang or libFuzzer is missing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
FUZZ_SECONDS = 20
RUNS_MIN = 10_000  # far below what 20 s give on the slowest box seen (35k exec/s): it did run


def _clang() -> str | None:
    return os.environ.get("CLANG") or shutil.which("clang") or shutil.which("clang-14")


def test_fuzzer_finds_nothing_in_a_short_seeded_run(tmp_path: Path) -> None:
    clang = _clang()
    if clang is None:
        pytest.skip("no clang: apt-get install clang-14 libclang-rt-14-dev (scripts/system-deps.sh)")
    probe = subprocess.run([clang, "-fsanitize=fuzzer", "-x", "c", "-", "-o", str(tmp_path / "p")],
                           input="int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }",
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"clang cannot link libFuzzer here: {probe.stderr.strip()[-200:]}")
    env = {**os.environ, "PY": sys.executable, "CLANG": clang,
           "FUZZ_ARTIFACTS": str(tmp_path) + "/"}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "sanitize-speedups.sh"), "--fuzz",
                           str(FUZZ_SECONDS), "-seed=1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    found = re.search(r"fuzz: (\d+) executions in \d+ s, coverage cov: (\d+)", out)
    assert found is not None, out[-2000:]
    assert int(found.group(1)) >= RUNS_MIN and int(found.group(2)) > 300, found.group(0)
    assert not list(tmp_path.glob("crash-*")), "the fuzzer left a crashing input"
