"""A seeded wire fuzzer: thousands of mutated valid requests of every request code the broker and
the name server serve, against ``orbitmq standalone`` running as a child process.

Each request starts as a valid one (built from the header and body classes a RocketMQ client
uses) and gets one to three mutations: header values replaced by huge, negative, non-numeric,
empty, long or unicode values, JSON numbers or nulls where text is usual, fields dropped, bodies
truncated, garbled or with their numbers replaced. The oracle:

- no answer carries one of our internal exceptions: no remark starting "internal error" (what the
  transport answers to a handler's bug), naming a Python exception class, or holding a traceback;
- every request is answered (a pull may be held by long polling: that is an answer deferred);
- the server's log holds no traceback;
- every valid send made before and after the fuzzing is still readable, the committed offsets and
  the topics created before are intact, after a clean restart and again after a kill -9.

``test_verdicts_fuzzed`` aims at the fields that carry a transaction verdict (END_TRANSACTION,
as a producer's verdict and as a check's answer, and END_TRANSACTION_BATCH, on real half
messages): values next to 0/8/12 and every general mutation, in JSON and binary headers; each
value outside the set must be answered INVALID_PARAMETER naming commitOrRollback.

The seed is printed; ``ORBITMQ_FUZZ_SEED=N`` replays a run, ``ORBITMQ_FUZZ_REQUESTS=N`` changes
its size (20,000 by default, bounded by FUZZ_TIME_MAX_S as well). Destructive requests (deletes,
offset commits, registrations) are built for scratch topics, groups and broker names only, and no
mutation produces the protected names, so whatever the fuzzer does to them is legitimate.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from wire_fuzz_support import RawClient, Request, json_text, mutate, neighbour

from orbitmq.assembly import build_broker
from orbitmq.config import BrokerConfig, NamesrvConfig, StoreConfig
from orbitmq.errors import RemoteProtocolError
from orbitmq.namesrv import NameServer
from orbitmq.protocol._lenient import parse_int
from orbitmq.protocol.batch import encode_batch
from orbitmq.protocol.bodies import (
    CheckClientRequestBody,
    ConsumerData,
    DataVersion,
    HeartbeatData,
    LockBatchRequestBody,
    MessageQueue,
    ProducerData,
    QueueData,
    RegisterBrokerBody,
    SubscriptionData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from orbitmq.protocol.codes import OrbitMQRequestCode, RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.extension_headers import (
    EndTransactionBatchRequestHeader,
    SendTransactionBatchRequestHeader,
)
from orbitmq.protocol.headers import (
    TRANSACTION_VERDICTS,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    EndTransactionRequestHeader,
    GetAllTopicConfigRequestHeader,
    PullMessageRequestHeader,
    QueryMessageRequestHeader,
    RecallMessageRequestHeader,
    RegisterBrokerRequestHeader,
    SendMessageRequestHeader,
)
from orbitmq.protocol.msgid import decode_offset_msg_id
from orbitmq.protocol.recall_handle import build_recall_handle
from orbitmq.protocol.stored import iter_stored_messages
from orbitmq.security import AuthRequestCode, Credentials
from orbitmq.testing.process import ServerProcess, standalone_process

FUZZ_REQUESTS_DEFAULT = 20_000
FUZZ_TIME_MAX_S = 40.0  # the fuzzing phase stops here whatever is left
IN_FLIGHT_MAX = 24  # requests outstanding per connection
CONNECTIONS = 4
ANSWER_WAIT_S = 10.0  # an answer later than this is a failure...
HELD_PULL_WAIT_S = 0.5  # ...except for a pull, which long polling may hold
_PULL_CODES = (RequestCode.PULL_MESSAGE, OrbitMQRequestCode.PULL_MESSAGE_BULK)  # long-polled
KEEP_TOPIC, KEEP_ADMIN_TOPIC, KEEP_GROUP = "FuzzKeep", "FuzzKeepAdmin", "FuzzKeepGroup"
SCRATCH_TOPIC, SCRATCH_GROUP = "FuzzScratch", "FuzzScratchGroup"
KEEP_QUEUES = 4
VERDICTS = TRANSACTION_VERDICTS  # commitOrRollback: unknown 0, commit 8, rollback 12
VERDICT_FUZZ_REQUESTS = 3000  # test_verdicts_fuzzed: a few seconds
STANDALONE_FLAGS = ("--mapped-file-size-commitlog", str(8 * 1024 * 1024),
                    "--max-hash-slot-num", "1000", "--max-index-num", "4000")

# Python exception class names, tracebacks, and the transport's answer to a handler's bug.
INTERNAL = re.compile(r"Traceback|internal error|\b(?:[A-Z][a-z0-9]+)+(?:Error|Exception)\b")

# ------------------------------------------------------------------------------ valid requests
@dataclass
class Context:
    """What valid requests refer to: stored messages' offsets and msg ids, a fake broker."""

    offsets: list[int]
    msg_ids: list[str]
    counter: itertools.count[int] = field(default_factory=itertools.count)


