"""The ``orbitmq`` command.

What every subcommand shares is set up here: ``--log-level`` (accepted before the subcommand and
anywhere after it), and a quiet end with exit status 0 when the reader of our output goes away
(``orbitmq topic list | head -1``): a closed pipe is not a failure of the command.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from orbitmq import __version__
from orbitmq.cli import ops_subcommands as ops
from orbitmq.cli.auth_cmd import acl_group, user_group
from orbitmq.cli.broker_admin_cmd import with_admin_subcommands
from orbitmq.cli.common import silence_stdout
from orbitmq.cli.console_cmd import console_cmd
from orbitmq.cli.consume_cmd import consume_cmd
from orbitmq.cli.consumelog_cmd import consumelog_group
from orbitmq.cli.dlq_cmd import dlq_group
from orbitmq.cli.group_cmd import group_group
from orbitmq.cli.message_cmd import message_group
from orbitmq.cli.ops_cmd import cluster_group, consumer_group, producer_group, stats_group
from orbitmq.cli.outbox_cmd import outbox_group
from orbitmq.cli.send_cmd import send_cmd
from orbitmq.cli.servers import broker_cmd, namesrv_cmd, standalone_cmd
from orbitmq.cli.store_cmd import store_group
from orbitmq.cli.topic_cmd import topic_group
from orbitmq.cli.transaction_cmd import transaction_group

SERVER_COMMANDS = frozenset({"namesrv", "broker", "standalone", "console"})
LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]
_LOG_LEVEL_HELP = "[default: INFO for servers, ERROR for client commands]"


class OrbitmqGroup(click.Group):
    """The root group: a subcommand that met a closed stdout ends quietly with status 0."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            silence_stdout()
            ctx.exit(0)


def _set_log_level(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """``--log-level`` after the subcommand: applied once that command's options are read."""
    if value is not None:
        logging.getLogger().setLevel(value.upper())


def _log_level_option() -> click.Option:
    return click.Option(["--log-level"], type=click.Choice(LOG_LEVELS, case_sensitive=False),
                        expose_value=False, callback=_set_log_level, help=_LOG_LEVEL_HELP)


def add_log_level_everywhere(group: click.Group) -> None:
    """Give every subcommand (nested ones too) its own ``--log-level``."""
    for command in group.commands.values():
        if not any(isinstance(p, click.Option) and "--log-level" in p.opts for p in command.params):
            command.params.append(_log_level_option())
        if isinstance(command, click.Group):
            add_log_level_everywhere(command)


@click.group(cls=OrbitmqGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="orbitmq")
@click.option("--log-level", default=None, type=click.Choice(LOG_LEVELS, case_sensitive=False),
              help=_LOG_LEVEL_HELP)
@click.pass_context
def cli(ctx: click.Context, log_level: str | None) -> None:
    """OrbitMQ: a RocketMQ-compatible message queue."""
    if log_level is None:
        # A server's log is its output (readiness lines included). A client command reports
        # failures as one line of its own; the SDK's retry warnings would only repeat them.
        log_level = "INFO" if ctx.invoked_subcommand in SERVER_COMMANDS else "ERROR"
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


cli.add_command(namesrv_cmd)
cli.add_command(with_admin_subcommands(broker_cmd))  # broker status | config get|set | ...
cli.add_command(standalone_cmd)
cli.add_command(console_cmd)
cli.add_command(topic_group)
cli.add_command(group_group)
cli.add_command(send_cmd)
cli.add_command(consume_cmd)
cli.add_command(message_group)
cli.add_command(dlq_group)
cli.add_command(transaction_group)
cli.add_command(outbox_group)
cli.add_command(consumelog_group)
cli.add_command(cluster_group)
cli.add_command(producer_group)
cli.add_command(consumer_group)
cli.add_command(stats_group)
cli.add_command(store_group)
cli.add_command(user_group)
cli.add_command(acl_group)
for _command in (ops.group_connection_cmd, ops.group_config_cmd, ops.group_delete_cmd, ops.group_clone_offset_cmd,
                 ops.group_time_span_cmd):
    group_group.add_command(_command)
for _command in (ops.topic_cluster_list_cmd, ops.topic_consumer_groups_cmd,
                 ops.topic_queue_entries_cmd):
    topic_group.add_command(_command)
message_group.add_command(ops.message_print_cmd)
add_log_level_everywhere(cli)


def main() -> None:
    cli(prog_name="orbitmq")


if __name__ == "__main__":
    main()
