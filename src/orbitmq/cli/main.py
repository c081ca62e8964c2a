"""The ``orbitmq`` command."""

from __future__ import annotations

import logging
import sys

import click

from orbitmq import __version__
from orbitmq.cli.consume_cmd import consume_cmd
from orbitmq.cli.consumelog_cmd import consumelog_group
from orbitmq.cli.dlq_cmd import dlq_group
from orbitmq.cli.group_cmd import group_group
from orbitmq.cli.message_cmd import message_group
from orbitmq.cli.outbox_cmd import outbox_group
from orbitmq.cli.send_cmd import send_cmd
from orbitmq.cli.servers import broker_cmd, namesrv_cmd, standalone_cmd
from orbitmq.cli.topic_cmd import topic_group
from orbitmq.cli.transaction_cmd import transaction_group

SERVER_COMMANDS = frozenset({"namesrv", "broker", "standalone"})


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="orbitmq")
@click.option("--log-level", default=None,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              help="[default: INFO for servers, ERROR for client commands]")
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
cli.add_command(broker_cmd)
cli.add_command(standalone_cmd)
cli.add_command(topic_group)
cli.add_command(group_group)
cli.add_command(send_cmd)
cli.add_command(consume_cmd)
cli.add_command(message_group)
cli.add_command(dlq_group)
cli.add_command(transaction_group)
cli.add_command(outbox_group)
cli.add_command(consumelog_group)


def main() -> None:
    cli(prog_name="orbitmq")


if __name__ == "__main__":
    main()
