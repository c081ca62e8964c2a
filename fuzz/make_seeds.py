"""The fuzzer's seed corpus: one file per input of fuzz/speedups_fuzz.c (first byte: the entry
point), from the differential tests' request streams (tests/integration/fast_path_streams.py),
the same streams signed as the fuzzer's users (right, wrong and unknown secrets, a security
token), their batch bodies and properties, stored messages as the commit log holds them, consume
queue entries, HMAC keys and texts, commit log ranges with index files (dispatch_plan,
index_put), pull bodies and column sets (stored_columns, encode_batch_columns).

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
from orbitmq.protocol.message import MessageSysFlag  # noqa: E402
from orbitmq.protocol.stored import encode_stored_message  # noqa: E402
from orbitmq.security.signature import Credentials, sign_fields  # noqa: E402

TAKE, SINGLE, BATCH, SCAN, HASH, SIGNED_TAKE, AUTH_CHECK, HMAC, STORE, COLUMNS = (
    0, 4, 5, 6, 7, 8, 12, 13, 14, 15)
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
    out += store_seeds(rng) + column_seeds(rng)
    return out


def two_parts(selector: int, flags: int, first: bytes, rest: bytes) -> bytes:
    """fuzz/fuzz_twins.py's input: flags, a u16 length, the first part, the rest."""
    return bytes([selector, flags]) + struct.pack(">H", len(first)) + first + rest


def commit_log(rng: random.Random, count: int) -> bytes:
    """Stored messages as dispatch reads them: topics, queues, tags, KEYS (ASCII and Unicode
    spaces), UNIQ_KEY, delay and timer topics, a transaction half."""
    log = b""
    for i in range(count):
        topic = rng.choice(["Orders", "Pay", "Ördér", "SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"])
        props = {"TAGS": rng.choice(["a", "b", "ü"]), "UNIQ_KEY": f"U{i}",
                 "KEYS": rng.choice(["k1 k2", "kéy", "a\u3000b", "x\x1cy", "dup dup", " "])}
        sys_flag = MessageSysFlag.TRANSACTION_PREPARED_TYPE if i % 7 == 6 else 0
        log += encode_stored_message(topic=topic, body=b"m" * (i % 5), queue_id=i % 3,
                                     queue_offset=i // 3, properties=props, sys_flag=sys_flag,
                                     store_timestamp=1767000000000 + i * 1500,
                                     physical_offset=i * 200)
    return log


def index_file(rng: random.Random, slots: int, index_num: int, count: int) -> bytes:
    """An index file's bytes after ``count - 1`` entries (fuzz_twins' geometry bytes first),
    then more planned entries."""
    size = 40 + 4 * slots + 20 * index_num
    mm = bytearray(size)
    struct.pack_into(">qqqqii", mm, 0, 1767000000000, 1767000009000, 0, 100 * (count - 1),
                     min(count - 1, slots), count)
    for n in range(1, count):
        struct.pack_into(">i", mm, 40 + 4 * (n % slots), n)
    planned = b"".join(struct.pack(">iqq", rng.randrange(1 << 31), 100 * (count + i),
                                   1767000010000 + i) for i in range(4))
    return bytes([(slots - 1) % 16, (index_num - 2) % 24]) + bytes(mm) + planned


def store_seeds(rng: random.Random) -> list[bytes]:
    out = []
    for count, slots, index_num, used in ((6, 4, 10, 1), (12, 8, 24, 3), (30, 1, 2, 1),
                                          (3, 16, 25, 25)):
        out.append(two_parts(STORE, rng.randrange(256), commit_log(rng, count),
                             index_file(rng, slots, index_num, used)))
    return out


def column_seeds(rng: random.Random) -> list[bytes]:
    """Pull bodies (fuzz_twins' flags pick the columns and the end offset), and column sets:
    fuzz_twins' head, Arrow offsets, then the values' bytes."""
    out = []
    for count, flags in ((3, 0x3F), (8, 0xFF), (1, 0x21)):
        body = commit_log(rng, count)
        values = b"body-1\x05body-2\x05\x03key\x03tag=v\x03\x04\x03" + rng.randbytes(8)
        for mode in (0x00, 0x03, 0x02, 0xFF, 0x6A, 0xA3, 0xE7):
            rows, first = 1 + count % 3, count % 2
            ends = [0] * first + [0, 6, 13, len(values)][: rows + 1]
            head = bytes([rows - 1, mode, first, 0, 7, 16, 40, 0xFF, 0xFF, count])
            column_set = head + struct.pack(f"={len(ends)}i", *ends) + values
            out.append(two_parts(COLUMNS, flags, body, column_set))
    return out


def main() -> None:
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(seeds()):
        (target / f"seed-{i:04d}").write_bytes(data)


if __name__ == "__main__":
    main()
