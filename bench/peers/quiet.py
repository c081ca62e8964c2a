"""quiet.py MAX_S BUSY_PCT: waits, at most MAX_S seconds, until the machine's CPUs are busy less
than BUSY_PCT percent over a 3 s window (no foreign load), so that a run is not measured beside
someone else's; prints what it saw. bench/run_bench.py runs it before each run (not in --quick)."""

import sys
import time

WINDOW_S = 3.0


def _snapshot() -> tuple[int, int]:
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return sum(values), values[3] + values[4]  # all, idle + iowait


def main() -> None:
    max_s = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    busy_pct_max = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    began = time.monotonic()
    while True:
        total0, idle0 = _snapshot()
        time.sleep(WINDOW_S)
        total1, idle1 = _snapshot()
        busy = 100.0 * (1 - (idle1 - idle0) / max(1, total1 - total0))
        if busy < busy_pct_max or time.monotonic() - began > max_s:
            print(f"quiet: {busy:.1f}% busy after {time.monotonic() - began:.0f} s", flush=True)
            return


if __name__ == "__main__":
    main()
