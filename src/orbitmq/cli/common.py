"""What the client-side commands share: the ``--namesrv`` option and the credentials that come
with it (``--access-key``/``--secret-key``), turning SDK failures into one readable line, and
parsing and printing of times, properties and message bodies.

The parsing and formatting helpers are pure functions, so their edge cases (ISO dates without a
zone, bodies that are not UTF-8) are tested without a server.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import datetime
import enum
import functools
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import click

from orbitmq.errors import BrokerError, OrbitMQError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.security.signature import Credentials
from orbitmq.security.tls import TLS_ENV, ClientTls

__all__ = [
    "DEFAULT_NAMESRV",
    "NAMESRV_ENV",
    "ACCESS_KEY_ENV",
    "SECRET_KEY_ENV",
    "namesrv_option",
    "cli_credentials",
    "cli_tls",
    "format_option",
    "cli_errors",
    "describe_error",
    "Position",
    "parse_timestamp",
    "parse_properties",
    "parse_keys",
    "format_ms",
    "body_text",
    "body_json_fields",
    "echo_json",
    "table",
    "handles_errors",
    "timestamp_param",
    "BadValue",
    "value_callback",
    "parse_namesrv",
    "now_ms",
    "silence_stdout",
]

log = logging.getLogger("orbitmq.cli")

DEFAULT_NAMESRV = "127.0.0.1:9876"
# One name for the name server address everywhere (the servers, the SDK, the CLI), then
# RocketMQ's own; ORBITMQ_NAMESRV, which the CLI read before, works for one more release.
NAMESRV_ENV = "ORBITMQ_NAMESRV_ADDR"
NAMESRV_ENVS = (NAMESRV_ENV, "NAMESRV_ADDR")
DEPRECATED_NAMESRV_ENV = "ORBITMQ_NAMESRV"
ACCESS_KEY_ENV = "ORBITMQ_ACCESS_KEY"
SECRET_KEY_ENV = "ORBITMQ_SECRET_KEY"
_CREDENTIAL_META = "orbitmq.cli.credentials"  # ctx.meta key: {"access_key": ..., "secret_key": ...}
_TLS_META = "orbitmq.cli.tls"  # ctx.meta key: {"tls": ..., "tls_trust_cert_path": ..., ...}

F = TypeVar("F", bound=Callable[..., Any])


class BadValue(click.ClickException):
    """An option value we could not parse: exit code 2 like click's usage errors, but one line
    naming the option, without the usage text around it."""

    exit_code = 2


def value_callback(parse: Callable[[Any], Any]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback applying ``parse`` to a given value; its ValueError becomes a
    :class:`BadValue` naming the option."""

    def callback(_ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None or value == ():
            return value
        try:
            return parse(value)
        except ValueError as exc:
            name = param.opts[0] if param.opts else param.name
            raise BadValue(f"invalid value for {name}: {exc}") from None

    return callback


def parse_namesrv(value: str) -> str:
    """Validate ``host:port[;host:port...]`` up front, so a typo is an error, not a timeout."""
    addrs = [a.strip() for a in value.split(";") if a.strip()]
    if not addrs:
        raise ValueError("expected HOST:PORT")
    for addr in addrs:
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{addr!r} is not HOST:PORT")
    return ";".join(addrs)


def _namesrv_value(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    source = ctx.get_parameter_source(param.name or "")
    old = os.environ.get(DEPRECATED_NAMESRV_ENV)
    if source is click.core.ParameterSource.DEFAULT and old:
        click.echo(f"Warning: {DEPRECATED_NAMESRV_ENV} is deprecated, use {NAMESRV_ENV}", err=True)
        value = old
    return value_callback(parse_namesrv)(ctx, param, value)


def namesrv_option(func: F) -> F:
    """``--namesrv HOST:PORT`` or ``-n`` (several separated by ';'), from ORBITMQ_NAMESRV_ADDR (then
    RocketMQ's NAMESRV_ADDR) when not given; and the credentials every client command signs its
    requests with (:func:`credentials_options`), since whatever talks to a name server may need
    them, and TLS (:func:`tls_options`)."""
    return tls_options(credentials_options(click.option(
        "--namesrv",
        "-n",  # mqadmin's short flag
        default=DEFAULT_NAMESRV,
        show_default=True,
        envvar=list(NAMESRV_ENVS),
        show_envvar=True,
        callback=_namesrv_value,
        metavar="HOST:PORT",
        help="name server address; several separated by ';'",
    )(func)))


def _keep_credential(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value:
        ctx.meta.setdefault(_CREDENTIAL_META, {})[param.name or ""] = value


def credentials_options(func: F) -> F:
    """``--access-key`` and ``--secret-key`` (or ORBITMQ_ACCESS_KEY / ORBITMQ_SECRET_KEY): the
    user whose secret signs every request, for servers with authentication on. They are kept in
    the click context, not passed to the command, and read by :func:`cli_credentials`; the
    secret is never shown (prefer the environment: a flag is visible in the process list)."""
    for name, env, text in (
            ("--secret-key", SECRET_KEY_ENV, "the user's password (its secret key)"),
            ("--access-key", ACCESS_KEY_ENV, "user name to sign requests as")):
        func = click.option(name, envvar=env, show_envvar=True, expose_value=False,
                            callback=_keep_credential, metavar="TEXT", help=text)(func)
    return func


def cli_credentials() -> Credentials | None:
    """The credentials of the running command (None: none given, requests go unsigned).

    Raises:
        BadValue: only one of the two given, or one that is not a usable key.
    """
    ctx = click.get_current_context(silent=True)
    given: dict[str, str] = ctx.meta.get(_CREDENTIAL_META, {}) if ctx is not None else {}
    access, secret = given.get("access_key"), given.get("secret_key")
    if access is None and secret is None:
        return None
    if access is None or secret is None:
        missing = "--access-key" if access is None else "--secret-key"
        env = ACCESS_KEY_ENV if access is None else SECRET_KEY_ENV
        raise BadValue(f"credentials need both keys: {missing} (or {env}) is missing")
    try:
        return Credentials(access.strip(), secret)
    except ValueError as e:
        raise BadValue(f"invalid credentials: {e}") from None


def _keep_tls(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    ctx.meta.setdefault(_TLS_META, {})[param.name or ""] = (
        value, ctx.get_parameter_source(param.name or ""))


def tls_options(func: F) -> F:
    """``--tls`` and its certificates (or ORBITMQ_TLS_ENABLE and ORBITMQ_TLS_CLIENT_*, the names
    the SDK and the servers read): kept in the click context and read by :func:`cli_tls`."""
    for decls, env, text in (
            (("--tls-check-hostname/--no-tls-check-hostname",), TLS_ENV["check_hostname"],
             "the server's certificate must name the host connected to"),
            (("--tls-key-path",), TLS_ENV["key_path"], "PEM key of --tls-cert-path"),
            (("--tls-cert-path",), TLS_ENV["cert_path"],
             "PEM client certificate, for servers that require one"),
            (("--tls-trust-cert-path",), TLS_ENV["trust_cert_path"],
             "PEM CA certificate(s) the servers' certificates must chain to (default: the "
             "system's roots)"),
            (("--tls",), TLS_ENV["enable"], "connect with TLS (servers in tls_server_mode "
             "permissive or enforcing)")):
        flag = decls[0] == "--tls" or "/" in decls[0]
        func = click.option(*decls, envvar=env, show_envvar=True, expose_value=False,
                            callback=_keep_tls, is_flag=flag or None,
                            default=decls[0] != "--tls" if flag else None,
                            metavar=None if flag else "PATH", help=text)(func)
    return func


def cli_tls() -> ClientTls | bool:
    """The running command's TLS settings (False: plaintext).

    Raises:
        BadValue: a certificate option given without --tls, or settings that cannot work.
    """
    ctx = click.get_current_context(silent=True)
    given: dict[str, tuple[Any, Any]] = ctx.meta.get(_TLS_META, {}) if ctx is not None else {}

    def value(name: str) -> Any:
        return given.get(name, (None, None))[0]

    if not value("tls"):
        for name in ("tls_trust_cert_path", "tls_cert_path", "tls_key_path"):
            if given.get(name, (None, None))[1] is click.core.ParameterSource.COMMANDLINE:
                raise BadValue(f"--{name.replace('_', '-')} needs --tls")
        return False
    try:
        return ClientTls(value("tls_trust_cert_path") or "", value("tls_cert_path") or "",
                         value("tls_key_path") or "", value("tls_check_hostname") is not False)
    except ValueError as e:
        raise BadValue(f"invalid TLS settings: {e}") from None


def format_option(func: F) -> F:
    """``--format text|json`` for commands that print records."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="text for people, json (one object per line) for programs",
    )(func)


# Answers that mean "no such thing" rather than a refusal.
_NOT_FOUND: dict[int, str] = {
    ResponseCode.TOPIC_NOT_EXIST: "topic not found",
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: "group not found",
    ResponseCode.QUERY_NOT_FOUND: "not found",
}


def describe_error(exc: BaseException) -> str:
    """One line saying what went wrong, in terms a CLI user can act on."""
    if isinstance(exc, BrokerError):
        what = _NOT_FOUND.get(exc.code)
        if what is None:
            try:
                what = f"server refused: {ResponseCode(exc.code).name}"
            except ValueError:
                what = f"server refused: code {exc.code}"
        return _one_line(what + (f": {exc.remark}" if exc.remark else ""))
    if isinstance(exc, TimeoutError):  # the builtin one, from waiting on a blocking client
        return _one_line(f"no answer in time: {exc}" if str(exc) else "no answer in time")
    return _one_line(str(exc) or type(exc).__name__)


def silence_stdout() -> None:
    """Point stdout at /dev/null after its reader went away (``| head``), so that nothing more we
    print, nor the interpreter's final flush, raises BrokenPipeError."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _one_line(text: str) -> str:
    return " ".join(text.split())  # whatever the message held


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """Turn failures into a ClickException: a non-zero exit and one line on stderr.

    Errors the SDK raises on purpose (and OS errors such as a refused connection) are expected in
    a CLI; anything else is a bug, so its traceback still goes to the log at DEBUG level. A closed
    stdout (BrokenPipeError) is not a failure: the root command ends quietly (cli/main.py).
    """
    try:
        yield
    except (click.ClickException, click.Abort, KeyboardInterrupt, BrokenPipeError):
        raise
    except (OrbitMQError, OSError, concurrent.futures.TimeoutError) as exc:
        raise click.ClickException(describe_error(exc)) from None
    except Exception as exc:
        log.debug("unexpected error", exc_info=True)
        raise click.ClickException(f"unexpected {type(exc).__name__}: {describe_error(exc)}") from None


def handles_errors(func: F) -> F:
    """Decorator form of :func:`cli_errors` for a command callback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with cli_errors():
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


class Position(enum.Enum):
    """The ends of a queue, as symbolic timestamps: ``earliest`` (first message) and ``now``."""

    EARLIEST = "earliest"
    LATEST = "latest"


_POSITION_WORDS = {
    "earliest": Position.EARLIEST,
    "first": Position.EARLIEST,
    "now": Position.LATEST,
    "latest": Position.LATEST,
    "last": Position.LATEST,
}


def parse_timestamp(text: str) -> int | Position:
    """Milliseconds since the epoch from ``text``.

    Accepts an integer (milliseconds), an ISO 8601 date or datetime (local time when it has no
    zone; ``Z`` allowed), or a word: ``earliest``/``first`` or ``now``/``latest``/``last``.

    Raises:
        ValueError: none of those.
    """
    raw = text.strip()
    word = _POSITION_WORDS.get(raw.lower())
    if word is not None:
        return word
    if raw.isdigit():
        return int(raw)
    try:
        moment = datetime.datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a timestamp: give milliseconds, an ISO datetime "
            "(2024-05-01T12:00:00), 'now' or 'earliest'"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # naive means local time, as a person typing it means
    return int(moment.timestamp() * 1000)


timestamp_param = value_callback(parse_timestamp)


def parse_properties(items: Sequence[str]) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; the value may contain '='.

    Raises:
        ValueError: an item without '=' or with an empty key.
    """
    props: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{item!r} is not KEY=VALUE")
        props[key.strip()] = value
    return props


def parse_keys(text: str | None) -> list[str]:
    """``"k1,k2"`` as ``["k1", "k2"]`` (blanks dropped)."""
    return [k.strip() for k in (text or "").split(",") if k.strip()]


def preview(text: str | None, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters with "..." ("-" for none): table cells."""
    text = " ".join((text or "-").split())
    return text if len(text) <= width else text[: width - 3] + "..."


def format_ms(ms: int) -> str:
    """Milliseconds since the epoch as a local ISO datetime with milliseconds; '-' for 0 (unknown)."""
    if ms <= 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000).astimezone()
    return moment.isoformat(timespec="milliseconds")


def now_ms() -> int:
    return int(time.time() * 1000)


def _escapes() -> dict[int, str]:
    table = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}  # control characters
    table.update({ord("\\"): "\\\\", ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
    # Bytes that are not UTF-8, decoded by "surrogateescape" as U+DC80..U+DCFF.
    table.update({0xDC00 + b: f"\\x{b:02x}" for b in range(0x80, 0x100)})
    return table


_ESCAPES = _escapes()


def body_text(body: bytes) -> str:
    """A body on one line, escaped one way only: UTF-8 text as is; a backslash as ``\\\\``;
    newline, return and tab as ``\\n``, ``\\r``, ``\\t``; other control characters and bytes
    that are not UTF-8 as ``\\xNN``. So one message stays one line, and ``\\xff`` in the output
    is the byte 0xFF while a body holding the text ``\\xff`` prints ``\\\\xff``."""
    return bytes(body).decode("utf-8", errors="surrogateescape").translate(_ESCAPES)


def body_json_fields(body: bytes) -> dict[str, str]:
    """``{"body_base64": ...}``, the exact bytes for programs, plus ``"body"`` (the text) when the
    body is UTF-8."""
    raw = bytes(body)
    fields = {"body_base64": base64.b64encode(raw).decode("ascii")}
    try:
        fields["body"] = raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    return fields


def echo_json(value: Any, *, indent: int | None = None) -> None:
    """Print ``value`` as JSON (keys sorted, so output is stable for scripts and tests)."""
    click.echo(json.dumps(value, indent=indent, sort_keys=True, ensure_ascii=False))


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows in left-aligned columns (numbers too: a terminal table, not a report)."""
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
             for r in (header, *rows)]
    return "\n".join(lines)
