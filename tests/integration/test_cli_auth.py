"""``orbitmq user ...`` and ``orbitmq acl ...`` end to end, and the credentials every client
command takes (``--access-key``/``--secret-key`` or ORBITMQ_ACCESS_KEY/ORBITMQ_SECRET_KEY),
against servers with authentication and authorization on."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from auth_support import ALICE, ALICE_GROUP, ALICE_TOPIC, OTHER_TOPIC, ROOT, auth_cluster
from click.testing import CliRunner, Result
from test_cli import assert_one_line_error

from orbitmq.cli.main import cli
from orbitmq.testing import EmbeddedCluster

ROOT_ENV = {"ORBITMQ_ACCESS_KEY": ROOT.access_key, "ORBITMQ_SECRET_KEY": ROOT.secret_key}
NO_ENV = {"ORBITMQ_ACCESS_KEY": None, "ORBITMQ_SECRET_KEY": None}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with auth_cluster(tmp_path_factory.mktemp("auth-cli")) as c:
        yield c


def run(cluster: EmbeddedCluster, *args: str, env: dict[str, str | None] | None = None,
        input: str | None = None, ok: bool = True) -> Result:
    result = CliRunner().invoke(cli, [*args, "--namesrv", cluster.namesrv],
                                env=ROOT_ENV if env is None else env, input=input)
    if ok:
        assert result.exit_code == 0, (args, result.output, result.exception)
    return result


def test_user_commands_round_trip_and_never_print_a_password(cluster: EmbeddedCluster) -> None:
    secret = "frank-secret-1"
    created = run(cluster, "user", "create", "--username", "frank", "--password", "-",
                  "--user-type", "Normal", input=secret + "\n")
    assert created.output.startswith("user frank created on ")
    assert cluster.namesrv in created.output and cluster.brokers[0].address in created.output

    got = run(cluster, "user", "get", "--username", "frank", "--format", "json")
    assert json.loads(got.output) == {"username": "frank", "userType": "Normal",
                                      "userStatus": "enable"}
    listed = run(cluster, "user", "list")
    assert listed.output.splitlines()[0].split() == ["USERNAME", "TYPE", "STATUS"]
    assert any(line.split() == ["frank", "Normal", "enable"] for line in listed.output.splitlines())
    run(cluster, "user", "update", "--username", "frank", "--user-status", "disable")
    assert "disable" in run(cluster, "user", "get", "--username", "frank").output
    for output in (created.output, got.output, listed.output):
        assert secret not in output

    run(cluster, "user", "delete", "--username", "frank")
    line = assert_one_line_error(run(cluster, "user", "get", "--username", "frank", ok=False))
    assert "does not exist" in line


def test_acl_commands_round_trip(cluster: EmbeddedCluster) -> None:
    run(cluster, "user", "create", "-u", "grace", "-p", "grace-secret-1")
    try:
        out = run(cluster, "acl", "create", "--subject", "User:grace", "--resources",
                  "Topic:orders*,Group:g1", "--actions", "Pub,Sub", "--decision", "Allow",
                  "--source-ips", "10.0.0.0/8").output
        assert out.startswith("ACL of User:grace created on ")
        rows = [line.split() for line in
                run(cluster, "acl", "get", "--subject", "User:grace").output.splitlines()]
        assert rows[0] == ["SUBJECT", "POLICY", "RESOURCE", "ACTIONS", "DECISION", "SOURCE", "IPS"]
        assert sorted(rows[1:]) == [
            ["User:grace", "Custom", "Group:g1", "Pub,Sub", "Allow", "10.0.0.0/8"],
            ["User:grace", "Custom", "Topic:orders*", "Pub,Sub", "Allow", "10.0.0.0/8"]]
        listed = run(cluster, "acl", "list", "--subject-filter", "grace", "--resource-filter",
                     "orders", "--format", "json").output
        (acl,) = [json.loads(line) for line in listed.splitlines()]
        assert acl["subject"] == "User:grace"
        run(cluster, "acl", "delete", "--subject", "User:grace", "--resources", "Topic:orders*")
        got = json.loads(run(cluster, "acl", "get", "-s", "User:grace", "--format",
                             "json").output)
        assert [e["resource"] for e in got["policies"][0]["entries"]] == ["Group:g1"]
        run(cluster, "acl", "delete", "--subject", "User:grace")
        assert_one_line_error(run(cluster, "acl", "get", "-s", "User:grace", ok=False))
    finally:
        run(cluster, "user", "delete", "-u", "grace")


def test_client_commands_sign_with_flags_or_the_environment(cluster: EmbeddedCluster) -> None:
    flags = ["--access-key", ALICE.access_key, "--secret-key", ALICE.secret_key]
    sent = run(cluster, "send", "--topic", ALICE_TOPIC, "hello", *flags, env=NO_ENV)
    assert sent.output.startswith("SEND_OK")
    alice_env = {"ORBITMQ_ACCESS_KEY": ALICE.access_key, "ORBITMQ_SECRET_KEY": ALICE.secret_key}
    consumed = run(cluster, "consume", "--topic", ALICE_TOPIC, "--group", ALICE_GROUP,
                   "--count", "1", "--timeout", "10", env=alice_env)
    assert "body=hello" in consumed.output
    assert ALICE_TOPIC in run(cluster, "topic", "list", env=alice_env).output


@pytest.mark.parametrize("args, env, needle", [
    ([], NO_ENV, "no credentials"),
    (["--access-key", "alice", "--secret-key", "wrong-secret"], NO_ENV, "does not match"),
    (["--access-key", "nobody", "--secret-key", "secret-1"], NO_ENV, "no user nobody"),
    ([], {"ORBITMQ_ACCESS_KEY": ALICE.access_key, "ORBITMQ_SECRET_KEY": ALICE.secret_key},
     f"Pub on Topic:{OTHER_TOPIC}"),
], ids=["none", "wrong-secret", "unknown-user", "no-rule"])
def test_refusals_are_one_line(cluster: EmbeddedCluster, args: list[str],
                               env: dict[str, str | None], needle: str) -> None:
    result = run(cluster, "send", "--topic", OTHER_TOPIC, "x", "--send-timeout", "3", *args,
                 env=env, ok=False)
    line = assert_one_line_error(result)
    assert "NO_PERMISSION" in line and needle in line
    assert "wrong-secret" not in result.output


def test_half_given_credentials_are_a_usage_error(cluster: EmbeddedCluster) -> None:
    result = run(cluster, "topic", "list", "--access-key", "alice", env=NO_ENV, ok=False)
    assert result.exit_code == 2
    assert "--secret-key (or ORBITMQ_SECRET_KEY) is missing" in assert_one_line_error(result)
    result = run(cluster, "user", "list", env={"ORBITMQ_SECRET_KEY": "s", "ORBITMQ_ACCESS_KEY": None},
                 ok=False)
    assert "--access-key (or ORBITMQ_ACCESS_KEY) is missing" in assert_one_line_error(result)


def test_a_normal_user_cannot_administer_users(cluster: EmbeddedCluster) -> None:
    env = {"ORBITMQ_ACCESS_KEY": ALICE.access_key, "ORBITMQ_SECRET_KEY": ALICE.secret_key}
    line = assert_one_line_error(run(cluster, "user", "create", "-u", "heidi", "-p", "secret-12",
                                     env=env, ok=False))
    assert "NO_PERMISSION" in line
    assert "heidi" not in run(cluster, "user", "list").output


def test_bad_arguments_are_refused_before_sending(cluster: EmbeddedCluster) -> None:
    for args in (["acl", "create", "-s", "Group:g", "-r", "Topic:t", "-a", "Pub"],
                 ["acl", "create", "-s", "User:alice", "-r", "Topic:t", "-a", "Publish"],
                 ["acl", "create", "-s", "User:alice", "-r", "Topic:t", "-a", "Pub", "-i", "x"],
                 ["user", "create", "-u", "ivan", "-p", "short"],
                 ["user", "update", "-u", "ivan"]):
        assert_one_line_error(run(cluster, *args, ok=False))
    # no password and no terminal to ask on; an empty standard input for '-'
    assert "--password" in assert_one_line_error(run(cluster, "user", "create", "-u", "ivan",
                                                     ok=False))
    assert "held no password" in assert_one_line_error(
        run(cluster, "user", "create", "-u", "ivan", "-p", "-", input="", ok=False))
