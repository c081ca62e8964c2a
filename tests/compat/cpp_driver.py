"""Drives the official RocketMQ C++ client (PyPI `rocketmq` 0.4.4) through one scenario.

Runs under .venv-compat's Python, never under OrbitMQ's venv: it imports nothing from orbitmq and only
the stdlib plus the `rocketmq` wrapper (ctypes over the bundled librocketmq.so). The compat tests start
it as a child process, once per scenario, so that every scenario gets a fresh client process (the C++
client keeps per-process state: client id, route cache, the wrapper's class-level offset table).

    python cpp_driver.py SCENARIO < spec.json

SCENARIO is one of send_sync, send_orderly, send_async, send_batch, send_oneway, pull, pull_raw,
push. The spec (JSON on stdin) always has `namesrv` ("host:port") and `group`; the rest depends on the
scenario (see each function). The result is one JSON object on the last line of stdout. A client call
that raises is reported inside the result ({"error": class name, "message": text}), not as a crash,
so that a test can say which request failed and how. The push scenario also prints event lines
({"event": "started"}, {"event": "received", ...}) that a test follows while it runs.

Messages in a spec: {"topic", "body" (text), "tags", "keys", "properties": {name: value}} (or
"random_body_size" and "seed" instead of "body", for incompressible bytes); received
messages come back with their body in base64 (`body_b64`) because bodies are bytes.
"""

from __future__ import annotations

import base64
import ctypes
import faulthandler
import json
import os
import random
import sys
import threading
import time
from typing import Any

# The wrapper is imported lazily in main() so that `--help` works without the compat venv.
rmq: Any = None

# Properties every received message reports (the client's own ones); a spec may ask for more.
STANDARD_PROPERTIES = ("UNIQ_KEY", "KEYS", "TAGS", "WAIT")
PULL_STATUS = {0: "FOUND", 1: "NO_NEW_MSG", 2: "NO_MATCHED_MSG", 3: "OFFSET_ILLEGAL", 4: "BROKER_TIMEOUT"}


def emit(obj: dict[str, Any]) -> None:
    """One JSON object per stdout line; the test reads the last one as the result."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def error_of(exc: BaseException) -> dict[str, str]:
    return {"error": type(exc).__name__, "message": str(exc)}


def text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


# ----------------------------------------------------------------------------- messages
def build_message(spec: dict[str, Any]) -> Any:
    """A wrapper Message from its JSON description (tags/keys/properties optional)."""
    msg = rmq.Message(spec["topic"])
    if spec.get("tags") is not None:
        msg.set_tags(spec["tags"])
    if spec.get("keys") is not None:
        msg.set_keys(spec["keys"])
    for name, value in (spec.get("properties") or {}).items():
        msg.set_property(name, value)
    if "random_body_size" in spec:
        # Incompressible bytes without NUL (the wrapper passes bodies as C strings).
        body = random.Random(spec.get("seed", 0)).randbytes(int(spec["random_body_size"]))
        msg.set_body(body.replace(b"\0", b"\1"))
    else:
        msg.set_body(spec["body"].encode("utf-8"))
    return msg


def describe_received(msg: Any, extra_properties: list[str]) -> dict[str, Any]:
    """Everything the C++ client tells about a received message, read before the client frees it."""
    names = list(STANDARD_PROPERTIES) + [n for n in extra_properties if n not in STANDARD_PROPERTIES]
    return {
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "commit_log_offset": msg.commit_log_offset,
        "id": msg.id,
        "tags": text(msg.tags),
        "keys": text(msg.keys),
        "body_b64": base64.b64encode(msg.body or b"").decode("ascii"),
        "properties": {n: text(msg.get_property(n)) for n in names},
        "reconsume_times": msg.reconsume_times,
        "store_size": msg.store_size,
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
    }


def sign_with(client: Any, spec: dict[str, Any]) -> None:
    """spec["credentials"] ({"access_key", "secret_key", "channel"}): the client signs every
    request with them (set_session_credentials)."""
    creds = spec.get("credentials")
    if creds:
        client.set_session_credentials(creds["access_key"], creds["secret_key"],
                                       creds.get("channel", "ALIYUN"))


def send_result(res: Any) -> dict[str, Any]:
    return {"status": res.status.name, "msg_id": res.msg_id, "offset": res.offset}


# ----------------------------------------------------------------------------- producer scenarios
def with_producer(spec: dict[str, Any], body: Any) -> dict[str, Any]:
    """Starts a Producer for the spec's group and name server, runs body(producer), shuts it down."""
    producer = rmq.Producer(spec["group"])
    producer.set_namesrv_addr(spec["namesrv"])
    sign_with(producer, spec)
    if spec.get("send_timeout_ms"):
        producer.set_timeout(int(spec["send_timeout_ms"]))
    if spec.get("max_message_size"):
        producer.set_max_message_size(int(spec["max_message_size"]))
    try:
        producer.start()
    except Exception as e:  # noqa: BLE001 - reported to the test
        return {"start": error_of(e)}
    try:
        warmup = warm_up(producer, spec)
        result = body(producer)
        if warmup:
            result["warmup"] = warmup
        return result
    finally:
        producer.shutdown()


