"""Random partitions and heals under load (issue 18 acceptance): three brokers in controller mode
(SYNC_MASTER), etcd and the name server, each in a network namespace the test makes
(testing/netns.py); two producers and a push consumer group (our SDK) in the test's own.

A seeded schedule (printed; ``ORBITMQ_SOAK_SEED=N`` replays it) cuts and heals links between two
brokers, between a broker and etcd, and between the clients and a broker, at most
``CUTS_MAX`` at a time, then heals everything. Producers record every SEND_OK with the epoch and
the store address of the broker that answered it; the group consumes throughout.

At the end: no acknowledged message is lost (everything is pulled from the last master), the
group consumed every one of them (by msg id, body intact), its duplicates are counted and stay
under :func:`duplicates_max`, and the history checker (testing/failover_history.py) finds no
two epochs acknowledging at overlapping times beyond the fencing margin. ``make test`` runs 12 s
of faults with one seed; ``--run-slow`` 60 s.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from test_failover_kill import read_all  # the same directory (pytest puts it on the path)

from orbitmq import ConsumeFrom, ConsumeResult, Message, Producer, PushConsumer, SendStatus
from orbitmq.errors import OrbitMQError
from orbitmq.testing.etcd import EtcdCluster, etcd_binary
from orbitmq.testing.failover_history import Ack, check_history, store_address
from orbitmq.testing.failover_set import FailoverSet, wait_for
from orbitmq.testing.netns import NetLab, netns_problem
from orbitmq.testing.process import ServerProcess

pytestmark = [
    pytest.mark.skipif(etcd_binary() is None,
                       reason="etcd is not installed (Debian: apt-get install etcd-server)"),
    pytest.mark.skipif(netns_problem() is not None, reason=str(netns_problem())),
]

TTL_S = 2
MARGIN_S = 0.5
PERSIST_S = 0.5  # the group commits its offsets this often
SLAVE_SYNC_S = 1.0  # slaves copy the master's consumer offsets this often (FailoverSet)
CUTS_MAX = 3  # links cut at once
HOLD_MIN_S, HOLD_MAX_S = 0.5, 3.5  # between two schedule steps
PRODUCERS = 2
SEND_PAUSE_S = 0.004  # between two sends of one producer: bounds the count (about 250/s each)
MESSAGES_MAX = 40_000  # the producers stop here whatever the schedule says
CONSUME_TIMEOUT_S = 120.0
BROKERS = ("b1", "b2", "b3")  # namespaces; member m runs in b<m>


# -- the schedule ---------------------------------------------------------------------------------
# Brokers are named by role, resolved when the step runs (and printed): M is the master etcd
# names then, S1 and S2 the other two in member order. A schedule of fixed names would mostly
# cut slaves; one of roles cuts the master as often as the others.
ROLES = ("M", "S1", "S2")
LINKS = ([(a, b) for i, a in enumerate(ROLES) for b in ROLES[i + 1:]]
         + [(r, "etcd") for r in ROLES] + [("root", r) for r in ROLES])


def schedule(seed: int, duration_s: float) -> list[tuple[float, str, str, str]]:
    """(at, "cut", a, b) and (at, "heal", a, b) steps over ``duration_s`` (a heal restores the
    link its cut resolved to), then ("heal", "*", "*") at ``duration_s``."""
    rng = random.Random(seed)
    cut: list[tuple[str, str]] = []
    steps: list[tuple[float, str, str, str]] = []
    at = rng.uniform(HOLD_MIN_S, HOLD_MAX_S)
    while at < duration_s:
        if cut and (len(cut) >= CUTS_MAX or rng.random() < 0.4):
            link = cut.pop(rng.randrange(len(cut)))
            steps.append((at, "heal", *link))
        else:
            link = rng.choice([x for x in LINKS if x not in cut])
            cut.append(link)
            steps.append((at, "cut", *link))
        at += rng.uniform(HOLD_MIN_S, HOLD_MAX_S)
    steps.append((duration_s, "heal", "*", "*"))
    return steps


def soak_seed(default: int | None) -> int:
    """``ORBITMQ_SOAK_SEED`` when set, else ``default``, else a fresh seed (printed either way)."""
    value = os.environ.get("ORBITMQ_SOAK_SEED")
    if value is not None:
        return int(value)
    return default if default is not None else random.SystemRandom().randrange(1, 10**6)


# -- the clients ----------------------------------------------------------------------------------
class History:
    """What the clients saw: each SEND_OK (msg id -> body, Ack) and each message consumed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.acked: dict[str, tuple[bytes, Ack]] = {}
        self.acks: list[Ack] = []
        self.failed = 0
        self.consumed: Counter[str] = Counter()
        self.bodies: dict[str, bytes] = {}

    def acked_count(self, epoch: int | None = None) -> int:
        with self.lock:
            return sum(1 for _, a in self.acked.values() if epoch is None or a.epoch == epoch)

    def unconsumed(self) -> list[str]:
        with self.lock:
            return [m for m in self.acked if m not in self.consumed]


