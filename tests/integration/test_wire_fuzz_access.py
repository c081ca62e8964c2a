"""The seeded wire fuzzer (test_wire_fuzz.py) against ``orbitmq standalone`` with authentication
and authorization on, its mutations reaching the credentials too.

Each request starts valid, for any code either server serves, and then one of:

- signed by the Super user, then mutated as the plain fuzzer mutates (the signature no longer
  covers what is sent);
- mutated, then signed by the Super user (a well-signed hostile request: the plain oracle);
- signed by the Super user, then its AccessKey, Signature or SecurityToken replaced by a
  fuzzed value, dropped, or given an extra SecurityToken: it must be refused with NO_PERMISSION;
- signed by a Normal user whose rules allow only the scratch topic and group.

The oracle is the plain fuzzer's (no internal exception reaches a client, every request is
answered, no traceback in the log) plus: credential mutations are always NO_PERMISSION, and the
protected topic's messages, its group's offsets, the protected topics and the users survive.
``ORBITMQ_FUZZ_SEED=N`` replays a run.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from pathlib import Path

import orjson
from test_wire_fuzz import (
    SCRATCH_GROUP,
    SCRATCH_TOPIC,
    STANDALONE_FLAGS,
    Context,
    _seed,
    commit_keep_offsets,
    fuzz,
    invoke,
    send_keep,
    setup_keep,
    snapshot,
)
from wire_fuzz_support import Request, _value, mutate, signed, wire_text

from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.msgid import decode_offset_msg_id
from orbitmq.security import AuthRequestCode, Credentials
from orbitmq.testing.process import standalone_process

ROOT = Credentials("root", "root-secret-1")
NORMAL = Credentials("fuzzer", "fuzzer-secret-1")
ACCESS_FLAGS = ("--authentication-enabled", "true", "--authorization-enabled", "true",
                "--init-authentication-user",
                json.dumps({"username": ROOT.access_key, "password": ROOT.secret_key}))
FUZZ_REQUESTS_DEFAULT = 20_000
FUZZ_TIME_MAX_S = 15.0
_CREDENTIAL_FIELDS = ("AccessKey", "Signature", "SecurityToken")


def prepare(rng: random.Random, req: Request) -> tuple[Request, int | None]:
    roll = rng.random()
    if roll < 0.3:
        return mutate(rng, signed(req, ROOT)), None
    if roll < 0.55:
        return signed(mutate(rng, req), ROOT), None
    if roll < 0.85:
        fields = dict(signed(req, ROOT).fields)
        key = rng.choice(_CREDENTIAL_FIELDS)
        if key in fields and rng.random() < 0.3:
            del fields[key]
            change = f"-{key}"
        else:
            fields[key] = _value(rng)
            change = f"{key}={str(fields[key])[:40]!r}"
        if key == "AccessKey" and fields.get(key) == ROOT.access_key:  # fuzzed into itself
            return Request(req.target, req.code, fields, req.body, [change]), None
        if key == "SecurityToken" and not wire_text(fields.get(key)):
            # An empty or null token adds nothing to what the signature covers: still valid.
            return Request(req.target, req.code, fields, req.body, [change]), None
        return (Request(req.target, req.code, fields, req.body, [change]),
                ResponseCode.NO_PERMISSION)
    return Request(**{**signed(req, NORMAL).__dict__, "mutations": ["normal user"]}), None


def test_wire_fuzz_with_access_control(tmp_path: Path) -> None:
    seed = _seed()
    budget = int(os.environ.get("ORBITMQ_FUZZ_REQUESTS") or FUZZ_REQUESTS_DEFAULT)
    print(f"access wire fuzz seed={seed} requests={budget} (replay: ORBITMQ_FUZZ_SEED={seed})")
    rng = random.Random(seed)
    child = standalone_process(str(tmp_path / "store"), *STANDALONE_FLAGS, *ACCESS_FLAGS)
    try:
        addrs = child.wait_ready("namesrv", "broker")
        broker = addrs["broker"]

        async def set_up() -> tuple[list[str], dict[int, int]]:
            await setup_keep(broker, ROOT)
            for code, fields, body in (
                    (AuthRequestCode.AUTH_CREATE_USER, {"username": NORMAL.access_key},
                     {"username": NORMAL.access_key, "password": NORMAL.secret_key}),
                    (AuthRequestCode.AUTH_CREATE_ACL, {"subject": f"User:{NORMAL.access_key}"},
                     {"subject": f"User:{NORMAL.access_key}", "policies": [{"entries": [
                         {"resource": f"Topic:{SCRATCH_TOPIC}*", "actions": ["All"]},
                         {"resource": f"Group:{SCRATCH_GROUP}*", "actions": ["All"]}]}]})):
                resp = await invoke(broker, code, fields, orjson.dumps(body), creds=ROOT)
                assert resp.code == ResponseCode.SUCCESS, resp.remark
            ids = await send_keep(broker, [f"keep-{i}".encode() for i in range(20)], ROOT)
            return ids, await commit_keep_offsets(broker, ROOT)

        ids, offsets = asyncio.run(set_up())
        before = asyncio.run(snapshot(broker, ROOT))
        ctx = Context([decode_offset_msg_id(i)[2] for i in ids], ids)
        started = time.monotonic()
        report = asyncio.run(fuzz(rng, addrs, ctx, budget, prepare=prepare,
                                  time_max_s=FUZZ_TIME_MAX_S))
        print(f"fuzzed {report.sent} requests in {time.monotonic() - started:.1f}s: "
              f"answered {report.answered}, codes {report.codes}")
        bodies, got_offsets, topics = asyncio.run(snapshot(broker, ROOT))
        assert bodies == before[0], f"seed {seed}: the protected topic's messages changed"
        assert got_offsets == offsets, f"seed {seed}: committed offsets {got_offsets}"
        for name, tc in before[2].items():
            if not name.startswith("Fuzz") or name.startswith("FuzzKeep"):
                assert topics.get(name) == tc, f"seed {seed}: topic {name} changed"
        assert child.stop() == 0, child.output()[-3000:]
    finally:
        child.kill()
    assert not report.failures, (f"seed {seed}: {len(report.failures)} failures, first: "
                                 + "\n".join(report.failures[:15]))
    assert report.sent >= min(budget, 1000), f"seed {seed}: only {report.sent} requests in time"
    assert report.codes.get(ResponseCode.NO_PERMISSION, 0) > report.sent // 4
    assert "Traceback" not in child.output(), child.output()[-5000:]
