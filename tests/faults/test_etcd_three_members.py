"""A three-member etcd cluster (testing/etcd.py), as the controller chaos cluster runs it: the
leader killed and a new one elected, the old one rejoining; and, in network namespaces the test
makes, one member cut away from the other two (majority/minority): the majority keeps (or
elects) a leader and takes writes, the member cut off takes none until healed.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from orbitmq.testing.etcd import EtcdCluster, EtcdNode, etcd_binary
from orbitmq.testing.failover_set import wait_for
from orbitmq.testing.netns import NetLab, netns_problem
from orbitmq.testing.waits import READY_WAIT_S

pytestmark = pytest.mark.skipif(etcd_binary() is None,
                                reason="etcd is not installed (Debian: apt-get install etcd-server)")

ELECTION_WAIT_S = 30.0  # etcd's election timeout is 1 s here; a loaded machine, longer
PUT_TIMEOUT_S = 3.0


def put(node: EtcdNode, key: str, value: str, timeout: float = PUT_TIMEOUT_S) -> bool:
    """Whether ``node`` commits a put within ``timeout`` (a member without a quorum cannot)."""
    body = json.dumps({"key": base64.b64encode(key.encode()).decode(),
                       "value": base64.b64encode(value.encode()).decode()}).encode()
    request = urllib.request.Request(f"http://{node.client_addr}/v3/kv/put", data=body,
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return "header" in json.loads(resp.read())
    except (OSError, urllib.error.URLError, ValueError):
        return False


def test_the_leader_killed_a_new_one_is_elected_and_the_old_one_rejoins(tmp_path: Path) -> None:
    with EtcdCluster(3, root=tmp_path) as etcd:
        old = wait_for(etcd.leader, "a leader", ELECTION_WAIT_S)
        old.kill()
        new = wait_for(lambda: (lead if (lead := etcd.leader()) not in (None, old) else None),
                       "a new leader", ELECTION_WAIT_S)
        assert put(new, "after", "the leader died")
        etcd.restart(old)
        etcd.wait_healthy(timeout=READY_WAIT_S)
        assert etcd.leader() is not None
        assert put(old, "rejoined", "yes")  # a follower again: it forwards to the leader


@pytest.mark.skipif(netns_problem() is not None, reason=str(netns_problem()))
def test_a_member_cut_off_is_a_minority_and_the_majority_keeps_a_leader(tmp_path: Path) -> None:
    names = ["e1", "e2", "e3"]
    with NetLab(names) as lab, EtcdCluster(3, hosts=[lab.addr[n] for n in names],
                                           prefixes=[lab.prefix[n] for n in names],
                                           root=tmp_path) as etcd:
        leader = wait_for(etcd.leader, "a leader", ELECTION_WAIT_S)
        cut = names[etcd.nodes.index(leader)]
        # The leader apart: the two others elect one of them and take writes; it takes none.
        lab.cut_between([cut], [n for n in names if n != cut])
        new = wait_for(lambda: (lead if (lead := etcd.leader()) not in (None, leader) else None),
                       "a leader among the majority", ELECTION_WAIT_S)
        assert put(new, "majority", "writes")
        assert not put(leader, "minority", "no quorum")
        lab.heal()
        etcd.wait_healthy(timeout=READY_WAIT_S)
        # A follower apart: the leader keeps its place and its writes. The member just healed
        # names a leader before it has caught up (or forces an election): wait until all three
        # name one leader in one term (EtcdCluster.agreed_leader).
        leader = wait_for(etcd.agreed_leader, "one leader all three name", ELECTION_WAIT_S)
        follower = next(n for n in etcd.nodes if n is not leader)
        lab.cut_between([names[etcd.nodes.index(follower)]],
                        [n for n in names if n != names[etcd.nodes.index(follower)]])
        assert put(leader, "still", "leader")
        assert etcd.leader() is leader
        assert not put(follower, "cut-off", "follower")
        lab.heal()
        wait_for(etcd.agreed_leader, "one leader all three name after the heal", ELECTION_WAIT_S)
        assert put(follower, "healed", "follower")