def produce(namesrv: str, topic: str, seed: int, index: int, history: History) -> None:
    """Send unique bodies until told to stop (or MESSAGES_MAX); a failure is counted and the
    producer goes on (the body is never sent again: a retry would be a new message)."""
    with Producer(f"soak-p{seed}-{index}", namesrv=namesrv, send_timeout=3.0,
                  retry_times_when_send_failed=2, poll_name_server_interval=1.0,
                  unreachable_broker_backoff=1.0) as producer:
        n = 0
        while not history.stop.is_set() and len(history.acks) < MESSAGES_MAX:
            body = b"soak%d-p%d-%d" % (seed, index, n)
            n += 1
            try:
                result = producer.send(Message(topic, body, keys=[body.decode()]))
            except OrbitMQError:
                with history.lock:
                    history.failed += 1
                time.sleep(0.05)
                continue
            if result.status is SendStatus.OK:
                assert result.master_epoch is not None, "a SEND_OK in controller mode names its epoch"
                ack = Ack(result.master_epoch, time.monotonic(), store_address(result.offset_msg_id))
                with history.lock:
                    history.acked[result.msg_id] = (body, ack)
                    history.acks.append(ack)
            time.sleep(SEND_PAUSE_S)


def start_consumer(namesrv: str, topic: str, seed: int, history: History) -> PushConsumer:
    def on_message(messages: list, context: object) -> ConsumeResult:
        with history.lock:
            for m in messages:
                history.consumed[m.msg_id] += 1
                history.bodies[m.msg_id] = bytes(m.body)
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(f"soak-g{seed}", namesrv=namesrv, consume_from=ConsumeFrom.FIRST,
                            poll_name_server_interval=1.0, heartbeat_broker_interval=1.0,
                            persist_consumer_offset_interval_ms=round(PERSIST_S * 1000),
                            pull_suspend_time_ms=2000, pull_timeout_ms=10_000,
                            pull_delay_on_exception_ms=500,
                            consume_thread_nums=2)
    consumer.subscribe(topic, "*")(on_message)
    consumer.start()
    return consumer


# -- figures --------------------------------------------------------------------------------------
def write_gaps(acks: list[Ack]) -> dict[int, float]:
    """Per epoch after the first: from the last answer of the epoch before it to its own first
    answer (how long the producers got no SEND_OK across that failover)."""
    ordered = sorted(acks, key=lambda a: a.at)
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for a in ordered:
        first.setdefault(a.epoch, a.at)
        last[a.epoch] = a.at
    epochs = sorted(first)
    return {e: round(first[e] - last[p], 2) for p, e in zip(epochs, epochs[1:], strict=False)}


