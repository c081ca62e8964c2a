"""Capture golden request frames from the official RocketMQ C++ client (PyPI `rocketmq` 0.4.4).

Run by hand, never by the test suite (it needs the compat venv; a run takes a few seconds):

    bash scripts/compat-venv.sh                 # or `make install`; prepares .venv-compat
    python3 tests/data/capture_golden.py        # any Python >= 3.11, stdlib only

What it does: it starts a recording TCP server on 127.0.0.1 that plays a minimal name server *and*
broker at once (hand-built JSON frames, nothing from orbitmq), then runs this same file under
.venv-compat's Python with `--drive PORT` so the C++ client (librocketmq, loaded through ctypes)
talks to it: Producer.send_sync to a topic the name server does not know (so the client falls back
to the TBW102 route), send_orderly with the wrapper's hashing selector, send_batch, send_oneway,
then a PullConsumer pulling a topic with and without a tag expression, and last a short-lived
PushConsumer (which is what sends a consumer heartbeat, asks the consumer list and the committed
offset, long-polls with the suspend flag and commits its offset on shutdown).

The first request frame of each kind is written raw (the whole frame, 4-byte length included) to
tests/data/cpp_<kind>.bin, and tests/data/golden.json describes what each one must decode to; those
files are what tests/unit/protocol/test_golden_frames.py checks. Old cpp_*.bin files are removed first, so the
directory always matches golden.json. The client's own log (HOME is a temp dir for the driver) is
kept when `--keep-log` is given (its path is printed), for reading the client's view of the exchange.
"""

from __future__ import annotations

import faulthandler
import json
import os
import shutil
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent
REPO = DATA_DIR.parent.parent
COMPAT_PYTHON = REPO / ".venv-compat" / "bin" / "python"
DRIVER_TIMEOUT_S = 120.0
SOCKET_TIMEOUT_S = 60.0  # the recorder gives up on a connection silent for this long

PRODUCER_GROUP = "GoldenProducerGroup"
CONSUMER_GROUP = "GoldenPullGroup"
NEW_TOPIC = "GoldenNewTopic"  # unknown to the name server: exercises the TBW102 fallback
ORDER_TOPIC = "GoldenOrderTopic"
BATCH_TOPIC = "GoldenBatchTopic"
ONEWAY_TOPIC = "GoldenOnewayTopic"
PULL_TOPIC = "GoldenPullTopic"
PUSH_GROUP = "GoldenPushGroup"
PUSH_TOPIC = "GoldenPushTopic"
TAG_EXPRESSION = "TagA || TagB"
ORDER_SHARDING_KEY = 7  # hashing_queue_selector: 7 % 4 queues -> queue 3
BROKER_NAME = "golden-broker"
QUEUE_NUMS = 4

SEND_KINDS = {NEW_TOPIC: "send_sync", ORDER_TOPIC: "send_orderly", BATCH_TOPIC: "send_batch",
              ONEWAY_TOPIC: "send_oneway"}
# extFields whose value changes from run to run (or carries a pid): the golden file lists them as
# present but does not pin their value.
VOLATILE_FIELDS = {"bornTimestamp", "properties", "clientID", "subVersion", "Signature"}
INT_FIELDS = {"queueId", "sysFlag", "flag", "defaultTopicQueueNums", "reconsumeTimes",
              "maxReconsumeTimes", "queueOffset", "maxMsgNums", "commitOffset",
              "suspendTimeoutMillis", "subVersion", "bornTimestamp", "commitOrRollback"}
BOOL_FIELDS = {"unitMode", "batch"}
HEADER_CLASSES = {10: "SendMessageRequestHeader", 11: "PullMessageRequestHeader",
                  14: "QueryConsumerOffsetRequestHeader", 15: "UpdateConsumerOffsetRequestHeader",
                  30: "GetMaxOffsetRequestHeader", 31: "GetMinOffsetRequestHeader",
                  35: "UnregisterClientRequestHeader", 105: "GetRouteInfoRequestHeader"}

