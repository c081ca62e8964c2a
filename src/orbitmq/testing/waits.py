"""The bounds tests wait with, named once: margins that hold on a loaded 2-core machine (other
test runs, a JVM or a compiler starting beside the servers under test).

Every wait is on a condition and ends as soon as it holds, so a long bound costs a passing test
nothing; a bound that is hit fails the test. A test that asserts a duration (a protocol's
timing, an acceptance bound) keeps its own figure: these are for "until it happens".
"""

from __future__ import annotations

__all__ = ["READY_WAIT_S", "EVENT_WAIT_S"]

# A server's start, until its ready lines: a broker takes 5-7 s beside a busy 2-core machine's
# other work, more while a JVM starts next to it.
READY_WAIT_S = 60.0
# Something a server does at once when the machine is idle (a pull held, a route or an offset
# written, a connection accepted or closed): milliseconds idle, seconds under load.
EVENT_WAIT_S = 30.0
