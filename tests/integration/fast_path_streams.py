"""Random request streams for the native fast path's differential tests (and its fuzz seeds).

``request_stream(seed)`` gives the frames a connection sends, seeded: mostly the sends the fast
path takes (V2 names, JSON or binary headers, single and batch, inert properties), mixed with
everything it must decline and leave to the Python path, with pulls (whose headers the broker's
fast reader reads in C, the rest of them the Python path's), and with requests that are answered
later (reads that wait for the dispatch, sends that create their topic), so that the order of
the answers is tested too. Every frame is well formed at the frame level (a malformed frame
closes the connection, which would end the comparison early); inside, anything goes.
"""

from __future__ import annotations

import dataclasses
import json
import random
import struct

from orbitmq.protocol.batch import encode_batch
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.command import RemotingCommand, SerializeType, encode

PLAIN_TOPIC = "FastPlain"  # created before the stream: 4 queues
READ_ONLY_TOPIC = "FastReadOnly"  # created before the stream: perm READ only
QUEUES = 4
MAX_MESSAGE_SIZE = 6000  # the brokers' max_message_size in these tests
BORN_MS = 1_767_000_000_000  # born timestamps (streams are reproducible)


@dataclasses.dataclass
class Stream:
    frames: list[bytes]
    answered: int  # requests that get an answer (not oneway)
    # Requests whose answer depends on timing (a queue's offsets: how many of the sends read
    # with it were dispatched before it was answered); their answers are not compared.
    volatile: set[int] = dataclasses.field(default_factory=set)
    # Pulls: answered when they are ready (long polling, the dispatch), not in request order.
    unordered: set[int] = dataclasses.field(default_factory=set)


def _props(rng: random.Random, opaque: int) -> str:
    """A send's properties text: usually inert ones, sometimes what the fast path declines."""
    props = {"UNIQ_KEY": f"7F0000010000{opaque:020X}"}
    if rng.random() < 0.3:
        props["TAGS"] = rng.choice(["a", "tag-b", "TagC", "x y"])
    if rng.random() < 0.3:
        props["KEYS"] = " ".join(f"k{rng.randrange(50)}" for _ in range(rng.randint(1, 3)))
    if rng.random() < 0.5:
        props["WAIT"] = rng.choice(["true", "false"])
    if rng.random() < 0.1:
        props["MSG_REGION"] = "DefaultRegion"
    roll = rng.random()
    if roll < 0.05:
        props["DELAY"] = "18"  # 2 h: parked, never delivered during a test
    elif roll < 0.08:
        props["TRAN_MSG"] = "true"
        props["PGROUP"] = "fast-producer"
    elif roll < 0.13:
        props["user-prop"] = "v"
    elif roll < 0.15:
        props["TIMER_DELIVER_MS"] = str(BORN_MS + 3_600_000)
    text = "".join(f"{k}\x01{v}\x02" for k, v in props.items())
    mangle = rng.random()
    if mangle < 0.05:
        text = text[:-1]  # no final separator: the writer adds it
    elif mangle < 0.08:
        text += "bad-item\x02"  # no name/value separator: refused
    elif mangle < 0.10:
        text += "UNIQ_KEY\x01again\x02"  # a repeated name: refused
    elif mangle < 0.12:
        text = ""
    return text


def _send_fields(rng: random.Random, topic: str, props: str, *, batch: bool) -> dict[str, str]:
    qid = rng.randrange(QUEUES) if rng.random() < 0.93 else rng.choice([-1, QUEUES, 99])
    fields = {"a": "fast-producer", "b": topic, "c": "TBW102", "d": str(QUEUES), "e": str(qid),
              "f": rng.choice(["0"] * 12 + ["1", "2", "4", "8"]),
              "g": str(BORN_MS + rng.randrange(1000)), "h": str(rng.choice([0, 0, 0, 7, -3])),
              "i": props, "j": rng.choice(["0", "0", "", "2"]), "k": "false",
              "m": "true" if batch else rng.choice(["false", "false", "0", ""])}
    if rng.random() < 0.05:
        fields["e"] = rng.choice([" 1", "+1", "1.0", ""])  # the Python decoders decide
    if rng.random() < 0.05:
        del fields["k"]
        fields["l"] = rng.choice(["16", "-1"])
    return fields