CLIENT_ID_PATTERN = r"^[0-9]+-127\.0\.0\.1@DEFAULT$"  # pid-ip@instanceName
UNIQ_KEY_PATTERN = r"^[0-9A-F]{32}$"
MAGIC_CODE = -626843481  # 0xDAA320A7 as Java's signed int
STATE_LOCK = threading.Lock()  # connections run on threads of their own
LONG_POLL_HOLD_S = 0.5


# ----------------------------------------------------------------------------- wire helpers
def encode_frame(header: dict[str, Any], body: bytes = b"") -> bytes:
    """A JSON-serialized RocketMQ frame: [total][type<<24 | header length][header][body]."""
    raw = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body


def split_frame(frame: bytes) -> tuple[dict[str, Any], bytes, int]:
    """Header dict, body and serialize type of a whole frame (length prefix included)."""
    (mixed,) = struct.unpack_from(">i", frame, 4)
    header_len = mixed & 0xFFFFFF
    header = json.loads(frame[8:8 + header_len])
    return header, frame[8 + header_len:], (mixed >> 24) & 0xFF


def encode_properties(props: dict[str, str]) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()


def decode_properties(text: str) -> dict[str, str]:
    out = {}
    for pair in text.split("\x02"):
        if "\x01" in pair:
            key, value = pair.split("\x01", 1)
            out[key] = value
    return out


def stored_message(topic: str, queue_id: int, queue_offset: int, body: bytes,
                   props: dict[str, str], port: int) -> bytes:
    """One message in CommitLog layout (IPv4 hosts, u8 topic length), as a pull body carries it."""
    host = socket.inet_aton("127.0.0.1")
    now = int(time.time() * 1000)
    topic_raw, props_raw = topic.encode(), encode_properties(props)
    tail = (struct.pack(">iiiqqiq", zlib.crc32(body) & 0x7FFFFFFF, queue_id, 0, queue_offset,
                        queue_offset * 256, 0, now)
            + host + struct.pack(">iq", 40000, now) + host + struct.pack(">iiqi", port, 0, 0, len(body))
            + body + struct.pack(">B", len(topic_raw)) + topic_raw
            + struct.pack(">h", len(props_raw)) + props_raw)
    return struct.pack(">ii", 8 + len(tail), MAGIC_CODE) + tail


def offset_msg_id(port: int, offset: int) -> str:
    return (socket.inet_aton("127.0.0.1") + struct.pack(">iq", port, offset)).hex().upper()


