"""``orbitmq user create|update|delete|get|list`` and ``orbitmq acl create|update|delete|get|
list``: users and their access rules (RocketMQ 5's ACL 2.0; mqadmin's createUser, createAcl...).

A change goes to every master broker and to every name server that keeps users (the SDK's
:mod:`orbitmq.client.admin.auth`), or with ``--broker`` to one broker; reads ask one server.
These commands need a Super user's credentials (``--access-key``/``--secret-key`` or
ORBITMQ_ACCESS_KEY/ORBITMQ_SECRET_KEY) once the servers have authentication on.

A password is never echoed: ``--password -`` reads it from the first line of standard input,
and without ``--password`` it is asked for on a terminal (typed twice). ``get`` and ``list``
print no password: the servers do not send them back.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from orbitmq.cli.common import (
    BadValue,
    cli_credentials,
    cli_tls,
    echo_json,
    format_option,
    handles_errors,
    namesrv_option,
    table,
)

__all__ = ["user_group", "acl_group", "read_password"]

ADMIN_TIMEOUT_S = 5.0
PASSWORD_STDIN = "-"
USER_TYPES = ["Super", "Normal"]
USER_STATUSES = ["enable", "disable"]
DECISIONS = ["Allow", "Deny"]
POLICY_TYPES = ["Custom", "Default"]


def _admin(namesrv: str) -> Any:
    from orbitmq.client import Admin

    return Admin(namesrv, timeout=ADMIN_TIMEOUT_S, credentials=cli_credentials(), tls=cli_tls())


def read_password(value: str | None, *, required: bool) -> str | None:
    """The password of ``--password``: as given, the first line of stdin for ``-``, or asked
    for (hidden, twice) on a terminal when not given and ``required``.

    Raises:
        BadValue: ``-`` with nothing on stdin, or a required password and no terminal to ask.
    """
    if value == PASSWORD_STDIN:
        line = sys.stdin.readline().rstrip("\r\n")
        if not line:
            raise BadValue("--password -: standard input held no password")
        return line
    if value is not None or not required:
        return value
    if not sys.stdin.isatty():
        raise BadValue("give --password (or --password - and the password on standard input)")
    return str(click.prompt("Password", hide_input=True, confirmation_prompt=True))


def _targets(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--broker`` / ``--cluster``: where a change goes (default: every master and name server
    that keeps users)."""
    func = click.option("--cluster", "-c", default=None,
                        help="only the masters of this cluster (and the name servers)")(func)
    return click.option("--broker", "-b", default=None, metavar="NAME|HOST:PORT",
                        help="only this broker (no name server)")(func)


def _done(what: str, addrs: list[str]) -> None:
    click.echo(f"{what} on {', '.join(addrs)}")


def _user_json(user: Any) -> dict[str, Any]:
    return dict(user.to_dict(with_password=False))


# -- users -------------------------------------------------------------------------------------
@click.group("user")
def user_group() -> None:
    """Users: who may sign requests (authentication_enabled), Super or Normal."""


@user_group.command("create")
@namesrv_option
@click.option("--username", "-u", required=True)
@click.option("--password", "-p", default=None, metavar="TEXT|-",
              help="'-': read it from standard input [default: ask on the terminal]")
@click.option("--user-type", "-t", type=click.Choice(USER_TYPES, case_sensitive=False),
              default="Normal", show_default=True, help="Super users are allowed everything")
@click.option("--user-status", "-s", type=click.Choice(USER_STATUSES, case_sensitive=False),
              default="enable", show_default=True)
@_targets
@handles_errors
def user_create_cmd(namesrv: str, username: str, password: str | None, user_type: str,
                    user_status: str, broker: str | None, cluster: str | None) -> None:
    """Create a user; its password is the secret key its clients sign with."""
    secret = read_password(password, required=True)
    assert secret is not None
    with _admin(namesrv) as admin:
        addrs = admin.create_user(username, secret, user_type=user_type, status=user_status,
                                  broker=broker, cluster=cluster)
    _done(f"user {username} created", addrs)


