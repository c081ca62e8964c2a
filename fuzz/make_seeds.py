"""The fuzzer's seed corpus: one file per input of fuzz/speedups_fuzz.c (first byte: the entry
point), from the differential tests' request streams (tests/integration/fast_path_streams.py),
their batch bodies and properties, stored messages as the commit log holds them, and consume
queue entries.

    python fuzz/make_seeds.py DIR
"""

from __future__ import annotations

import random
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from fast_path_streams import request_stream  # noqa: E402

from orbitmq.protocol.batch import encode_batch  # noqa: E402
from orbitmq.protocol.stored import encode_stored_message  # noqa: E402

TAKE, SINGLE, BATCH, SCAN, HASH = 0, 4, 5, 6, 7


def seeds() -> list[bytes]:
    out: list[bytes] = []
    rng = random.Random(1)
    for seed in range(4):
        frames = request_stream(seed, 60).frames
        for i in range(0, len(frames), 3):
            out.append(bytes([TAKE]) + b"".join(frames[i : i + rng.randint(1, 4)]))
    for frame in request_stream(9, 40).frames:  # a frame cut short, as a socket may
        out.append(bytes([TAKE]) + frame[: rng.randrange(1, len(frame))])
    props = "UNIQ_KEY\x01ABC\x02TAGS\x01t\x02KEYS\x01k1 k2\x02WAIT\x01true\x02"
    out += [bytes([SINGLE]) + props.encode(), bytes([SINGLE]) + b"DELAY\x013\x02",
            bytes([SINGLE]) + b"a\x01b\x01c", bytes([SINGLE]) + b"\xff\xfe"]
    out.append(bytes([BATCH]) + encode_batch([(0, b"x" * 40, {"UNIQ_KEY": "1"}),
                                              (3, b"", {"TAGS": "t", "DELAY": "2"})]))
    log = b"".join(encode_stored_message(topic="FastPlain", body=b"b" * n, queue_offset=i,
                                         properties={"TAGS": "t", "KEYS": "a b", "UNIQ_KEY": "u"})
                   for i, n in enumerate((0, 10, 300)))
    out.append(bytes([SCAN]) + log + struct.pack(">ii", 64, -875286124))
    entries = [(0, 100), (100, 50), (150, 7), (900, 10), (0, 0x7FFFFFFF), (910, 5), (2**63 - 2, 9)]
    out.append(bytes([SCAN]) + b"".join(struct.pack(">qiq", phy, size, 1) for phy, size in entries))
    out.append(bytes([HASH]) + "topic#kéy\U0001f600".encode())
    return out


def main() -> None:
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(seeds()):
        (target / f"seed-{i:04d}").write_bytes(data)


if __name__ == "__main__":
    main()