def _topic(rng: random.Random, created: list[str]) -> str:
    roll = rng.random()
    if roll < 0.8:
        return PLAIN_TOPIC
    if roll < 0.85:
        return READ_ONLY_TOPIC
    if roll < 0.9:
        return rng.choice(["TBW102", "%RETRY%fast-group", "SCHEDULE_TOPIC_XXXX"])
    if roll < 0.95 and created:
        return rng.choice(created)
    name = f"FastNew{len(created)}"
    created.append(name)
    return name  # auto-created by this send (through TBW102)


def _body(rng: random.Random) -> bytes:
    size = rng.choice([0, 1, 100, 1024, 1024, 3000, MAX_MESSAGE_SIZE + 1]) if rng.random() < 0.97 \
        else rng.randint(0, 4096)
    return rng.randbytes(size)


def _batch_body(rng: random.Random, opaque: int) -> bytes:
    entries = []
    for i in range(rng.randint(1, 8)):
        props = {"UNIQ_KEY": f"7F00000100{opaque:016X}{i:06X}"}
        roll = rng.random()
        if roll < 0.05:
            props["DELAY"] = "18"
        elif roll < 0.1:
            props["user"] = "x"
        elif roll < 0.3:
            props["TAGS"] = "t"
        entries.append((rng.choice([0, 5]), rng.randbytes(rng.choice([0, 10, 700, 2000])), props))
    body = encode_batch(entries)
    if rng.random() < 0.05:
        body = body[: rng.randrange(len(body))]  # a torn batch: refused by the Python path
    return body


def _json_frame(fields: dict[str, str], code: int, opaque: int, body: bytes, flag: int,
                rng: random.Random) -> bytes:
    """A JSON header written by hand: the shapes real clients send, and stranger ones."""
    header: dict[str, object] = {"code": code, "extFields": fields, "flag": flag,
                                 "language": rng.choice(["JAVA", "CPP", "GO", "WHATEVER"]),
                                 "opaque": opaque, "serializeTypeCurrentRPC": "JSON",
                                 "version": rng.choice([399, 0, -1, 2**31 - 1])}
    roll = rng.random()
    if roll < 0.05:
        header["remark"] = "hello"
    elif roll < 0.08:
        key = "e" if "e" in fields else "queueId"  # a send's queue id, or a pull's
        value = fields.get(key, "0")
        header["extFields"] = {**fields, key: int(value) if value.lstrip("-").isdigit()
                               else value}  # a number: the C++ client's habit
    elif roll < 0.1:
        header["nested"] = {"a": [1, 2, {"b": None}], "c": True}
    text = json.dumps(header, ensure_ascii=rng.random() < 0.5, separators=(",", ":"))
    if rng.random() < 0.05:
        text = text.replace(":", " : ").replace(",", ",\n")
    raw = text.encode()
    return struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body


def _send_frame(rng: random.Random, opaque: int, created: list[str]) -> tuple[bytes, bool]:
    batch = rng.random() < 0.2
    topic = _topic(rng, created)
    fields = _send_fields(rng, topic, "" if batch else _props(rng, opaque), batch=batch)
    body = _batch_body(rng, opaque) if batch else _body(rng)
    code = (RequestCode.SEND_BATCH_MESSAGE if batch and rng.random() < 0.8
            else rng.choice([RequestCode.SEND_MESSAGE_V2] * 4 + [RequestCode.SEND_MESSAGE]))
    oneway = rng.random() < 0.05
    flag = 2 if oneway else 0
    if rng.random() < 0.02:
        fields = {"producerGroup": "p", "topic": topic, "defaultTopic": "TBW102",
                  "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0",
                  "bornTimestamp": "1", "flag": "0", "properties": fields["i"]}  # V1 names
    roll = rng.random()
    if roll < 0.6:
        cmd = RemotingCommand(code=int(code), opaque=opaque, flag=flag, ext_fields=fields,
                              body=body, version=rng.choice([399, 0]))
        return encode(cmd), not oneway
    if roll < 0.8:
        cmd = RemotingCommand(code=int(code), opaque=opaque, flag=flag, ext_fields=fields,
                              body=body, version=rng.choice([399, -5]),
                              serialize_type=SerializeType.ROCKETMQ)
        return encode(cmd), not oneway
    return _json_frame(fields, int(code), opaque, body, flag, rng), not oneway


_VOLATILE = (RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET)