def _send_header(topic: str, queue_id: int, props: str = "") -> SendMessageRequestHeader:
    return SendMessageRequestHeader(
        producer_group="FuzzProducer", topic=topic, default_topic="TBW102",
        default_topic_queue_nums=4, queue_id=queue_id, sys_flag=0,
        born_timestamp=int(time.time() * 1000), flag=0,
        properties=props or "UNIQ_KEY\x01FUZZ\x02KEYS\x01k1 k2\x02TAGS\x01t\x02")


def _heartbeat(rng: random.Random) -> bytes:
    sub = SubscriptionData(SCRATCH_TOPIC, "t || u", ["t", "u"], [116, 117], 1)
    consumer = ConsumerData(SCRATCH_GROUP, subscription_data_set=[sub])
    return HeartbeatData("fuzz-client@1", [ProducerData("FuzzProducer")], [consumer]).to_json()


def _register(ctx: Context) -> tuple[dict[str, Any], bytes]:
    n = next(ctx.counter) % 50
    wrapper = TopicConfigSerializeWrapper({"FuzzFakeTopic": TopicConfig("FuzzFakeTopic", 4, 4)})
    header = RegisterBrokerRequestHeader(
        broker_name=f"fuzz-broker-{n}", broker_addr=f"127.0.0.1:{20000 + n}",
        cluster_name="FuzzCluster", ha_server_addr=f"127.0.0.1:{30000 + n}", broker_id=n % 3)
    return header.to_ext_fields(), RegisterBrokerBody(wrapper).to_json()


def _builder(code: int, fields: dict[str, Any], body: bytes = b"", target: str = "broker"
             ) -> Callable[[], Request]:
    return lambda: Request(target, code, dict(fields), body)


def valid_requests(ctx: Context, rng: random.Random) -> dict[int, Callable[[], Request]]:
    """A builder of one valid request per request code served (broker and name server)."""
    return {**_broker_requests(ctx, rng), **_namesrv_requests(ctx)}


def _namesrv_requests(ctx: Context) -> dict[int, Callable[[], Request]]:
    b = _builder
    reg_fields, reg_body = _register(ctx)
    return {
        RequestCode.REGISTER_BROKER: b(RequestCode.REGISTER_BROKER, reg_fields, reg_body, "namesrv"),
        RequestCode.UNREGISTER_BROKER: b(RequestCode.UNREGISTER_BROKER, {
            k: reg_fields[k] for k in ("brokerName", "brokerAddr", "clusterName", "brokerId")},
            b"", "namesrv"),
        RequestCode.GET_ROUTEINFO_BY_TOPIC: b(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                              {"topic": KEEP_TOPIC}, b"", "namesrv"),
        RequestCode.GET_BROKER_CLUSTER_INFO: b(RequestCode.GET_BROKER_CLUSTER_INFO, {}, b"",
                                               "namesrv"),
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: b(
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}, b"", "namesrv"),
        RequestCode.DELETE_TOPIC_IN_NAMESRV: b(RequestCode.DELETE_TOPIC_IN_NAMESRV, {
            "topic": "FuzzFakeTopic"}, b"", "namesrv"),
        RequestCode.GET_TOPICS_BY_CLUSTER: b(RequestCode.GET_TOPICS_BY_CLUSTER, {
            "cluster": "DefaultCluster"}, b"", "namesrv"),
        RequestCode.REGISTER_TOPIC_IN_NAMESRV: b(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {
            "topic": "FuzzFakeTopic", **{k: reg_fields[k] for k in (
                "brokerName", "brokerAddr", "clusterName", "brokerId")},
            "baseVersionTimestamp": "0", "baseVersionCounter": "0",
            "versionTimestamp": "1", "versionCounter": "1"},
            TopicRouteData(queue_datas=[QueueData(reg_fields["brokerName"], 4, 4, 6)]).to_json(),
            "namesrv"),
        RequestCode.QUERY_DATA_VERSION: b(RequestCode.QUERY_DATA_VERSION, {
            k: reg_fields[k] for k in ("brokerName", "brokerAddr", "clusterName", "brokerId")},
            DataVersion(1, 1).to_json(), "namesrv"),
    }