def duplicates_max(acked: int, duration_s: float, changes: int) -> int:
    """The duplicates (a msg id consumed again) the group may see. It re-reads only what it
    consumed after the last offset that the broker now serving a queue holds: the group commits
    every PERSIST_S, a slave copies the master's offsets every SLAVE_SYNC_S, and a master cut
    from the others, or replaced, may have taken commits for up to a lease TTL that no one else
    sees. A producer's retry of a send whose answer was lost stores its msg id twice, within the
    same windows. So each change of the broker serving the group (a new epoch, or a client link
    cut or healed) may re-deliver at most the messages of one such window (plus a poll of the
    routes) at the measured rate, and the pull batches in flight; more is a bug (an offset
    reset to 0 re-reads the whole topic, a listener's success lost re-delivers for ever)."""
    window_s = PERSIST_S + SLAVE_SYNC_S + TTL_S + 1.0  # + 1 s: a poll of the routes
    rate = acked / max(duration_s, 1.0)
    return int((changes + 1) * (rate * window_s + 2 * 32 * 4))


# -- the run --------------------------------------------------------------------------------------
def run_soak(root: Path, seed: int, duration_s: float) -> dict[str, object]:
    steps = schedule(seed, duration_s)
    print(f"soak seed {seed} (ORBITMQ_SOAK_SEED={seed} replays), {duration_s:.0f} s of faults:")
    for at, action, a, b in steps:
        print(f"  {at:6.2f} s {action} {a} {b}")
    with NetLab(["etcd", "ns", *BROKERS]) as lab, \
            EtcdCluster(1, hosts=[lab.addr["etcd"]], prefixes=[lab.prefix["etcd"]],
                        root=root) as etcd:
        namesrv = ServerProcess(["namesrv", "--listen-host", lab.addr["ns"], "--port", "9876",
                                 "--allow-anonymous", "true"],
                                prefix=lab.prefix["ns"])
        try:
            namesrv.wait_ready("namesrv", timeout=60)
            hosts = {m: lab.addr[f"b{m}"] for m in (1, 2, 3)}
            prefixes = {m: lab.prefix[f"b{m}"] for m in (1, 2, 3)}
            with FailoverSet(root / "brokers", etcd.endpoints, hosts=hosts, prefixes=prefixes,
                             namesrv=f"{lab.addr['ns']}:9876", ttl_s=TTL_S,
                             fence_margin_ms=int(MARGIN_S * 1000)) as brokers:
                try:
                    return run_load(lab, brokers, seed, steps)
                finally:
                    print_failover_lines(brokers)
        finally:
            namesrv.stop()


def run_load(lab: NetLab, brokers: FailoverSet, seed: int,
             steps: list[tuple[float, str, str, str]]) -> dict[str, object]:
    first = brokers.wait_master(in_sync=3, timeout=60)
    topic = f"Soak{seed}"
    history = History()
    threads = [threading.Thread(target=produce, args=(brokers.namesrv, topic, seed, i, history))
               for i in range(PRODUCERS)]
    for t in threads:
        t.start()
    consumer: PushConsumer | None = None
    try:
        wait_for(lambda: history.acked_count() >= 50, "the first sends acknowledged", 60)
        consumer = start_consumer(brokers.namesrv, topic, seed, history)
        started = time.monotonic()
        client_steps = play(lab, brokers, steps, started)
        healed = time.monotonic()
        brokers.wait_master(in_sync=3, timeout=60)
        # The master of the moment of the heal may still be fenced and replaced (its lease
        # lapsed just before): wait for sends answered after the heal by whoever etcd names now.
        with history.lock:
            base = len(history.acks)
        wait_for(lambda: acks_of_current_master(brokers, history, base) >= 200,
                 "the producers go on with the master etcd names after the heal", 60)
        history.stop.set()
        for t in threads:
            t.join(30)
        load_s = time.monotonic() - started
        wait_for(lambda: not history.unconsumed(), "the group consumes every acknowledged message",
                 CONSUME_TIMEOUT_S)
        after_heal_s = time.monotonic() - healed
    except BaseException:
        with history.lock:
            print(f"soak seed {seed} failed: acked={len(history.acked)} "
                  f"consumed={len(history.consumed)} failed sends={history.failed}")
        raise
    finally:
        history.stop.set()
        for t in threads:
            t.join(30)
        if consumer is not None:
            consumer.shutdown()
    return verify(brokers, topic, seed, history, first.epoch, load_s, after_heal_s, client_steps)


