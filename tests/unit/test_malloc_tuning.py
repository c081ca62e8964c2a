"""Server processes keep megabyte buffers in the heap (malloc_tuning.py): requests
that each allocate and free a few such buffers fault no pages in once the process runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")

ROUNDS = textwrap.dedent("""
    import resource, sys
    from orbitmq.malloc_tuning import tune_malloc
    tuned = tune_malloc() if sys.argv[1] == "tuned" else None
    def requests(n):  # as a transaction batch: frame, body, stored form, half message
        for _ in range(n):
            frame = bytearray(3 << 20)
            body = bytes(frame)
            stored = bytearray(4 << 20)
            half = bytes(stored) + body
            del frame, body, stored, half
    requests(2)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    requests(50)
    print(tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(mode: str, **env: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", ROUNDS, mode], capture_output=True, text=True,
                         check=True, env={**os.environ, **env}, timeout=60).stdout.split()
    return out[0], int(out[1])


def test_tuned_thresholds_stop_the_page_faults_of_big_buffers() -> None:
    took, tuned = _faults("tuned")
    if took != "True":
        pytest.skip("this libc has no glibc mallopt")
    _, plain = _faults("plain")
    pages_per_round = (3 + 3 + 4 + 4 + 7 << 20) // 4096
    assert plain > 10 * pages_per_round, "the untuned process should fault its buffers in anew"
    assert tuned < pages_per_round, f"{tuned} page faults over 50 rounds"


def test_the_operators_own_malloc_settings_are_left_alone() -> None:
    took, _ = _faults("tuned", MALLOC_TRIM_THRESHOLD_="1048576")
    assert took == "False"