def _broker_requests(ctx: Context, rng: random.Random) -> dict[int, Callable[[], Request]]:
    b = _builder
    offset = rng.choice(ctx.offsets)
    msg_id = rng.choice(ctx.msg_ids)
    q = {"topic": KEEP_TOPIC, "queueId": str(rng.randrange(KEEP_QUEUES))}
    if rng.random() < 0.7:  # a plain pull, committing the offset it carries
        pull = PullMessageRequestHeader(SCRATCH_GROUP, KEEP_TOPIC, rng.randrange(KEEP_QUEUES),
                                        rng.randrange(4), 32, 4 | 1, rng.randrange(3), 0, "*")
    else:  # held by long polling (an empty queue) and answered when its time is up
        pull = PullMessageRequestHeader(SCRATCH_GROUP, KEEP_ADMIN_TOPIC, rng.randrange(3), 0,
                                        32, 4 | 2, 0, 200, "t || u", expression_type="TAG")
    batch = encode_batch([(0, b"b1", {"KEYS": "bk"}), (0, b"b2", {"TAGS": "x"})])
    lock = LockBatchRequestBody(SCRATCH_GROUP, "fuzz-client@1",
                                [MessageQueue(SCRATCH_TOPIC, "broker-a", 0)]).to_json()
    end = EndTransactionRequestHeader("FuzzProducer", 0, offset, rng.choice(VERDICTS), msg_id,
                                      rng.random() < 0.3, "tx")  # a producer's, or a check's answer
    back = ConsumerSendMsgBackRequestHeader(offset, SCRATCH_GROUP, 0, msg_id, KEEP_TOPIC)
    group = {"consumerGroup": SCRATCH_GROUP}
    send = _send_header(SCRATCH_TOPIC, rng.randrange(4))
    return {
        RequestCode.SEND_MESSAGE: b(RequestCode.SEND_MESSAGE, send.to_ext_fields(), b"fuzz body")
        if rng.random() < 0.7 else  # the C++ client sends batches as code 10 with batch=1
        b(RequestCode.SEND_MESSAGE, {**send.to_ext_fields(), "batch": "1"}, batch),
        RequestCode.SEND_MESSAGE_V2: b(RequestCode.SEND_MESSAGE_V2, send.to_v2_ext_fields(), b"v2"),
        # a recall of a message that is not waiting (the broker answers the handle, whatever it
        # names: recall_message_enable may be off, the time past, the broker another)
        RequestCode.RECALL_MESSAGE: b(RequestCode.RECALL_MESSAGE, RecallMessageRequestHeader(
            SCRATCH_TOPIC, build_recall_handle(SCRATCH_TOPIC, "broker-a", rng.choice(
                [1, 4_102_444_800_000]), msg_id), "FuzzProducer").to_ext_fields()),
        RequestCode.SEND_BATCH_MESSAGE: b(RequestCode.SEND_BATCH_MESSAGE, dict(
            send.to_v2_ext_fields(), m="true"), batch),
        RequestCode.PULL_MESSAGE: b(RequestCode.PULL_MESSAGE, pull.to_ext_fields()),
        RequestCode.QUERY_MESSAGE: b(RequestCode.QUERY_MESSAGE, QueryMessageRequestHeader(
            KEEP_TOPIC, "k1", 32, 0, 2**62).to_ext_fields()),
        RequestCode.QUERY_CONSUMER_OFFSET: b(RequestCode.QUERY_CONSUMER_OFFSET, {**q, **group}),
        RequestCode.UPDATE_CONSUMER_OFFSET: b(RequestCode.UPDATE_CONSUMER_OFFSET, {
            **group, "topic": SCRATCH_TOPIC, "queueId": "0", "commitOffset": "3"}),
        RequestCode.UPDATE_AND_CREATE_TOPIC: b(RequestCode.UPDATE_AND_CREATE_TOPIC,
                                               CreateTopicRequestHeader(
                                                   f"{SCRATCH_TOPIC}T{rng.randrange(5)}", "TBW102",
                                                   2, 2).to_ext_fields()),
        RequestCode.GET_ALL_TOPIC_CONFIG: b(RequestCode.GET_ALL_TOPIC_CONFIG, {})
        if rng.random() < 0.5 else  # a page, as a slave asks (topicSeq, maxTopicNum, dataVersion)
        b(RequestCode.GET_ALL_TOPIC_CONFIG, GetAllTopicConfigRequestHeader(
            rng.randrange(20), '{"timestamp":1,"counter":2}', rng.randrange(1, 10)).to_ext_fields()),
        RequestCode.GET_BROKER_RUNTIME_INFO: b(RequestCode.GET_BROKER_RUNTIME_INFO, {}),
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: b(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                                  {**q, "timestamp": str(int(time.time() * 1000))}),
        RequestCode.GET_MAX_OFFSET: b(RequestCode.GET_MAX_OFFSET, q),
        RequestCode.GET_MIN_OFFSET: b(RequestCode.GET_MIN_OFFSET, q),
        RequestCode.GET_EARLIEST_MSG_STORETIME: b(RequestCode.GET_EARLIEST_MSG_STORETIME, q),
        RequestCode.VIEW_MESSAGE_BY_ID: b(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}),
        RequestCode.HEART_BEAT: b(RequestCode.HEART_BEAT, {}, _heartbeat(rng)),
        RequestCode.UNREGISTER_CLIENT: b(RequestCode.UNREGISTER_CLIENT, {
            "clientID": "fuzz-client@1", "producerGroup": "FuzzProducer", **group}),
        RequestCode.CONSUMER_SEND_MSG_BACK: b(RequestCode.CONSUMER_SEND_MSG_BACK,
                                              back.to_ext_fields()),
        RequestCode.END_TRANSACTION: b(RequestCode.END_TRANSACTION, end.to_ext_fields()),
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: b(RequestCode.GET_CONSUMER_LIST_BY_GROUP, group),
        RequestCode.CHECK_CLIENT_CONFIG: b(RequestCode.CHECK_CLIENT_CONFIG, {}, CheckClientRequestBody(
            "fuzz-client@1", SCRATCH_GROUP,
            SubscriptionData(SCRATCH_TOPIC, "a > 5 AND b IN ('x', 'y')", expression_type="SQL92"),
        ).to_json()),
        RequestCode.LOCK_BATCH_MQ: b(RequestCode.LOCK_BATCH_MQ, {}, lock),
        RequestCode.UNLOCK_BATCH_MQ: b(RequestCode.UNLOCK_BATCH_MQ, {}, lock),
        RequestCode.GET_ALL_CONSUMER_OFFSET: b(RequestCode.GET_ALL_CONSUMER_OFFSET, {}),
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: b(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, orjson.dumps({
                "groupName": f"{SCRATCH_GROUP}{rng.randrange(3)}", "retryQueueNums": 1,
                "retryMaxTimes": 3, "brokerId": 0})),
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: b(
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}),
        RequestCode.GET_TOPIC_STATS_INFO: b(RequestCode.GET_TOPIC_STATS_INFO, {"topic": KEEP_TOPIC}),
        RequestCode.GET_CONSUMER_CONNECTION_LIST: b(RequestCode.GET_CONSUMER_CONNECTION_LIST, group),
        RequestCode.DELETE_SUBSCRIPTIONGROUP: b(RequestCode.DELETE_SUBSCRIPTIONGROUP, {
            "groupName": f"{SCRATCH_GROUP}{rng.randrange(3)}", "removeOffset": "true"}),
        RequestCode.GET_CONSUME_STATS: b(RequestCode.GET_CONSUME_STATS, {**group,
                                                                         "topic": KEEP_TOPIC}),
        RequestCode.DELETE_TOPIC_IN_BROKER: b(RequestCode.DELETE_TOPIC_IN_BROKER, {
            "topic": f"{SCRATCH_TOPIC}T{rng.randrange(5)}"}),
        RequestCode.GET_CONSUMER_RUNNING_INFO: b(RequestCode.GET_CONSUMER_RUNNING_INFO, {
            **group, "clientId": "fuzz-nobody", "jstackEnable": "false"}),
        OrbitMQRequestCode.LIST_PENDING_TRANSACTIONS: b(
            OrbitMQRequestCode.LIST_PENDING_TRANSACTIONS, {"limit": "10"}),
        OrbitMQRequestCode.PULL_MESSAGE_BULK: b(OrbitMQRequestCode.PULL_MESSAGE_BULK,
                                                pull.to_ext_fields()),
        **_batch_requests(ctx, rng),
        **_ops_requests(rng),
        **_auth_requests(rng),
    }