@user_group.command("update")
@namesrv_option
@click.option("--username", "-u", required=True)
@click.option("--password", "-p", default=None, metavar="TEXT|-",
              help="a new password; '-': read it from standard input")
@click.option("--user-type", "-t", type=click.Choice(USER_TYPES, case_sensitive=False))
@click.option("--user-status", "-s", type=click.Choice(USER_STATUSES, case_sensitive=False))
@_targets
@handles_errors
def user_update_cmd(namesrv: str, username: str, password: str | None, user_type: str | None,
                    user_status: str | None, broker: str | None, cluster: str | None) -> None:
    """Change a user's password, type or status (what is not given stays)."""
    if password is None and user_type is None and user_status is None:
        raise BadValue("give --password, --user-type or --user-status")
    secret = read_password(password, required=False)
    with _admin(namesrv) as admin:
        addrs = admin.update_user(username, password=secret, user_type=user_type,
                                  status=user_status, broker=broker, cluster=cluster)
    _done(f"user {username} updated", addrs)


@user_group.command("delete")
@namesrv_option
@click.option("--username", "-u", required=True)
@_targets
@handles_errors
def user_delete_cmd(namesrv: str, username: str, broker: str | None,
                    cluster: str | None) -> None:
    """Delete a user (a user cannot delete itself)."""
    with _admin(namesrv) as admin:
        addrs = admin.delete_user(username, broker=broker, cluster=cluster)
    _done(f"user {username} deleted", addrs)


@user_group.command("get")
@namesrv_option
@click.option("--username", "-u", required=True)
@click.option("--broker", "-b", default=None, metavar="NAME|HOST:PORT",
              help="ask this broker [default: the first master]")
@format_option
@handles_errors
def user_get_cmd(namesrv: str, username: str, broker: str | None, fmt: str) -> None:
    """Show a user's type and status."""
    with _admin(namesrv) as admin:
        user = admin.get_user(username, broker=broker)
    _print_users([user], fmt, single=True)


@user_group.command("list")
@namesrv_option
@click.option("--filter", "-f", "needle", default="", help="names containing this")
@click.option("--broker", "-b", default=None, metavar="NAME|HOST:PORT",
              help="ask this broker [default: the first master]")
@format_option
@handles_errors
def user_list_cmd(namesrv: str, needle: str, broker: str | None, fmt: str) -> None:
    """List users (no passwords)."""
    with _admin(namesrv) as admin:
        users = admin.list_users(needle, broker=broker)
    _print_users(users, fmt, single=False)


def _print_users(users: list[Any], fmt: str, *, single: bool) -> None:
    if fmt == "json":
        if single:
            echo_json(_user_json(users[0]))
        else:
            for user in users:
                echo_json(_user_json(user))
        return
    rows = [(u.username, u.user_type.value, u.status.value) for u in users]
    click.echo(table(("USERNAME", "TYPE", "STATUS"), rows))


# -- ACLs --------------------------------------------------------------------------------------
@click.group("acl")
def acl_group() -> None:
    """Access rules: what a Normal user may do (authorization_enabled)."""


def _rule_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed([
        click.option("--subject", "-s", required=True, metavar="User:NAME"),
        click.option("--resources", "-r", required=True, metavar="TYPE:NAME,...",
                     help="Topic:NAME, Group:NAME, Cluster:NAME; NAME* for a prefix; * for "
                     "anything (one rule per resource)"),
        click.option("--actions", "-a", required=True, metavar="ACTION,...",
                     help="Pub, Sub, Create, Update, Delete, Get, List, All"),
        click.option("--decision", "-d", type=click.Choice(DECISIONS, case_sensitive=False),
                     default="Allow", show_default=True, help="Deny wins over Allow"),
        click.option("--source-ips", "-i", default=None, metavar="CIDR,...",
                     help="only from these networks [default: from anywhere]"),
    ]):
        func = option(func)
    return func


