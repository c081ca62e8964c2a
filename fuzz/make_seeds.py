"""The fuzzer's seed corpus: one file per input of fuzz/speedups_fuzz.c (first byte: the entry
point), from the differential tests' request streams (tests/integration/fast_path_streams.py),
the same streams signed as the fuzzer's users (right, wrong and unknown secrets, a security
token), their batch bodies and properties, stored messages as the commit log holds them, consume
queue entries, and HMAC keys and texts.

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

from orbitmq.errors import OrbitMQError  # noqa: E402
from orbitmq.protocol.batch import encode_batch  # noqa: E402
from orbitmq.protocol.command import decode_command, encode  # noqa: E402
from orbitmq.protocol.stored import encode_stored_message  # noqa: E402
from orbitmq.security.signature import Credentials, sign_fields  # noqa: E402

TAKE, SINGLE, BATCH, SCAN, HASH, SIGNED_TAKE, AUTH_CHECK, HMAC = 0, 4, 5, 6, 7, 8, 12, 13
# The fuzzer's users (speedups_fuzz.c), and some who are not.
SIGNERS = [Credentials("root", "root-secret-1"), Credentials("alice", "alice-secret-1"),
           Credentials("bob", "bob-secret-11"), Credentials("root", "wrong-secret"),
           Credentials("ghost", "ghost-secret-1"), Credentials("alice", "alice-secret-1", "tok")]


def signed(frame: bytes, who: Credentials) -> bytes:
    """``frame`` signed by ``who`` (as it is when it does not decode)."""
    try:
        cmd = decode_command(frame[4:])
    except (OrbitMQError, ValueError):
        return frame
    sign_fields(cmd.ext_fields, cmd.body, who)
    return encode(cmd)


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
    for seed in range(2):
        frames = request_stream(20 + seed, 30).frames
        for i in range(0, len(frames), 3):
            who = SIGNERS[rng.randrange(len(SIGNERS))]
            out.append(bytes([SIGNED_TAKE]) + b"".join(signed(f, who) for f in frames[i : i + 3]))
        for i, frame in enumerate(frames[:12]):
            out.append(bytes([AUTH_CHECK]) + signed(frame, SIGNERS[i % len(SIGNERS)]))
    for key_len, text_len in ((0, 0), (6, 1000), (64, 55), (65, 64), (200, 120)):
        out.append(bytes([HMAC, key_len % 256]) + rng.randbytes(key_len + text_len))
    return out


def main() -> None:
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(seeds()):
        (target / f"seed-{i:04d}").write_bytes(data)


if __name__ == "__main__":
    main()