def _batch_requests(ctx: Context, rng: random.Random) -> dict[int, Callable[[], Request]]:
    """Transactions by the batch (issue 19), to the scratch topic: nothing they store can reach
    the protected one."""
    n = next(ctx.counter)
    entries = [(0, f"tx-{n}-{i}".encode(), {"UNIQ_KEY": f"FUZZ{n}X{i}", "KEYS": "bk"})
               for i in range(rng.randrange(1, 4))]
    send = SendTransactionBatchRequestHeader("FuzzProducer", SCRATCH_TOPIC, rng.randrange(-1, 4),
                                             int(time.time() * 1000), len(entries),
                                             f"UNIQ_KEY\x01FUZZTX{n}\x02")
    end = EndTransactionBatchRequestHeader("FuzzProducer", rng.randrange(3),
                                           rng.choice(ctx.offsets), rng.choice(VERDICTS),
                                           f"FUZZTX{rng.randrange(n + 1)}", rng.random() < 0.3)
    return {
        OrbitMQRequestCode.SEND_TRANSACTION_BATCH: _builder(
            OrbitMQRequestCode.SEND_TRANSACTION_BATCH, send.to_ext_fields(), encode_batch(entries)),
        OrbitMQRequestCode.END_TRANSACTION_BATCH: _builder(
            OrbitMQRequestCode.END_TRANSACTION_BATCH, end.to_ext_fields()),
    }


def _auth_requests(rng: random.Random) -> dict[int, Callable[[], Request]]:
    """Users and ACLs (RocketMQ 5's codes 3001-3010 and the slaves' copy), scratch users only."""
    b, c = _builder, AuthRequestCode
    name = f"fuzzuser{rng.randrange(4)}"
    user = {"username": name}
    info = orjson.dumps({"username": name, "password": f"fuzz-pass-{rng.randrange(9)}",
                         "userType": rng.choice(["Normal", "Super"]),
                         "userStatus": rng.choice(["enable", "disable"])})
    subject = {"subject": f"User:{name}"}
    acl = orjson.dumps({"subject": f"User:{name}", "policies": [{"policyType": "Custom",
                        "entries": [{"resource": f"Topic:{SCRATCH_TOPIC}*",
                                     "actions": ["Pub", "Sub"], "decision": "Allow",
                                     "sourceIps": ["10.0.0.0/8"]}]}]})
    return {
        c.AUTH_CREATE_USER: b(c.AUTH_CREATE_USER, user, info),
        c.AUTH_UPDATE_USER: b(c.AUTH_UPDATE_USER, user, info),
        c.AUTH_DELETE_USER: b(c.AUTH_DELETE_USER, user),
        c.AUTH_GET_USER: b(c.AUTH_GET_USER, user),
        c.AUTH_LIST_USER: b(c.AUTH_LIST_USER, {"filter": "fuzz"}),
        c.AUTH_CREATE_ACL: b(c.AUTH_CREATE_ACL, subject, acl),
        c.AUTH_UPDATE_ACL: b(c.AUTH_UPDATE_ACL, subject, acl),
        c.AUTH_DELETE_ACL: b(c.AUTH_DELETE_ACL, {**subject, "resource": f"Topic:{SCRATCH_TOPIC}*"}),
        c.AUTH_GET_ACL: b(c.AUTH_GET_ACL, subject),
        c.AUTH_LIST_ACL: b(c.AUTH_LIST_ACL, {"subjectFilter": "fuzz"}),
        c.GET_AUTH_METADATA: b(c.GET_AUTH_METADATA, {}),
    }


