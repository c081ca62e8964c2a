"""kill -9 of ``orbitmq standalone`` (a real child process, authentication on) while the SDK's
Admin creates users one after the other: after each restart every user the broker answered as
created is there, with its secret key (the broker's metadata store: each change its own rows,
written before the answer; the WAL survives the process dying). Rounds of kill and restart, the
kill at a random moment; every loop and wait bounded."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

from orbitmq import Admin, Credentials
from orbitmq.testing import ServerProcess, standalone_process
from orbitmq.testing.waits import EVENT_WAIT_S

ROUNDS = 3
CREATES_MAX = 20_000  # creates one round's client sends at most (it is killed long before)
ANSWERED_MIN = 60  # creates answered before the kill may come
SUPER_EVERY = 10  # every tenth user is a Super user, who can list the users after a restart
ROOT = Credentials("root", "root-secret-kill9")


def _standalone(store: str) -> ServerProcess:
    init = json.dumps({"username": ROOT.access_key, "password": ROOT.secret_key})
    return standalone_process(store, "--flush-consumer-offset-interval-ms", "3600000",
                              "--authentication-enabled", "true",
                              "--init-authentication-user", init)


class _Created:
    """The users the broker answered as created: name -> (secret, Super)."""

    def __init__(self) -> None:
        self.users: dict[str, tuple[str, bool]] = {}
        self.count = 0


def _create_until_killed(namesrv: str, broker: str, done: _Created, round_no: int,
                         stop: threading.Event) -> None:
    with Admin(namesrv, credentials=ROOT) as admin:
        for i in range(CREATES_MAX):
            if stop.is_set():
                return
            seq = round_no * CREATES_MAX + i
            name, secret, is_super = f"k9-user-{seq}", f"k9-secret-{seq}", seq % SUPER_EVERY == 0
            try:
                admin.create_user(name, secret, user_type="Super" if is_super else "Normal",
                                  broker=broker)
            except Exception:  # the broker died under us (any error of the call)
                return
            done.users[name] = (secret, is_super)
            done.count += 1


def _check(namesrv: str, broker: str, done: _Created, round_no: int) -> None:
    with Admin(namesrv, credentials=ROOT) as admin:
        held = {u.username for u in admin.list_users(broker=broker)}
    lost = set(done.users) - held
    assert not lost, f"round {round_no}: {len(lost)} of {len(done.users)} users lost"
    supers = [name for name, (_, is_super) in done.users.items() if is_super]
    for name in supers[-3:]:  # their secret keys survived too: they sign and are admitted
        with Admin(namesrv, credentials=Credentials(name, done.users[name][0])) as admin:
            assert name in {u.username for u in admin.list_users(name, broker=broker)}


def test_kill_9_keeps_every_user_the_broker_answered(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    done = _Created()
    rng = random.Random(38)
    for round_no in range(ROUNDS):
        server = _standalone(store)
        try:
            addrs = server.wait_ready("namesrv", "broker")
            if round_no:
                _check(addrs["namesrv"], addrs["broker"], done, round_no)
            stop = threading.Event()
            before = done.count
            client = threading.Thread(target=_create_until_killed,
                                      args=(addrs["namesrv"], addrs["broker"], done, round_no,
                                            stop))
            client.start()
            deadline = time.monotonic() + EVENT_WAIT_S * 2
            while done.count < before + ANSWERED_MIN:
                assert time.monotonic() < deadline, f"round {round_no}: too few creates answered"
                assert client.is_alive(), f"round {round_no}: the client stopped"
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.3))  # the random moment of the kill
            server.kill()
            stop.set()
            client.join(EVENT_WAIT_S)
            assert not client.is_alive()
        finally:
            server.kill()
    server = _standalone(store)
    try:
        addrs = server.wait_ready("namesrv", "broker")
        _check(addrs["namesrv"], addrs["broker"], done, ROUNDS)
        assert len(done.users) >= ROUNDS * ANSWERED_MIN
    finally:
        assert server.stop() == 0, server.output()[-3000:]
