"""A campaign whose answer was lost: etcd took the transaction (the state of a new epoch and a
master key naming the member, on its lease, without an HA address yet) but the reply never came
back, as a one-way cut from etcd to the broker (or a request timeout racing etcd's commit) does.
The member is not master; the record naming it lives on its own lease, which its renewals keep
alive. It must resign that record and be elected again, not wait for ever on a "starting" master
that is itself (which kept every member of the set waiting: no master, no writes, for good).

Real etcd and a real broker; the record is written as the lost transaction left it.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from pathlib import Path

import pytest

from orbitmq.broker.failover.rules import MasterRecord, SetState
from orbitmq.broker.failover.service import key_prefix
from orbitmq.testing.etcd import EtcdCluster, etcd_binary
from orbitmq.testing.failover_set import FailoverSet, wait_for
from orbitmq.testing.waits import READY_WAIT_S

pytestmark = pytest.mark.skipif(etcd_binary() is None,
                                reason="etcd is not installed (Debian: apt-get install etcd-server)")

SET = "broker-a"
EPOCH = 5


def etcd_call(endpoint: str, path: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(f"http://{endpoint}{path}", data=json.dumps(body).encode(),
                                     method="POST")
    with urllib.request.urlopen(request, timeout=10) as resp:
        answer: dict[str, object] = json.loads(resp.read())
    return answer


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_member_named_master_by_a_campaign_it_never_heard_won_resigns_and_is_elected(
        tmp_path: Path) -> None:
    prefix = key_prefix("DefaultCluster", SET)
    with EtcdCluster(1, root=tmp_path) as etcd:
        endpoint = etcd.nodes[0].client_addr
        # A set whose in-sync set is another member: member 1 waits, not eligible, and
        # publishes its record on its lease.
        before = SetState(EPOCH, 7, frozenset({7}), ((EPOCH, 0),))
        etcd_call(endpoint, "/v3/kv/put", {"key": b64(prefix + b"state"),
                                           "value": b64(before.to_json())})
        with FailoverSet(tmp_path / "brokers", etcd.endpoints, members=1, name=SET) as brokers:
            def member_lease() -> str | None:
                answer = etcd_call(endpoint, "/v3/kv/range",
                                   {"key": b64(prefix + b"members/1")})
                kvs = answer.get("kvs") or []
                assert isinstance(kvs, list)
                return str(kvs[0].get("lease")) if kvs and kvs[0].get("lease") else None
            lease = wait_for(member_lease, "member 1's record on its lease", READY_WAIT_S)
            # What member 1's lost campaign left: the new state naming it, and the master key
            # on its lease with no HA address (it never became master, so never published one).
            won = SetState(EPOCH, 1, frozenset({1}), ((EPOCH, 0),))
            record = MasterRecord(EPOCH, 1, brokers.addresses[1], "")
            etcd_call(endpoint, "/v3/kv/txn", {"success": [
                {"request_put": {"key": b64(prefix + b"state"), "value": b64(won.to_json())}},
                {"request_put": {"key": b64(prefix + b"master"), "value": b64(record.to_json()),
                                 "lease": lease}}]})
            master = brokers.wait_master(epoch_above=EPOCH, in_sync=1, timeout=READY_WAIT_S)
            assert master.member == 1 and master.ha_addr
            assert "resigned as master of epoch 5" in brokers.brokers[1].output()