def _ops_requests(rng: random.Random) -> dict[int, Callable[[], Request]]:
    """The operations requests (issue 17); the config update only touches a harmless setting."""
    b, group = _builder, {"consumerGroup": SCRATCH_GROUP}
    return {
        RequestCode.GET_BROKER_CONFIG: b(RequestCode.GET_BROKER_CONFIG, {}),
        RequestCode.UPDATE_BROKER_CONFIG: b(RequestCode.UPDATE_BROKER_CONFIG, {},
                                            f"deleteFileBatchMax={rng.randrange(1, 20)}\n"
                                            .encode()),
        RequestCode.VIEW_BROKER_STATS_DATA: b(RequestCode.VIEW_BROKER_STATS_DATA, {
            "statsName": rng.choice(["TOPIC_PUT_NUMS", "GROUP_GET_SIZE", "BROKER_PUT_NUMS"]),
            "statsKey": rng.choice([KEEP_TOPIC, f"{KEEP_TOPIC}@{SCRATCH_GROUP}", "DefaultCluster"])}),
        RequestCode.GET_BROKER_CONSUME_STATS: b(RequestCode.GET_BROKER_CONSUME_STATS, {
            "isOrder": rng.choice(["true", "false"])}),
        RequestCode.GET_PRODUCER_CONNECTION_LIST: b(RequestCode.GET_PRODUCER_CONNECTION_LIST, {
            "producerGroup": "FuzzProducer"}),
        RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: b(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {
            "topic": KEEP_TOPIC}),
        RequestCode.QUERY_CONSUME_TIME_SPAN: b(RequestCode.QUERY_CONSUME_TIME_SPAN, {
            "topic": KEEP_TOPIC, "group": SCRATCH_GROUP}),
        RequestCode.CLONE_GROUP_OFFSET: b(RequestCode.CLONE_GROUP_OFFSET, {
            "srcGroup": SCRATCH_GROUP, "destGroup": f"{SCRATCH_GROUP}{rng.randrange(3)}",
            "offline": "true"}),
        RequestCode.GET_ALL_DELAY_OFFSET: b(RequestCode.GET_ALL_DELAY_OFFSET, {}),
        RequestCode.EXPORT_ROCKSDB_CONFIG_TO_JSON: b(RequestCode.EXPORT_ROCKSDB_CONFIG_TO_JSON, {
            "configType": rng.choice(["topics", "topics;consumerOffsets;", "delayOffsets"])}),
        RequestCode.GET_BROKER_HA_STATUS: b(RequestCode.GET_BROKER_HA_STATUS, {}),
        RequestCode.QUERY_CONSUME_QUEUE: b(RequestCode.QUERY_CONSUME_QUEUE, {
            **group, "topic": KEEP_TOPIC, "queueId": str(rng.randrange(KEEP_QUEUES)),
            "index": str(rng.randrange(8)), "count": str(rng.randrange(1, 40))}),
    }


def served_codes(tmp: Path) -> dict[str, set[int]]:
    """The request codes a broker and a name server register handlers for (nothing started)."""
    store = StoreConfig(store_path=str(tmp / "codes"))
    broker = build_broker(BrokerConfig(listen_port=0, grpc_listen_port=0, store=store))
    namesrv = NameServer(NamesrvConfig(listen_port=0))
    return {"broker": set(broker.server._handlers), "namesrv": set(namesrv.server._handlers)}


# ------------------------------------------------------------------------------ fuzzing
@dataclass
class Report:
    sent: int = 0
    answered: int = 0
    held_pulls: int = 0
    codes: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def check_answer(req: Request, resp: RemotingCommand | None, report: Report) -> None:
    """The oracle for one request (see the module docstring)."""
    report.sent += 1
    if resp is None:
        if req.code in _PULL_CODES:
            report.held_pulls += 1
        else:
            report.failures.append(f"no answer to code {req.code} {req.mutations}")
        return
    report.answered += 1
    report.codes[resp.code] = report.codes.get(resp.code, 0) + 1
    if resp.remark and INTERNAL.search(resp.remark):
        report.failures.append(f"code {req.code} {req.mutations} -> {resp.code}: "
                               f"{resp.remark[:300]}")