def _pull_fields(rng: random.Random, topic: str) -> dict[str, str]:
    """A pull's header: mostly what consumers send, sometimes values the C reader declines
    (the Python decoder decides) or that the handler refuses."""
    def pick(good: list[str], odd: list[str]) -> str:
        return rng.choice(odd if rng.random() < 0.04 else good)

    fields = {"consumerGroup": "fast-group", "topic": topic,
              "queueId": pick(["0", "1"], ["-1", "99", " 1", "+1", "1.0", ""]),
              "queueOffset": pick(["0", "0", "3", "-2", "007"], ["9223372036854775807", "1e3"]),
              "maxMsgNums": pick(["32", "1"], ["0", "-1", "2147483648"]),
              "sysFlag": pick(["0", "1", "4", "5", "3"], ["32", "-1"]),
              "commitOffset": pick(["-1", "0"], ["-2", ""]),
              "suspendTimeoutMillis": pick(["0", "20"], ["-1", "x"])}
    if rng.random() < 0.4:
        fields["subscription"] = rng.choice(["*", "", "a || tag-b", "a ||", "x > 1"])
        fields["expressionType"] = rng.choice(["TAG", "", "SQL92", "tag"])
    if rng.random() < 0.3:
        fields["subVersion"] = rng.choice(["1767000000000", "", "x"])
    if rng.random() < 0.2:
        fields["maxMsgBytes"] = rng.choice(["65536", "", "0"])
    if rng.random() < 0.2:
        fields["bname"] = "broker-a"  # a name only some clients send: ignored
    if rng.random() < 0.04:
        del fields[rng.choice(list(fields))]
    return fields


def _pull_frame(rng: random.Random, opaque: int) -> tuple[bytes, bool]:
    """A pull (the broker's fast reader reads its header in C, the handler is the Python
    path's): of the read-only topic, never written, its answers do not depend on timing; of
    the plain topic, on how far the dispatch got."""
    topic = READ_ONLY_TOPIC if rng.random() < 0.6 else PLAIN_TOPIC
    fields = _pull_fields(rng, topic)
    code, flag = int(RequestCode.PULL_MESSAGE), 0
    roll = rng.random()
    if roll < 0.6:
        frame = encode(RemotingCommand(code=code, opaque=opaque, flag=flag, ext_fields=fields,
                                       version=rng.choice([399, 0])))
    elif roll < 0.8:
        frame = encode(RemotingCommand(code=code, opaque=opaque, flag=flag, ext_fields=fields,
                                       version=399, serialize_type=SerializeType.ROCKETMQ))
    else:
        frame = _json_frame(fields, code, opaque, b"", flag, rng)
    return frame, topic == PLAIN_TOPIC


def _other_frame(rng: random.Random, opaque: int) -> tuple[bytes, bool]:
    """A request the fast path never takes; some are answered only after the dispatch."""
    roll = rng.random()
    if roll < 0.4:
        fields = {"topic": PLAIN_TOPIC, "queueId": str(rng.randrange(QUEUES))}
        code = RequestCode.GET_MAX_OFFSET  # waits for the dispatch (read-your-writes)
    elif roll < 0.6:
        fields = {"topic": PLAIN_TOPIC, "queueId": str(rng.randrange(QUEUES))}
        code = RequestCode.GET_MIN_OFFSET
    elif roll < 0.8:
        fields = {"consumerGroup": "fast-group", "topic": PLAIN_TOPIC, "queueId": "0"}
        code = RequestCode.QUERY_CONSUMER_OFFSET
    else:
        fields = {}
        code = 9999  # not supported
    frame = encode(RemotingCommand(code=int(code), opaque=opaque, ext_fields=fields))
    return frame, code in _VOLATILE


def request_stream(seed: int, count: int = 300) -> Stream:
    """``count`` requests of one connection, seeded (module docstring)."""
    rng = random.Random(seed)
    frames: list[bytes] = []
    answered = 0
    created: list[str] = []
    volatile: set[int] = set()
    unordered: set[int] = set()
    for i in range(count):
        opaque = 1000 + i
        roll = rng.random()
        if roll < 0.9:
            frame, answers = _send_frame(rng, opaque, created)
        else:
            (frame, timed), answers = (_pull_frame if roll < 0.93 else _other_frame)(rng, opaque), True
            if timed:
                volatile.add(opaque)
            if roll < 0.93:
                unordered.add(opaque)
        frames.append(frame)
        answered += answers
    return Stream(frames, answered, volatile, unordered)


def chunks(data: bytes, rng: random.Random) -> list[bytes]:
    """``data`` cut where a socket might cut it: single bytes, whole runs of frames."""
    out, pos = [], 0
    while pos < len(data):
        size = rng.choice([1, 7, 100, 1500, 16384, 65536, 200_000])
        out.append(data[pos : pos + size])
        pos += size
    return out