# ----------------------------------------------------------------------------- recording server
class Recorder:
    """Keeps the first raw frame of each request kind and the order kinds arrived in."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.frames: dict[str, bytes] = {}
        self.counts: dict[str, int] = {}
        self.sequence: list[str] = []
        self.trace: Any = None  # a text file of every frame, kept with --keep-log
        self.mark_dir: Path | None = None  # `<kind>.seen` files the driver waits on

    def add(self, kind: str, frame: bytes) -> None:
        if self.trace is not None:
            header, body, _ = split_frame(frame)
            text = body.decode("utf-8", "replace") if header.get("code") != 11 else f"<{len(body)} B>"
            with self.lock:
                self.trace.write(f"{time.monotonic():.3f} {kind} {json.dumps(header)} {text!r}\n")
        with self.lock:
            if kind not in self.frames and self.mark_dir is not None:
                (self.mark_dir / f"{kind}.seen").touch()
            self.frames.setdefault(kind, frame)
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if not self.sequence or self.sequence[-1] != kind:
                self.sequence.append(kind)


def classify(header: dict[str, Any], body: bytes) -> str:
    """Names the request kind from its code and the distinct topics/groups the driver uses."""
    code, ext = header.get("code"), header.get("extFields") or {}
    if code == 105:
        return "get_route_tbw102" if ext.get("topic") == "TBW102" else "get_route"
    if code == 34:
        data = json.loads(body or b"{}")
        groups = {c.get("groupName") for c in data.get("consumerDataSet") or []}
        if PUSH_GROUP in groups:
            return "heartbeat_push_consumer"
        if groups:
            return "heartbeat_consumer"
        return "heartbeat_producer" if data.get("producerDataSet") else "heartbeat_empty"
    if code in (10, 310, 320):
        topic = ext.get("topic", ext.get("b"))
        kind = SEND_KINDS.get(str(topic), "send_other")
        return kind if code == 10 else f"{kind}_code{code}"
    if code == 11:
        if str(ext.get("topic", "")).startswith("%RETRY%"):
            return "push_pull_retry"
        if ext.get("consumerGroup") == PUSH_GROUP:
            return "push_pull_commit" if int(ext.get("sysFlag", 0)) & 1 else "push_pull"
        return "pull" if ext.get("subscription") in (None, "", "*") else "pull_tag"
    if code == 35:
        return "unregister_consumer" if ext.get("consumerGroup") else "unregister_producer"
    named = {14: "query_consumer_offset", 15: "update_consumer_offset", 30: "get_max_offset",
             31: "get_min_offset", 38: "get_consumer_list_by_group"}
    return named.get(int(code or -1), f"code_{code}")


def route_body(port: int) -> bytes:
    route = {"orderTopicConf": None,
             "queueDatas": [{"brokerName": BROKER_NAME, "readQueueNums": QUEUE_NUMS,
                             "writeQueueNums": QUEUE_NUMS, "perm": 6, "topicSysFlag": 0}],
             "brokerDatas": [{"cluster": "GoldenCluster", "brokerName": BROKER_NAME,
                              "brokerAddrs": {"0": f"127.0.0.1:{port}"}}],
             "filterServerTable": {}}
    return json.dumps(route).encode()


def answer(header: dict[str, Any], body: bytes, port: int, state: dict[str, Any]
           ) -> tuple[int, dict[str, str], bytes, str | None]:
    """(response code, extFields, body, remark) for one request: the smallest believable reply."""
    code, ext = header["code"], header.get("extFields") or {}
    if code == 105:
        if ext.get("topic") == NEW_TOPIC:
            return 17, {}, b"", f"No topic route info in name server for the topic: {NEW_TOPIC}"
        return 0, {}, route_body(port), None
    if code in (10, 310, 320):
        qid = str(ext.get("queueId", ext.get("e", 0)))
        with STATE_LOCK:
            state["offset"] = state.get("offset", 0) + 1
            off = state["offset"]
        return 0, {"msgId": offset_msg_id(port, off * 100), "queueId": qid,
                   "queueOffset": str(off)}, b"", None
    if code == 11:
        return pull_answer(ext, port)
    if code == 34:
        data = json.loads(body or b"{}")
        if data.get("consumerDataSet"):
            with STATE_LOCK:
                state["consumer_client_id"] = data["clientID"]
    if code == 38:
        ids = [state["consumer_client_id"]] if "consumer_client_id" in state else []
        return 0, {}, json.dumps({"consumerIdList": ids}).encode(), None
    queue_key = f"{ext.get('consumerGroup')}@{ext.get('topic')}@{ext.get('queueId')}"
    if code == 14:
        # Like a broker that has no committed offset for a new group: QUERY_NOT_FOUND, after which
        # the client asks GET_MAX_OFFSET (CONSUME_FROM_LAST_OFFSET).
        if queue_key not in state:
            return 22, {}, b"", "Not found, maybe this group consumer boot first"
        return 0, {"offset": str(state[queue_key])}, b"", None
    if code == 15:
        with STATE_LOCK:
            state[queue_key] = int(ext.get("commitOffset", 0))
    if code in (30, 31):
        return 0, {"offset": "0"}, b"", None  # the one message at 0 counts as new to the consumer
    return 0, {}, b"", None


def pull_answer(ext: dict[str, Any], port: int) -> tuple[int, dict[str, str], bytes, str | None]:
    """One message at offset 0 of every queue; PULL_NOT_FOUND past it."""
    qid, offset = int(ext.get("queueId", 0)), int(ext.get("queueOffset", 0))
    fields = {"suggestWhichBrokerId": "0", "minOffset": "0", "maxOffset": "1"}
    if str(ext.get("topic", "")).startswith("%RETRY%"):  # retry queues stay empty
        fields["maxOffset"] = "0"
        return 19, {**fields, "nextBeginOffset": "0"}, b"", "no message in queue"
    if offset >= 1:
        return 19, {**fields, "nextBeginOffset": str(offset)}, b"", "no new message"
    props = {"TAGS": "TagA", "KEYS": f"pull-key-{qid}", "UNIQ_KEY": f"{qid:032X}"}
    msg = stored_message(str(ext.get("topic")), qid, 0, f"pulled-{qid}".encode(), props, port)
    return 0, {**fields, "nextBeginOffset": "1"}, msg, None


def make_handler(recorder: Recorder, port_ref: list[int]) -> type[socketserver.BaseRequestHandler]:
    state: dict[str, Any] = {}

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            conn: socket.socket = self.request
            conn.settimeout(SOCKET_TIMEOUT_S)
            send_lock = threading.Lock()
            while True:
                frame = read_frame(conn)
                if frame is None:
                    return
                header, body, _ = split_frame(frame)
                recorder.add(classify(header, body), frame)
                if header.get("flag", 0) & 1 or header.get("flag", 0) & 2:
                    continue  # a response to us, or oneway: nothing to answer
                code, ext, rbody, remark = answer(header, body, port_ref[0], state)
                reply = {"code": code, "extFields": ext, "flag": 1, "language": "JAVA",
                         "opaque": header.get("opaque", 0), "remark": remark,
                         "serializeTypeCurrentRPC": "JSON", "version": 395}
                out = encode_frame(reply, rbody)
                sys_flag = int((header.get("extFields") or {}).get("sysFlag", 0))
                if header["code"] == 11 and code == 19 and sys_flag & 2:
                    # A long poll with nothing new: hold the answer a little, as a broker would,
                    # so that the push consumer does not spin (the connection keeps serving).
                    timer = threading.Timer(LONG_POLL_HOLD_S, send, (conn, send_lock, out))
                    timer.daemon = True  # never keeps the script alive once the driver is gone
                    timer.start()
                else:
                    send(conn, send_lock, out)

    return Handler


def send(conn: socket.socket, lock: threading.Lock, data: bytes) -> None:
    with lock:
        try:
            conn.sendall(data)
        except OSError:
            pass  # the client went away; nothing to record


def read_frame(conn: socket.socket) -> bytes | None:
    head = recv_exact(conn, 4)
    if head is None:
        return None
    (total,) = struct.unpack(">i", head)
    rest = recv_exact(conn, total)
    return None if rest is None else head + rest


def recv_exact(conn: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = conn.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


# ----------------------------------------------------------------------------- golden description
def typed(key: str, value: Any) -> Any:
    """The value a lenient header parser should produce for a wire field."""
    if key in BOOL_FIELDS:
        return str(value).lower() in ("1", "true")
    if key in INT_FIELDS:
        return int(value)
    return value


def describe(kind: str, frame: bytes) -> dict[str, Any]:
    header, body, serialize_type = split_frame(frame)
    ext = header.get("extFields") or {}
    entry: dict[str, Any] = {
        "name": kind, "file": f"cpp_{kind}.bin", "frame_length": len(frame),
        "serialize_type": serialize_type, "code": header["code"], "language": header["language"],
        "version": header["version"], "flag": header["flag"], "remark": header.get("remark"),
        "body_length": len(body),
        "ext_fields_present": sorted(ext),
        "ext_fields_sent_as_json_numbers": sorted(k for k, v in ext.items() if not isinstance(v, str)),
        "ext_fields": {k: str(v) for k, v in sorted(ext.items()) if k not in VOLATILE_FIELDS},
    }
    cls = HEADER_CLASSES.get(header["code"])
    if cls:
        entry["header_class"] = cls
        entry["header_fields"] = {k: typed(k, v) for k, v in sorted(ext.items())
                                  if k not in VOLATILE_FIELDS | {"AccessKey", "OnsChannel"}}
    if header["code"] == 10:
        props = decode_properties(str(ext.get("properties", "")))
        entry["properties"] = {k: v for k, v in props.items() if k != "UNIQ_KEY"}
        entry["properties_present"] = sorted(props)
        if kind == "send_batch":
            entry["batch"] = describe_batch(body)
        else:
            entry["body_text"] = body.decode()
    if header["code"] == 34:
        entry["heartbeat"] = heartbeat = json.loads(body)
        heartbeat["clientID"] = None  # carries the pid: checked by CLIENT_ID_PATTERN only
        for consumer in heartbeat.get("consumerDataSet", []):
            for sub in consumer.get("subscriptionDataSet", []):
                sub["subVersion"] = None  # a timestamp: present, value not pinned
        entry["client_id_pattern"] = CLIENT_ID_PATTERN
    if header["code"] == 35:
        entry["client_id_pattern"] = CLIENT_ID_PATTERN
    return entry


def describe_batch(body: bytes) -> list[dict[str, Any]]:
    """Decodes the batch body independently of orbitmq (total, magic, crc, flag, body, props)."""
    out, pos = [], 0
    while pos < len(body):
        total, _magic, _crc, flag, blen = struct.unpack_from(">iiiii", body, pos)
        mbody = body[pos + 20:pos + 20 + blen]
        (plen,) = struct.unpack_from(">h", body, pos + 20 + blen)
        praw = body[pos + 22 + blen:pos + 22 + blen + plen].decode()
        props = decode_properties(praw)
        out.append({"flag": flag, "body_text": mbody.decode(),
                    "properties": {k: v for k, v in props.items() if k != "UNIQ_KEY"},
                    "properties_present": sorted(props)})
        pos += total
    return out


# ----------------------------------------------------------------------------- driver (compat venv)
def drive(port: int) -> None:
    """Runs inside .venv-compat: exercises the C++ client against the recorder on `port`."""
    from rocketmq.client import Message, Producer, PullConsumer, PushConsumer

    addr = f"127.0.0.1:{port}"
    mark_dir = Path(os.environ["GOLDEN_MARK_DIR"])

    def wait_for(kind: str, timeout_s: float) -> None:
        """Blocks until the recorder has seen a frame of `kind` (it touches a file)."""
        deadline = time.monotonic() + timeout_s
        while not (mark_dir / f"{kind}.seen").exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"the recorder saw no {kind} within {timeout_s} s")
            time.sleep(0.05)

    def message(topic: str, tag: str, key: str, body: str) -> Any:
        msg = Message(topic)
        msg.set_tags(tag)
        msg.set_keys(key)
        msg.set_body(body)
        return msg

    def report(step: str, value: Any) -> None:
        print(json.dumps({"step": step, "result": repr(value)}), flush=True)

    producer = Producer(PRODUCER_GROUP)
    producer.set_namesrv_addr(addr)
    producer.start()
    report("send_sync", producer.send_sync(message(NEW_TOPIC, "TagSync", "key-sync", "hello sync")))
    report("send_orderly", producer.send_orderly(
        message(ORDER_TOPIC, "TagOrder", "key-order", "hello orderly"), ORDER_SHARDING_KEY))
    batch = [message(BATCH_TOPIC, "TagB1", "key-b1", "batch one"),
             message(BATCH_TOPIC, "TagB2", "key-b2", "batch two")]
    report("send_batch", producer.send_batch(batch))
    report("send_oneway", producer.send_oneway(
        message(ONEWAY_TOPIC, "TagOneway", "key-oneway", "hello oneway")))
    wait_for("send_oneway", 10.0)  # a oneway send has no answer to wait for
    # Heartbeats come from the client's timer task, shortly after start (then every 30 s); a quick
    # shutdown would race them, so wait for one.
    wait_for("heartbeat_producer", 40.0)
    producer.shutdown()

    consumer = PullConsumer(CONSUMER_GROUP)
    consumer.set_namesrv_addr(addr)
    consumer.start()
    report("pull", [(m.queue_id, m.body, m.tags) for m in consumer.pull(PULL_TOPIC)])
    PullConsumer.offset_table.clear()  # the wrapper keeps offsets class-wide: start over
    report("pull_tag", [(m.queue_id, m.body, m.tags)
                        for m in consumer.pull(PULL_TOPIC, TAG_EXPRESSION)])
    wait_for("heartbeat_consumer", 40.0)
    consumer.shutdown()

    received: list[Any] = []
    done = threading.Event()

    def on_message(msg: Any) -> None:
        received.append((msg.queue_id, msg.body, msg.tags))
        if len(received) >= QUEUE_NUMS:
            done.set()

    push = PushConsumer(PUSH_GROUP)
    push.set_namesrv_addr(addr)
    push.subscribe(PUSH_TOPIC, on_message, "TagA")
    push.start()
    done.wait(20.0)
    wait_for("push_pull_commit", 10.0)  # the long poll that commits the consumed offset
    report("push", sorted(received))
    push.shutdown()


# ----------------------------------------------------------------------------- main
def run_driver(port: int, home: Path) -> None:
    env = {**os.environ, "HOME": str(home),  # the C++ client logs under $HOME/logs
           "GOLDEN_MARK_DIR": str(home)}
    proc = subprocess.run([str(COMPAT_PYTHON), __file__, "--drive", str(port)], env=env,
                          capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"driver failed with exit code {proc.returncode}; client log under {home}")


def write_outputs(recorder: Recorder) -> list[dict[str, Any]]:
    for old in DATA_DIR.glob("cpp_*.bin"):
        old.unlink()
    entries = []
    for kind in sorted(recorder.frames):
        frame = recorder.frames[kind]
        (DATA_DIR / f"cpp_{kind}.bin").write_bytes(frame)
        entry = describe(kind, frame)
        entry["seen"] = recorder.counts[kind]
        entries.append(entry)
    golden = {"client": "PyPI rocketmq 0.4.4 (bundled librocketmq)",
              "captured_by": "tests/data/capture_golden.py",
              "uniq_key_pattern": UNIQ_KEY_PATTERN,
              "arrival_order": recorder.sequence, "frames": entries}
    (DATA_DIR / "golden.json").write_text(json.dumps(golden, indent=1, sort_keys=False) + "\n")
    return entries


def main() -> None:
    faulthandler.dump_traceback_later(DRIVER_TIMEOUT_S + 30, exit=True)  # a hang shows its stacks
    if not COMPAT_PYTHON.exists():
        raise SystemExit(f"{COMPAT_PYTHON} is missing: run `bash scripts/compat-venv.sh` first")
    recorder = Recorder()
    port_ref = [0]
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), make_handler(recorder, port_ref))
    server.daemon_threads = True
    port_ref[0] = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    home = Path(tempfile.mkdtemp(prefix="golden-cpp-home-"))
    recorder.trace = open(home / "frames.log", "w")  # noqa: SIM115 (closed below)
    recorder.mark_dir = home
    try:
        run_driver(port_ref[0], home)
    finally:
        server.shutdown()
        server.server_close()
        recorder.trace.close()
        recorder.trace = None
    entries = write_outputs(recorder)
    for entry in entries:
        print(f"{entry['file']:<36} code={entry['code']:<4} seen={entry['seen']:<3} "
              f"len={entry['frame_length']}")
    print(f"arrival order: {' '.join(recorder.sequence)}")
    if "--keep-log" in sys.argv:
        print(f"client log kept in {home}/logs, every frame in {home}/frames.log")
    else:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--drive":
        drive(int(sys.argv[2]))
    else:
        main()