# One fuzzed request from a valid one: what to send, and the response code it must get (None:
# any, as long as the oracle holds).
Prepare = Callable[[random.Random, Request], tuple[Request, int | None]]


def _mutated(rng: random.Random, req: Request) -> tuple[Request, int | None]:
    return mutate(rng, req), None


async def fuzz(rng: random.Random, addrs: dict[str, str], ctx: Context, budget: int, *,
               prepare: Prepare = _mutated, time_max_s: float = FUZZ_TIME_MAX_S) -> Report:
    """``budget`` requests made by ``prepare`` over CONNECTIONS connections to each server,
    stopping at ``time_max_s``."""
    report = Report()
    clients = {role: [await RawClient().connect(addrs[role]) for _ in range(CONNECTIONS)]
               for role in ("broker", "namesrv")}
    deadline = time.monotonic() + time_max_s
    requests = iter(range(budget))

    async def worker(index: int) -> None:
        wrng = random.Random(rng.random())
        for _ in requests:
            if time.monotonic() > deadline:
                return
            builders = valid_requests(ctx, wrng)
            req, must = prepare(wrng, builders[wrng.choice(sorted(builders))]())
            client = clients[req.target][index % CONNECTIONS]
            wait = HELD_PULL_WAIT_S if req.code in _PULL_CODES else ANSWER_WAIT_S
            try:
                resp = await client.request(req, wait, binary=wrng.random() < 0.1)
            except ConnectionError:
                report.failures.append(f"connection closed by code {req.code} {req.mutations}")
                clients[req.target][index % CONNECTIONS] = await RawClient().connect(
                    addrs[req.target])
                continue
            check_answer(req, resp, report)
            if must is not None and resp is not None and resp.code != must:
                report.failures.append(f"code {req.code} {req.mutations} -> {resp.code} "
                                       f"(must be {must}): {resp.remark}")

    try:
        await asyncio.gather(*(worker(i) for i in range(CONNECTIONS * IN_FLIGHT_MAX)))
    finally:
        for conns in clients.values():
            for c in conns:
                await c.close()
    return report


# ------------------------------------------------------------------------------ valid traffic
async def send_keep(broker: str, bodies: list[bytes], creds: Credentials | None = None
                    ) -> list[str]:
    """Valid sends to the protected topic, round robin over its queues; their msg ids."""
    client = await RawClient(creds).connect(broker)
    ids = []
    try:
        for i, body in enumerate(bodies):
            header = _send_header(KEEP_TOPIC, i % KEEP_QUEUES, f"KEYS\x01k{i}\x02TAGS\x01t\x02")
            resp = await client.request(Request("broker", RequestCode.SEND_MESSAGE_V2,
                                                header.to_v2_ext_fields(), body), ANSWER_WAIT_S)
            assert resp is not None and resp.code == ResponseCode.SUCCESS, resp
            ids.append(resp.ext_fields["msgId"])
    finally:
        await client.close()
    return ids


async def invoke(addr: str, code: int, fields: dict[str, str], body: bytes = b"",
                 creds: Credentials | None = None) -> RemotingCommand:
    client = await RawClient(creds).connect(addr)
    try:
        resp = await client.request(Request("broker", code, fields, body), ANSWER_WAIT_S)
    finally:
        await client.close()
    assert resp is not None, f"no answer to {code}"
    return resp


async def setup_keep(broker: str, creds: Credentials | None = None) -> None:
    """The protected topics and offsets (the messages come from send_keep)."""
    create = CreateTopicRequestHeader(KEEP_TOPIC, "TBW102", KEEP_QUEUES, KEEP_QUEUES)
    for header in (create, CreateTopicRequestHeader(KEEP_ADMIN_TOPIC, "TBW102", 3, 3, perm=4,
                                                    topic_filter_type="MULTI_TAG", order=True)):
        resp = await invoke(broker, RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields(),
                            creds=creds)
        assert resp.code == ResponseCode.SUCCESS, resp.remark


async def commit_keep_offsets(broker: str, creds: Credentials | None = None) -> dict[int, int]:
    offsets = {qid: qid + 1 for qid in range(KEEP_QUEUES)}
    for qid, offset in offsets.items():
        resp = await invoke(broker, RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": KEEP_GROUP, "topic": KEEP_TOPIC, "queueId": str(qid),
            "commitOffset": str(offset)}, creds=creds)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    return offsets