@acl_group.command("create")
@namesrv_option
@_rule_options
@_targets
@handles_errors
def acl_create_cmd(namesrv: str, subject: str, resources: str, actions: str, decision: str,
                   source_ips: str | None, broker: str | None, cluster: str | None) -> None:
    """Give a user rules (added to its rules; one for a resource it has replaces that one)."""
    with _admin(namesrv) as admin:
        addrs = admin.create_acl(subject, resources, actions, decision=decision,
                                 source_ips=source_ips, broker=broker, cluster=cluster)
    _done(f"ACL of {subject} created", addrs)


@acl_group.command("update")
@namesrv_option
@_rule_options
@_targets
@handles_errors
def acl_update_cmd(namesrv: str, subject: str, resources: str, actions: str, decision: str,
                   source_ips: str | None, broker: str | None, cluster: str | None) -> None:
    """Change rules of a user that has an ACL."""
    with _admin(namesrv) as admin:
        addrs = admin.update_acl(subject, resources, actions, decision=decision,
                                 source_ips=source_ips, broker=broker, cluster=cluster)
    _done(f"ACL of {subject} updated", addrs)


@acl_group.command("delete")
@namesrv_option
@click.option("--subject", "-s", required=True, metavar="User:NAME")
@click.option("--resources", "-r", default=None, metavar="TYPE:NAME,...",
              help="only the rules of these resources [default: all the user's rules]")
@click.option("--policy-type", type=click.Choice(POLICY_TYPES, case_sensitive=False),
              default=None, help="only rules of this policy [default: both]")
@_targets
@handles_errors
def acl_delete_cmd(namesrv: str, subject: str, resources: str | None, policy_type: str | None,
                   broker: str | None, cluster: str | None) -> None:
    """Remove a user's rules."""
    with _admin(namesrv) as admin:
        addrs = admin.delete_acl(subject, resources, policy_type=policy_type, broker=broker,
                                 cluster=cluster)
    _done(f"ACL of {subject} deleted" + (f" for {resources}" if resources else ""), addrs)


@acl_group.command("get")
@namesrv_option
@click.option("--subject", "-s", required=True, metavar="User:NAME")
@click.option("--broker", "-b", default=None, metavar="NAME|HOST:PORT",
              help="ask this broker [default: the first master]")
@format_option
@handles_errors
def acl_get_cmd(namesrv: str, subject: str, broker: str | None, fmt: str) -> None:
    """Show a user's rules."""
    with _admin(namesrv) as admin:
        acl = admin.get_acl(subject, broker=broker)
    _print_acls([acl], fmt, single=True)


@acl_group.command("list")
@namesrv_option
@click.option("--subject-filter", default="", help="subjects containing this")
@click.option("--resource-filter", default="", help="with a rule whose resource contains this")
@click.option("--broker", "-b", default=None, metavar="NAME|HOST:PORT",
              help="ask this broker [default: the first master]")
@format_option
@handles_errors
def acl_list_cmd(namesrv: str, subject_filter: str, resource_filter: str, broker: str | None,
                 fmt: str) -> None:
    """List ACLs, one line per rule."""
    with _admin(namesrv) as admin:
        acls = admin.list_acls(subject_filter, resource_filter, broker=broker)
    _print_acls(acls, fmt, single=False)


def _print_acls(acls: list[Any], fmt: str, *, single: bool) -> None:
    if fmt == "json":
        if single:
            echo_json(acls[0].to_dict())
        else:
            for acl in acls:
                echo_json(acl.to_dict())
        return
    rows = []
    for acl in acls:
        for ptype, entries in (("Custom", acl.entries), ("Default", acl.default_entries)):
            for e in entries:
                d = e.to_dict()
                rows.append((acl.subject, ptype, d["resource"], ",".join(d["actions"]),
                             d["decision"], ",".join(d.get("sourceIps", [])) or "*"))
    click.echo(table(("SUBJECT", "POLICY", "RESOURCE", "ACTIONS", "DECISION", "SOURCE IPS"),
                     rows))
