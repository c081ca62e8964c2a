"""The Spark connector's ``accessKey`` / ``secretKey`` options (both or neither; else the
ORBITMQ_ACCESS_KEY / ORBITMQ_SECRET_KEY of the parsing process), and the executor session cache
that keeps queries signing as different users apart. Pure code: no SparkSession, no server."""

from __future__ import annotations

import pickle

import pytest

from orbitmq import Credentials
from orbitmq.spark.clients import _sessions, close_executor_sessions, executor_session
from orbitmq.spark.options import OptionError, parse_read_options, parse_write_options

NS = {"namesrv": "127.0.0.1:9876", "topic": "T"}
SECRET = "spark-secret-1"


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORBITMQ_ACCESS_KEY", raising=False)
    monkeypatch.delenv("ORBITMQ_SECRET_KEY", raising=False)


@pytest.mark.parametrize("parse", [parse_read_options, parse_write_options])
def test_both_keys_sign_neither_does_not(parse) -> None:
    opts = parse({**NS, "accessKey": "alice", "secretKey": SECRET}, streaming=False)
    assert opts.credentials == Credentials("alice", SECRET)
    # Spark hands keys over lower-cased
    assert parse({**NS, "accesskey": "alice", "secretkey": SECRET},
                 streaming=False).credentials == Credentials("alice", SECRET)
    assert parse(NS, streaming=False).credentials is None
    # the options travel to the executors pickled; the secret never shows in their repr
    assert pickle.loads(pickle.dumps(opts)).credentials == opts.credentials
    assert SECRET not in repr(opts)


@pytest.mark.parametrize("given, named", [
    ({"accessKey": "alice"}, "secretKey"),
    ({"secretKey": SECRET}, "accessKey"),
    ({"accessKey": " ", "secretKey": SECRET}, "accessKey"),
    ({"accessKey": "alice", "secretKey": ""}, "secretKey"),
    ({"accessKey": "a" * 300, "secretKey": SECRET}, "accessKey"),
])
@pytest.mark.parametrize("parse", [parse_read_options, parse_write_options])
def test_one_key_alone_is_refused_naming_it(parse, given: dict[str, str], named: str) -> None:
    with pytest.raises(OptionError) as info:
        parse({**NS, **given}, streaming=False)
    assert info.value.option == named
    assert SECRET not in str(info.value)


def test_the_environment_stands_in_for_absent_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBITMQ_ACCESS_KEY", "envuser")
    monkeypatch.setenv("ORBITMQ_SECRET_KEY", SECRET)
    assert parse_read_options(NS, streaming=False).credentials == Credentials("envuser", SECRET)
    # options win over the environment
    opts = parse_write_options({**NS, "accessKey": "alice", "secretKey": "other-secret"},
                               streaming=False)
    assert opts.credentials == Credentials("alice", "other-secret")
    monkeypatch.delenv("ORBITMQ_SECRET_KEY")
    with pytest.raises(OptionError, match="ORBITMQ_SECRET_KEY is missing"):
        parse_read_options(NS, streaming=False)


def test_executor_sessions_are_kept_apart_by_credentials() -> None:
    alice, bob = Credentials("alice", SECRET), Credentials("bob", SECRET)
    try:
        with executor_session("127.0.0.1:1", alice) as a, \
                executor_session("127.0.0.1:1", bob) as b, \
                executor_session("127.0.0.1:1") as anonymous, \
                executor_session("127.0.0.1:1", Credentials("alice", SECRET)) as a2:
            assert len({id(a), id(b), id(anonymous)}) == 3
            assert a2 is a
            assert (a.credentials, b.credentials, anonymous.credentials) == (alice, bob, None)
        # Sessions of other tests of this process (the Spark suite's) may be cached beside.
        assert len([key for key in _sessions if key[0] == "127.0.0.1:1"]) == 3
    finally:
        close_executor_sessions()