async def snapshot(broker: str, creds: Credentials | None = None
                   ) -> tuple[list[bytes], dict[int, int], dict[str, TopicConfig]]:
    """Every body in the protected topic, the protected group's offsets, every topic."""
    bodies: list[bytes] = []
    for qid in range(KEEP_QUEUES):
        offset = 0
        for _ in range(1000):
            fields = PullMessageRequestHeader("FuzzReader", KEEP_TOPIC, qid, offset, 32, 4, 0, 0,
                                              "*").to_ext_fields()
            resp = await invoke(broker, RequestCode.PULL_MESSAGE, fields, creds=creds)
            if resp.code != ResponseCode.SUCCESS:
                assert resp.code == ResponseCode.PULL_NOT_FOUND, (resp.code, resp.remark)
                break
            bodies += [bytes(m.body) for m in iter_stored_messages(resp.body)]
            offset = int(resp.ext_fields["nextBeginOffset"])
    offsets = {}
    for qid in range(KEEP_QUEUES):
        resp = await invoke(broker, RequestCode.QUERY_CONSUMER_OFFSET, {
            "consumerGroup": KEEP_GROUP, "topic": KEEP_TOPIC, "queueId": str(qid)}, creds=creds)
        offsets[qid] = int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1
    resp = await invoke(broker, RequestCode.GET_ALL_TOPIC_CONFIG, {}, creds=creds)
    topics = TopicConfigSerializeWrapper.from_json(resp.body).topic_config_table
    return sorted(bodies), offsets, topics


def _seed() -> int:
    return int(os.environ.get("ORBITMQ_FUZZ_SEED") or random.SystemRandom().randrange(2**32))


def _standalone(store: Path) -> tuple[ServerProcess, dict[str, str]]:
    """``orbitmq standalone`` (a child process) on ``store``, and its addresses by role."""
    child = standalone_process(str(store), *STANDALONE_FLAGS)
    return child, child.wait_ready("namesrv", "broker")


def test_wire_fuzz(tmp_path: Path) -> None:
    seed = _seed()
    budget = int(os.environ.get("ORBITMQ_FUZZ_REQUESTS") or FUZZ_REQUESTS_DEFAULT)
    print(f"wire fuzz seed={seed} requests={budget} (replay: ORBITMQ_FUZZ_SEED={seed})")
    rng = random.Random(seed)
    store = tmp_path / "store"
    served = served_codes(tmp_path)
    builders = valid_requests(Context([0], ["0" * 32]), rng)
    for role, codes in served.items():
        covered = {code for code, make in builders.items() if make().target == role}
        assert codes == covered, f"{role}: served but not fuzzed {codes - covered}"
    logs: list[str] = []
    child, addrs = _standalone(store)
    try:
        asyncio.run(setup_keep(addrs["broker"]))
        before = [f"keep-before-{i}".encode() for i in range(40)]
        ids = asyncio.run(send_keep(addrs["broker"], before))
        offsets = asyncio.run(commit_keep_offsets(addrs["broker"]))
        _, _, topics_before = asyncio.run(snapshot(addrs["broker"]))
        ctx = Context([decode_offset_msg_id(i)[2] for i in ids], ids)
        started = time.monotonic()
        report = asyncio.run(fuzz(rng, addrs, ctx, budget))
        print(f"fuzzed {report.sent} requests in {time.monotonic() - started:.1f}s: "
              f"answered {report.answered}, pulls held {report.held_pulls}, codes {report.codes}")
        after = [f"keep-after-{i}".encode() for i in range(40)]
        asyncio.run(send_keep(addrs["broker"], after))
        assert child.stop() == 0, child.output()[-3000:]
    finally:
        child.kill()
        logs.append(child.output())
    assert not report.failures, (f"seed {seed}: {len(report.failures)} failures, first: "
                                 + "\n".join(report.failures[:15]))
    assert report.sent >= min(budget, 1000), f"seed {seed}: only {report.sent} requests in time"
    expected = sorted(before + after)

    def verify(addrs: dict[str, str], extra: list[bytes]) -> None:
        bodies, got_offsets, topics = asyncio.run(snapshot(addrs["broker"]))
        want = sorted(expected + extra)
        assert bodies == want, (f"seed {seed}: stored messages differ: missing "
                                f"{sorted(set(want) - set(bodies))[:5]}, unexpected "
                                f"{[b for b in bodies if bodies.count(b) > want.count(b)][:5]}")
        assert got_offsets == offsets, f"seed {seed}: committed offsets {got_offsets}"
        for name, tc in topics_before.items():
            if not name.startswith("Fuzz") or name.startswith("FuzzKeep"):
                assert topics.get(name) == tc, f"seed {seed}: topic {name} changed"

    child, addrs = _standalone(store)  # after a clean stop
    try:
        verify(addrs, [])
        more = [f"keep-restarted-{i}".encode() for i in range(10)]
        asyncio.run(send_keep(addrs["broker"], more))
        child.kill()  # kill -9: acknowledged sends are in the page cache, tables saved before
        logs.append(child.output())
        child, addrs = _standalone(store)
        verify(addrs, more)
        assert child.stop() == 0
    finally:
        child.kill()
        logs.append(child.output())
    for log in logs:
        assert "Traceback" not in log, f"seed {seed}: a traceback in the server log:\n{log[-5000:]}"


