"""A chaos writer through the official RocketMQ 5 Python client (PyPI ``rocketmq-python-client``
in ``.venv-rmq5``, made by scripts/rmq5-venv.sh) over OrbitMQ's gRPC endpoint.

Run under that venv's Python, never OrbitMQ's: it imports only the stdlib and the client. The
spec comes as JSON on stdin (``address``: the gRPC endpoint, ``topic``, ``writer``,
``sends_max``, ``pause_s``, ``stop_file``, ``send_timeout_ms``, ``deadline_s``); each send
prints one JSON line ``{"c": counter, "s": "OK"}`` or ``{"c": counter, "e": error class, "m":
text}``, as cpp_writer.py does, and it stops the same ways. Values are ``writer-counter`` in the
body and the key.
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
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    config = ClientConfiguration(spec["address"], Credentials("", ""),
                                 request_timeout=max(1, int(spec["send_timeout_ms"]) // 1000))
    producer: Any = Producer(config, (spec["topic"],))
    producer.startup()
    pause_s = float(spec["pause_s"])
    for counter in range(int(spec["sends_max"])):
        if os.path.exists(spec["stop_file"]):
            break
        value = f"{spec['writer']}-{counter}"
        msg = Message()
        msg.topic = spec["topic"]
        msg.body = value.encode()
        msg.keys = value
        try:
            producer.send(msg)
            line: dict[str, Any] = {"c": counter, "s": "OK"}
        except Exception as e:  # noqa: BLE001 - every outcome is a line of the history
            line = {"c": counter, "e": type(e).__name__, "m": str(e)[:200]}
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        time.sleep(pause_s if "s" in line else 10 * pause_s)
    sys.stdout.flush()
    os._exit(0)  # the client's threads would hold the interpreter's exit


if __name__ == "__main__":
    main()
