"""The server commands freeze what starting made (cli/serving.py ``serve``): the collector's full
collections then scan only what serving makes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SERVE = textwrap.dedent("""
    import asyncio, gc, os, signal
    from orbitmq.cli.serving import serve

    class Started:  # stands in for a server: what it made while starting
        async def start(self):
            self.tables = [{"topic": str(i)} for i in range(1000)]
            print("at start", gc.get_freeze_count())

        async def stop(self):
            print("serving", gc.get_freeze_count())

    class StopAtOnce:
        async def start(self):
            asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGTERM)

        async def stop(self):
            pass

    asyncio.run(serve(Started(), StopAtOnce()))
""")


def test_what_starting_made_is_frozen_before_serving() -> None:
    out = subprocess.run([sys.executable, "-c", SERVE], capture_output=True, text=True,
                         check=True, timeout=60).stdout.splitlines()
    assert out[0] == "at start 0", out
    assert out[1].startswith("serving ") and int(out[1].split()[1]) > 1000, out