# ------------------------------------------------------------------------------ verdicts
def _verdict_value(rng: random.Random) -> Any:
    """A commitOrRollback value: next to a verdict (a bit flipped, a step), any small number, one
    of the general mutations' values, or a valid verdict spelled as clients spell numbers."""
    kind = rng.randrange(4)
    if kind == 0:
        return neighbour(rng, rng.choice(VERDICTS))
    if kind == 1:
        number = rng.randrange(-2, 17)
        return str(number) if rng.random() < 0.7 else number
    if kind == 2:
        return rng.choice([*VERDICTS, *map(str, VERDICTS), " 8 ", "\u0661\u0662", 8.0, 4.0,
                           True, False, None, ""])
    return mutate(rng, Request("broker", 0, {"commitOrRollback": "8"})).fields.get(
        "commitOrRollback")


def _verdict_refused(value: Any, binary: bool) -> bool:
    """Whether the broker must refuse this commitOrRollback, as it reads it (a binary header
    carries text only: RawClient writes other values as their JSON)."""
    if binary and value is not None and not isinstance(value, str):
        value = json_text(value)
    if value is None or isinstance(value, str) and not value.strip():
        return True  # absent: the field is required
    try:
        return parse_int(value, "commitOrRollback") not in VERDICTS
    except RemoteProtocolError:
        return True


async def _send_halves(broker: str, count: int) -> list[tuple[int, int, str]]:
    """Half messages of a scratch topic: (commit log offset, half queue offset, offset msg id)."""
    client = await RawClient().connect(broker)
    halves = []
    try:
        for i in range(count):
            header = _send_header(SCRATCH_TOPIC, 0, f"TRAN_MSG\x01true\x02PGROUP\x01FuzzProducer"
                                  f"\x02UNIQ_KEY\x01FUZZHALF{i}\x02")
            resp = await client.request(Request("broker", RequestCode.SEND_MESSAGE_V2,
                                                header.to_v2_ext_fields(), b"half"), ANSWER_WAIT_S)
            assert resp is not None and resp.code == ResponseCode.SUCCESS, resp
            msg_id = resp.ext_fields["msgId"]
            halves.append((decode_offset_msg_id(msg_id)[2], int(resp.ext_fields["queueOffset"]),
                           msg_id))
    finally:
        await client.close()
    return halves


async def fuzz_verdicts(rng: random.Random, broker: str, budget: int) -> Report:
    """``budget`` requests carrying a verdict (END_TRANSACTION from a producer or answering a
    check, END_TRANSACTION_BATCH) on real half messages, commitOrRollback fuzzed; an
    out-of-set value must be answered INVALID_PARAMETER naming the field."""
    report = Report()
    halves = await _send_halves(broker, 8)
    client = await RawClient().connect(broker)

    async def one() -> None:
        offset, queue_offset, msg_id = rng.choice(halves)
        check = rng.random() < 0.5
        if rng.random() < 0.7:
            code: int = RequestCode.END_TRANSACTION
            fields: dict[str, Any] = EndTransactionRequestHeader(
                "FuzzProducer", queue_offset, offset, 8, msg_id, check, msg_id).to_ext_fields()
        else:
            code = OrbitMQRequestCode.END_TRANSACTION_BATCH
            fields = EndTransactionBatchRequestHeader("FuzzProducer", queue_offset, offset, 8,
                                                      msg_id, check).to_ext_fields()
        value, binary = _verdict_value(rng), rng.random() < 0.3
        fields["commitOrRollback"] = value
        req = Request("broker", code, fields, b"", [f"commitOrRollback={value!r}"
                                                    f"{' binary' if binary else ''}"])
        resp = await client.request(req, ANSWER_WAIT_S, binary=binary)
        check_answer(req, resp, report)
        if resp is not None and _verdict_refused(value, binary) and (
                resp.code != ResponseCode.INVALID_PARAMETER or "commitOrRollback" not in resp.remark):
            report.failures.append(f"code {code} {req.mutations} -> {resp.code}: {resp.remark}")

    try:
        for start in range(0, budget, IN_FLIGHT_MAX):
            await asyncio.gather(*(one() for _ in range(min(IN_FLIGHT_MAX, budget - start))))
    finally:
        await client.close()
    return report


def test_verdicts_fuzzed(tmp_path: Path) -> None:
    """Every header that carries a transaction verdict refuses values outside 0/8/12 at its
    parser: none reaches the handler (whose table of verdicts has no other key)."""
    seed = _seed()
    print(f"verdict fuzz seed={seed} (replay: ORBITMQ_FUZZ_SEED={seed})")
    rng = random.Random(seed)
    child, addrs = _standalone(tmp_path / "store")
    try:
        report = asyncio.run(fuzz_verdicts(rng, addrs["broker"], VERDICT_FUZZ_REQUESTS))
        print(f"fuzzed {report.sent} verdicts: codes {report.codes}")
        assert child.stop() == 0, child.output()[-3000:]
    finally:
        child.kill()
    assert not report.failures, (f"seed {seed}: {len(report.failures)} failures, first: "
                                 + "\n".join(report.failures[:15]))
    assert report.codes.get(ResponseCode.INVALID_PARAMETER, 0) > VERDICT_FUZZ_REQUESTS // 10
    assert "Traceback" not in child.output(), f"seed {seed}: {child.output()[-5000:]}"
