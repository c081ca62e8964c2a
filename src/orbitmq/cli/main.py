"""The ``orbitmq`` command."""

from __future__ import annotations

import logging
import sys

import click

from orbitmq import __version__
from orbitmq.cli.servers import broker_cmd, namesrv_cmd, standalone_cmd


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="orbitmq")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def cli(log_level: str) -> None:
    """OrbitMQ: a RocketMQ-compatible message queue."""
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


cli.add_command(namesrv_cmd)
cli.add_command(broker_cmd)
cli.add_command(standalone_cmd)


def main() -> None:
    cli(prog_name="orbitmq")


if __name__ == "__main__":
    main()
