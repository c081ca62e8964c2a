"""CPU cost of each step of the broker's send path, one at a time (``time.process_time``).

    .venv/bin/python bench/components_bench.py [--n N]

The steps a SEND_MESSAGE_V2 of mqload goes through, in order: frame decoding (JSON header),
SendMessageRequestHeader parsing, properties parsing, store encoding, the CommitLog append, the
offset message id, the response and its header encoding. Figures are microseconds of CPU per
message, for bench/journal/PROFILE.md. Not a test.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable

from hotpath_bench import send_frame

from orbitmq.config import StoreConfig
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import SerializeType, encode_header
from orbitmq.protocol.frame import FrameDecoder
from orbitmq.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeader
from orbitmq.protocol.properties import parse_properties
from orbitmq.store import MessageInner, MessageStore
from orbitmq.store.commit_log import encode_messages


def per_call(fn: Callable[[], object], n: int, repeat: int = 5) -> float:
    """CPU microseconds per call, the best of ``repeat`` rounds (the machine is shared)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t0) / n * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    n = ap.parse_args().n
    frames = b"".join(send_frame(i, "comp", i % 8, SerializeType.JSON) for i in range(48))
    dec = FrameDecoder()
    cmds = dec.feed(frames)
    cmd = cmds[0]
    h = SendMessageRequestHeader.from_any_ext_fields(cmd.ext_fields)
    pull_fields = {"consumerGroup": "g", "topic": "t", "queueId": "1", "queueOffset": "64",
                   "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0",
                   "suspendTimeoutMillis": "1000", "subscription": "*", "subVersion": "0",
                   "expressionType": "TAG"}
    props = parse_properties(h.properties)
    msg = MessageInner("comp", 1, bytes(cmd.body), props, 0, 0, h.born_timestamp,
                       ("127.0.0.1", 40000), ("127.0.0.1", 10911))
    base = tempfile.mkdtemp(prefix="orbitmq-comp-")
    store = MessageStore(StoreConfig(store_path=base, mapped_file_size_commitlog=256 << 20,
                                     message_index_enable=False), run_threads=False)
    store.start()
    try:
        fields = {"msgId": "0" * 32, "queueId": "1", "queueOffset": "12345"}
        appended = store.put([msg]).append
        assert appended is not None
        rows = [
            ("frame decode (JSON header), per frame", per_call(lambda: dec.feed(frames), n // 48) / 48),
            ("SendMessageRequestHeader.from_any_ext_fields",
             per_call(lambda: SendMessageRequestHeader.from_any_ext_fields(cmd.ext_fields), n)),
            ("PullMessageRequestHeader.from_ext_fields",
             per_call(lambda: PullMessageRequestHeader.from_ext_fields(pull_fields), n)),
            ("parse_properties", per_call(lambda: parse_properties(h.properties), n)),
            ("store encode_messages (1 msg)",
             per_call(lambda: encode_messages([msg], 4 << 20, 1 << 30), n)),
            ("CommitLog.append (1 msg)", _append_cost(store, msg, n)),
            ("AppendMessageResult.msg_ids", per_call(lambda: _fresh_ids(appended), n)),
            ("response + encode_header", per_call(
                lambda: encode_header(cmd.response(ResponseCode.SUCCESS, None, fields)), n)),
        ]
    finally:
        store.shutdown()
        shutil.rmtree(base, ignore_errors=True)
    for name, us in rows:
        print(f"{name:<48} {us:7.2f} us")


def _append_cost(store: MessageStore, msg: MessageInner, n: int) -> float:
    encoded = [encode_messages([msg], 4 << 20, 1 << 30) for _ in range(n * 5)]
    it = iter(encoded)
    append = store.commit_log.append
    return per_call(lambda: append(next(it)), n)  # type: ignore[arg-type]


def _fresh_ids(appended: object) -> list[str]:
    appended._msg_ids = None  # type: ignore[attr-defined]
    return appended.msg_ids  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