def acks_of_current_master(brokers: FailoverSet, history: History, since: int) -> int:
    """SEND_OKs after the first ``since`` of the epoch etcd names now (0 while none)."""
    try:
        _, master = brokers.read()
    except OSError:
        return 0
    if master is None:
        return 0
    with history.lock:
        return sum(1 for a in history.acks[since:] if a.epoch == master.epoch)


def play(lab: NetLab, brokers: FailoverSet, steps: list[tuple[float, str, str, str]],
         started: float) -> int:
    """Run the schedule, resolving roles to namespaces at each cut (printed); returns how many
    steps cut or healed a client link (the group may move between brokers at each)."""
    client_steps = 0
    resolved: dict[tuple[str, str], tuple[str, str]] = {}
    for at, action, a, b in steps:
        delay = started + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if action == "cut":
            names = roles(brokers)
            link = resolved[(a, b)] = (names.get(a, a), names.get(b, b))
            lab.cut(*link)
        elif a == "*":
            link = ("*", "*")
            lab.heal()
        else:
            link = resolved.pop((a, b))
            lab.heal(*link)
        print(f"  {time.monotonic() - started:6.2f} s {action} {a} {b}: {link[0]} {link[1]}")
        client_steps += "root" in link or "*" in link
    return client_steps


def roles(brokers: FailoverSet) -> dict[str, str]:
    """M, S1, S2 -> namespace names, as etcd has it now (member 1 is M while no master)."""
    try:
        _, master = brokers.read()
    except OSError:
        master = None
    m = master.member if master is not None else 1
    others = [x for x in (1, 2, 3) if x != m]
    return {"M": f"b{m}", "S1": f"b{others[0]}", "S2": f"b{others[1]}"}


def verify(brokers: FailoverSet, topic: str, seed: int, history: History, first_epoch: int,
           load_s: float, after_heal_s: float, client_steps: int) -> dict[str, object]:
    acked = history.acked
    stored = read_all(brokers.namesrv, topic, f"soak-reader{seed}")
    lost = [m for m in acked if m not in stored]
    assert not lost, f"seed {seed}: {len(lost)} of {len(acked)} acknowledged messages lost"
    for msg_id, (body, _) in acked.items():
        assert stored[msg_id] == body and history.bodies[msg_id] == body, (seed, msg_id)
    spans = check_history(history.acks, MARGIN_S)
    duplicates = sum(c - 1 for c in history.consumed.values())
    changes = len(spans) - 1 + client_steps
    bound = duplicates_max(len(acked), load_s, changes)
    gaps = write_gaps(history.acks)
    times = sorted(a.at for a in history.acks)
    stall = max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)
    figures: dict[str, object] = {
        "seed": seed, "acked": len(acked), "stored": len(stored), "failed_sends": history.failed,
        "consumed": sum(history.consumed.values()), "duplicates": duplicates,
        "duplicates_max": bound, "epochs": f"{first_epoch}..{max(spans)}",
        "failover_write_gaps_s": gaps, "longest_stall_s": round(stall, 2),
        "consumed_all_after_heal_s": round(after_heal_s, 1),
    }
    print(f"soak figures {figures}")
    assert duplicates <= bound, f"seed {seed}: {duplicates} duplicates consumed (bound {bound})"
    return figures


def print_failover_lines(brokers: FailoverSet) -> None:
    """The brokers' failover log lines (elections, fences, cuts), for the figures and failures."""
    pattern = re.compile(r"elected master|steps down|fenced|log cut|in-sync set of epoch")
    for member, proc in sorted(brokers.brokers.items()):
        lines = [line for line in proc.output().splitlines() if pattern.search(line)]
        print(f"broker {member}: {len(lines)} failover lines")
        for line in lines[-40:]:
            print(f"  {line}")


def test_random_partitions_for_12_s_lose_nothing_acknowledged(tmp_path: Path) -> None:
    run_soak(tmp_path, soak_seed(4), 12.0)  # seed 4: a failover and cuts of every kind


@pytest.mark.slow
def test_random_partitions_for_60_s_lose_nothing_acknowledged(tmp_path: Path) -> None:
    run_soak(tmp_path, soak_seed(None), 60.0)