def warm_up(producer: Any, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Connects the producer to the broker with a send to spec["warmup_topic"] before the scenario.

    librocketmq creates its connection to a broker on first use under a table lock that it only
    tries to take: when its heartbeat timer (which fires as soon as a route names a new broker)
    connects at the same moment, the send gives up at once and, after its retries, fails with "No
    route info of this topic" (its log says "GetTransport ... get timed_mutex timeout"). That race
    is the client's, not the server's, so the scenario's own sends start with the connection made.
    Up to three attempts; their outcomes are returned for the test's diagnostics."""
    topic = spec.get("warmup_topic")
    attempts: list[dict[str, Any]] = []
    if not topic:
        return attempts
    for _ in range(3):
        msg = rmq.Message(topic)
        msg.set_body(b"warm-up")
        try:
            attempts.append(send_result(producer.send_sync(msg)))
            break
        except Exception as e:  # noqa: BLE001
            attempts.append(error_of(e))
            time.sleep(0.2)  # let the heartbeat's connection finish before trying again
    return attempts


def send_each(spec: dict[str, Any], send: Any) -> dict[str, Any]:
    """Sends spec["messages"] one by one with `send(producer, msg, item)`; one result per message.
    With spec["stop_after_errors"] = n, the messages after n failed sends in a row are not sent
    (their result is {"error": "NotSent"}): the broker is gone, each send would wait its timeout.
    spec["started_file"], when given, is created once the producer has started."""

    def body(producer: Any) -> dict[str, Any]:
        results = []
        stop_after, failed = int(spec.get("stop_after_errors", 0)), 0
        if spec.get("started_file"):
            with open(spec["started_file"], "w") as f:
                f.write("started\n")
        for item in spec["messages"]:
            if stop_after and failed >= stop_after:
                results.append({"error": "NotSent", "message": "the broker is gone"})
                continue
            try:
                results.append(send(producer, build_message(item), item))
                failed = 0
            except Exception as e:  # noqa: BLE001 - one failed send must not hide the others
                results.append(error_of(e))
                failed += 1
        return {"results": results}

    return with_producer(spec, body)


def scenario_send_sync(spec: dict[str, Any]) -> dict[str, Any]:
    return send_each(spec, lambda p, m, _item: send_result(p.send_sync(m)))


def scenario_send_orderly(spec: dict[str, Any]) -> dict[str, Any]:
    """Each message item carries `arg`, the int the wrapper's hashing selector takes modulo the
    queue count. The queue the selector chose is reported through a selector that records it."""
    chosen: list[int] = []

    def selector(mq_size: int, msg: Any, arg: Any) -> int:
        queue = rmq.hashing_queue_selector(mq_size, msg, arg)
        chosen.append(queue)
        return queue

    def send(producer: Any, msg: Any, item: dict[str, Any]) -> dict[str, Any]:
        chosen.clear()
        res = send_result(producer.send_orderly(msg, int(item["arg"]), queue_selector=selector))
        res["selected_queues"] = list(chosen)  # one per attempt
        return res

    return send_each(spec, send)


def scenario_send_async(spec: dict[str, Any]) -> dict[str, Any]:
    """send_async for every message, then wait (bounded) for all the callbacks; one result per
    message, in the order of the messages."""

    def body(producer: Any) -> dict[str, Any]:
        results: list[dict[str, Any] | None] = [None] * len(spec["messages"])
        done = threading.Semaphore(0)
        keep = []  # the C++ client may read a message after send_async returns: keep it alive

        def callbacks(i: int) -> tuple[Any, Any]:
            def ok(res: Any) -> None:
                results[i] = send_result(res)
                done.release()

            def failed(exc: Exception) -> None:
                results[i] = error_of(exc)
                done.release()

            return ok, failed

        for i, item in enumerate(spec["messages"]):
            msg = build_message(item)
            keep.append(msg)
            try:
                producer.send_async(msg, *callbacks(i))
            except Exception as e:  # noqa: BLE001
                results[i] = error_of(e)
                done.release()
        deadline = time.monotonic() + float(spec.get("callback_wait_s", 20))
        for _ in results:
            if not done.acquire(timeout=max(0.0, deadline - time.monotonic())):
                break
        return {"results": [r if r is not None else {"error": "NoCallback",
                                                       "message": "no callback in time"}
                            for r in results]}

    return with_producer(spec, body)


def scenario_send_oneway(spec: dict[str, Any]) -> dict[str, Any]:
    """Oneway sends get no answer, and the process may exit before the broker has read them. When
    spec["fence"] names a message, it is sent with send_sync afterwards over the same connection:
    its answer means the broker has read every oneway frame before it."""

    def send(producer: Any, msg: Any, _item: dict[str, Any]) -> dict[str, Any]:
        producer.send_oneway(msg)
        return {"status": "SENT"}

    def body(producer: Any) -> dict[str, Any]:
        results = []
        for item in spec["messages"]:
            try:
                results.append(send(producer, build_message(item), item))
            except Exception as e:  # noqa: BLE001
                results.append(error_of(e))
        out: dict[str, Any] = {"results": results}
        if spec.get("fence"):
            try:
                out["fence"] = send_result(producer.send_sync(build_message(spec["fence"])))
            except Exception as e:  # noqa: BLE001
                out["fence"] = error_of(e)
        return out

    return with_producer(spec, body)


def scenario_send_batch(spec: dict[str, Any]) -> dict[str, Any]:
    """spec["batches"]: a list of message lists, each sent with one send_batch."""

    def body(producer: Any) -> dict[str, Any]:
        results = []
        for batch in spec["batches"]:
            try:
                msgs = [build_message(item) for item in batch]
                results.append(send_result(producer.send_batch(msgs)))
            except Exception as e:  # noqa: BLE001
                results.append(error_of(e))
        return {"results": results}

    return with_producer(spec, body)


# ----------------------------------------------------------------------------- pull consumer
def with_pull_consumer(spec: dict[str, Any], body: Any) -> dict[str, Any]:
    rmq.PullConsumer.offset_table.clear()  # class-level in the wrapper: start from offset 0
    consumer = rmq.PullConsumer(spec["group"])
    consumer.set_namesrv_addr(spec["namesrv"])
    sign_with(consumer, spec)
    try:
        consumer.start()
    except Exception as e:  # noqa: BLE001
        return {"start": error_of(e)}
    try:
        return body(consumer)
    finally:
        consumer.shutdown()


def scenario_pull(spec: dict[str, Any]) -> dict[str, Any]:
    """The wrapper's own PullConsumer.pull(topic, expression): every queue from offset 0 until the
    broker says NO_NEW_MSG. Messages in the order the client yields them (queue by queue)."""
    extra = spec.get("properties") or []

    def body(consumer: Any) -> dict[str, Any]:
        messages = []
        try:
            for msg in consumer.pull(spec["topic"], spec.get("expression", "*"), spec.get("max_num", 32)):
                messages.append(describe_received(msg, extra))
        except Exception as e:  # noqa: BLE001
            return {"messages": messages, **error_of(e)}
        return {"messages": messages}

    return with_pull_consumer(spec, body)


def fetch_queues(consumer: Any, topic: str) -> list[Any]:
    """The topic's queues as the client sees them (copies; the C array is released here)."""
    from rocketmq.ffi import _CMessageQueue, dll

    array = ctypes.POINTER(_CMessageQueue)()
    size = ctypes.c_int()
    rmq.ffi_check(dll.FetchSubscriptionMessageQueues(
        consumer._handle, topic.encode(), ctypes.pointer(array), ctypes.pointer(size)))
    try:
        return [_CMessageQueue.from_buffer_copy(array[i]) for i in range(size.value)]
    finally:
        dll.ReleaseSubscriptionMessageQueue(array)


def pull_queue(consumer: Any, mq: Any, spec: dict[str, Any], extra: list[str]) -> dict[str, Any]:
    """Pulls one queue from spec["offset"] (default 0), at most spec["max_pulls"] times, recording
    each answer; stops at NO_NEW_MSG or when an answer does not move the offset forward.

    BROKER_TIMEOUT is what the C API reports when the client got no answer at all, e.g. when its
    first connection to the broker lost librocketmq's transport-table race (see warm_up); such a
    pull is tried again (as the wrapper's pull loop does), counted in `broker_timeouts`."""
    from rocketmq.ffi import dll

    offset = int(spec.get("offset", 0))
    trace, messages, timeouts = [], [], 0
    while len(trace) < int(spec.get("max_pulls", 20)):
        res = dll.Pull(consumer._handle, ctypes.pointer(mq), spec.get("expression", "*").encode(),
                       ctypes.c_longlong(offset), int(spec.get("max_num", 32)))
        status = PULL_STATUS.get(res.pullStatus, str(res.pullStatus))
        if status == "BROKER_TIMEOUT" and timeouts < 5:
            timeouts += 1
            dll.ReleasePullResult(res)
            time.sleep(0.2)
            continue
        trace.append({"offset": offset, "status": status, "next_begin_offset": res.nextBeginOffset,
                      "min_offset": res.minOffset, "max_offset": res.maxOffset, "count": res.size})
        if res.pullStatus == 0:
            for i in range(res.size):
                messages.append(describe_received(rmq.RecvMessage(res.msgFoundList[i]), extra))
        moved = res.nextBeginOffset > offset
        dll.ReleasePullResult(res)
        if status in ("NO_NEW_MSG", "OFFSET_ILLEGAL", "BROKER_TIMEOUT") or not moved or spec.get("once"):
            break
        offset = trace[-1]["next_begin_offset"]
    return {"queue_id": mq.queueId, "broker_name": mq.brokerName.decode(), "pulls": trace,
            "messages": messages, "broker_timeouts": timeouts}


def scenario_pull_raw(spec: dict[str, Any]) -> dict[str, Any]:
    """Pulls through librocketmq's C API (Pull) so that each answer's status and offsets are seen;
    spec may name `queue_ids` (default: every queue), `offset`, `max_pulls`, `once`."""
    extra = spec.get("properties") or []

    def body(consumer: Any) -> dict[str, Any]:
        try:
            queues = fetch_queues(consumer, spec["topic"])
        except Exception as e:  # noqa: BLE001
            return {"fetch_queues": error_of(e)}
        wanted = spec.get("queue_ids")
        out = [pull_queue(consumer, mq, spec, extra)
               for mq in queues if wanted is None or mq.queueId in wanted]
        return {"queues": [{"queue_id": mq.queueId, "broker_name": mq.brokerName.decode()}
                           for mq in queues], "pulled": out}

    return with_pull_consumer(spec, body)


# ----------------------------------------------------------------------------- push consumer
def push_options(spec: dict[str, Any]) -> dict[str, Any]:
    """spec["orderly"] (bool) and spec["message_model"] ("CLUSTERING" or "BROADCASTING")."""
    options: dict[str, Any] = {}
    if spec.get("orderly"):
        options["orderly"] = True
    if spec.get("message_model"):
        options["message_model"] = rmq.MessageModel[spec["message_model"]]
    return options


def subscribe_push(consumer: Any, spec: dict[str, Any], on_message: Any) -> None:
    """Subscribes on_message. With spec["reconsume_later"] ({body text: n}), the callback answers
    RECONSUME_LATER (1) to the first n deliveries of that body: the wrapper's own subscribe cannot
    (it turns an exception into a ctypes error, not a status), so the C callback is registered
    here, through the wrapper's own registration (which keeps it alive)."""
    fail_left = dict(spec.get("reconsume_later") or {})
    if not fail_left:
        consumer.subscribe(spec["topic"], on_message, spec.get("expression", "*"))
        return
    lock = threading.Lock()

    def callback(_consumer: Any, msg_pointer: Any) -> int:
        msg = rmq.RecvMessage(msg_pointer)
        on_message(msg)
        with lock:
            body = text(msg.body) or ""
            if fail_left.get(body, 0) > 0:
                fail_left[body] -= 1
                return 1  # RECONSUME_LATER
        return 0  # CONSUME_SUCCESS

    rmq.ffi_check(rmq.dll.Subscribe(consumer._handle, spec["topic"].encode(),
                                    spec.get("expression", "*").encode()))
    consumer._register_callback(callback)


def scenario_push(spec: dict[str, Any]) -> dict[str, Any]:
    """A PushConsumer on spec["topic"] with spec["expression"]. Prints {"event": "started"} after
    start and {"event": "received", "count", "queue_id", "body_b64"} for each message, collects until spec["expect"]
    messages arrived (if given), spec["stop_file"] exists (if given) or spec["wait_s"] passed, then
    shuts down (which commits its offsets). Messages in arrival order. Optional: "orderly",
    "message_model", "reconsume_later" (see push_options and subscribe_push)."""
    extra = spec.get("properties") or []
    expect = int(spec.get("expect") or 0)
    stop_file = spec.get("stop_file")
    received: list[dict[str, Any]] = []
    lock = threading.Lock()
    enough = threading.Event()

    def on_message(msg: Any) -> None:
        with lock:
            received.append(describe_received(msg, extra))
            emit({"event": "received", "count": len(received), "queue_id": msg.queue_id,
                  "body_b64": received[-1]["body_b64"]})
            if expect and len(received) >= expect:
                enough.set()

    consumer = rmq.PushConsumer(spec["group"], **push_options(spec))
    consumer.set_namesrv_addr(spec["namesrv"])
    sign_with(consumer, spec)
    if spec.get("thread_count"):
        consumer.set_thread_count(int(spec["thread_count"]))
    subscribe_push(consumer, spec, on_message)
    try:
        consumer.start()
    except Exception as e:  # noqa: BLE001
        return {"start": error_of(e)}
    emit({"event": "started"})
    started = time.monotonic()
    deadline = started + float(spec.get("wait_s", 30))
    stopped = False
    while not enough.wait(0.05) and time.monotonic() < deadline:
        if stop_file and os.path.exists(stop_file):
            stopped = True
            break
    waited = time.monotonic() - started
    consumer.shutdown()
    with lock:
        return {"messages": list(received), "complete": enough.is_set(), "stopped": stopped,
                "waited_s": round(waited, 3)}


SCENARIOS = {
    "send_sync": scenario_send_sync,
    "send_orderly": scenario_send_orderly,
    "send_async": scenario_send_async,
    "send_oneway": scenario_send_oneway,
    "send_batch": scenario_send_batch,
    "pull": scenario_pull,
    "pull_raw": scenario_pull_raw,
    "push": scenario_push,
}


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in SCENARIOS:
        sys.stderr.write(f"usage: {sys.argv[0]} {{{'|'.join(SCENARIOS)}}} < spec.json\n")
        raise SystemExit(2)
    spec = json.loads(sys.stdin.read())
    # A hang inside the client (in C code, where signals do not reach Python) dumps every thread's
    # stack and exits, so the test sees where it stuck instead of only its own timeout.
    faulthandler.dump_traceback_later(float(spec.get("deadline_s", 60)), exit=True)
    global rmq
    import rocketmq.client as client

    rmq = client
    result = SCENARIOS[sys.argv[1]](spec)
    emit(result)
    # Skip interpreter teardown: the wrapper's __del__ methods would shut the clients down a second
    # time from the garbage collector, which only adds noise to a finished scenario.
    os._exit(0)


if __name__ == "__main__":
    main()
