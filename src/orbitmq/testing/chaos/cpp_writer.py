"""A chaos writer through the official RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4, the wheel
that bundles librocketmq; ``.venv-compat``, made by scripts/compat-venv.sh).

Run under that venv's Python, never OrbitMQ's: it imports only the stdlib and the wrapper. The
spec comes as JSON on stdin (``address``: the name server, ``topic``, ``writer``, ``group``, ``sends_max``,
``pause_s``, ``stop_file``, ``send_timeout_ms``, ``deadline_s``); each send prints one JSON line
``{"c": counter, "s": status}`` or ``{"c": counter, "e": error class, "m": text}``, and the
writer stops when ``stop_file`` exists, after ``sends_max`` sends, or at ``deadline_s`` (then a
watchdog dumps the threads and exits: a hang in C code cannot outlive the run). The harness
(workload.ClientWriter) turns the lines into the history. Values are ``writer-counter``, as the
SDK writers' (checker.value_of), in the body and the key.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import time
from typing import Any


def main() -> None:
    spec = json.loads(sys.stdin.read())
    faulthandler.dump_traceback_later(float(spec["deadline_s"]), exit=True)
    import rocketmq.client as rmq

    producer: Any = rmq.Producer(spec["group"])
    producer.set_namesrv_addr(spec["address"])
    producer.set_timeout(int(spec["send_timeout_ms"]))  # its retries cannot be set: 2, inside
    producer.start()
    pause_s = float(spec["pause_s"])
    for counter in range(int(spec["sends_max"])):
        if os.path.exists(spec["stop_file"]):
            break
        value = f"{spec['writer']}-{counter}"
        msg = rmq.Message(spec["topic"])
        msg.set_keys(value)
        msg.set_body(value.encode())
        try:
            result = producer.send_sync(msg)
            line: dict[str, Any] = {"c": counter, "s": result.status.name}
        except Exception as e:  # noqa: BLE001 - every outcome is a line of the history
            line = {"c": counter, "e": type(e).__name__, "m": str(e)[:200]}
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        time.sleep(pause_s if "s" in line else 10 * pause_s)
    sys.stdout.flush()
    # The wrapper's __del__ would shut the client down again at teardown: skip it.
    os._exit(0)


if __name__ == "__main__":
    main()
