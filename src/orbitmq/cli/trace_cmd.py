"""``orbitmq message trace --msg-id ID``: one message's journey (RocketMQ's queryMsgTraceById, with
the brokers' own knowledge added): who sent it, where it is stored, which groups and clients
consumed it, how long each step took, its retries and whether it is a dead letter."""

from __future__ import annotations

from typing import Any

import click

from orbitmq.cli.common import (
    cli_credentials,
    cli_tls,
    echo_json,
    format_ms,
    format_option,
    handles_errors,
    namesrv_option,
    table,
)

__all__ = ["trace_cmd", "describe_trace"]

ADMIN_TIMEOUT_S = 5.0


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value} ms"


def describe_trace(t: Any) -> str:
    """A MessageTrace for a person to read: the message, then each step with its time."""
    lines = [f"message {t.msg_id}  topic {t.topic or '-'}  tags {t.tags or '-'}  "
             f"keys {t.keys or '-'}"]
    if t.trace_context:
        lines.append(f"trace context (OpenTelemetry): {t.trace_context}")
    lines.append("")
    if t.published:
        lines.append(table(
            ["#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTime", "#Status",
             "#Broker"],
            [["Pub", p.producer_group, p.client_host, format_ms(p.time_ms), _ms(p.cost_ms),
              "success" if p.success else "failed", p.broker_addr or "-"] for p in t.published]))
    else:
        lines.append("no Pub record (the producer did not trace, or its records are not there yet)")
    s = t.stored
    if s is not None:
        lines.append("")
        lines.append(f"stored on broker {s.broker_name or '?'} ({s.store_host}) queue {s.queue_id} "
                     f"offset {s.queue_offset} at {format_ms(s.store_time_ms)}, born "
                     f"{format_ms(s.born_time_ms)} at {s.born_host} "
                     f"(birth to store {_ms(t.store_delay_ms)})")
    for x in t.transactions:
        lines.append(f"transaction ended {x.state} by {x.producer_group} at {x.client_host} "
                     f"{format_ms(x.time_ms)}{' (asked by a check)' if x.from_check else ''}")
    if t.consumed:
        lines.append("")
        lines.append(table(
            ["#Type", "#ConsumerGroup", "#ClientHost", "#ConsumeTime", "#Waited", "#CostTime",
             "#Status", "#RetryTimes"],
            [["Sub", c.consumer_group, c.client_host, format_ms(c.time_ms), _ms(t.wait_ms(c)),
              _ms(c.cost_ms), (c.outcome or "?") if c.success is not True else "success",
              str(c.retry_times)] for c in t.consumed]))
    if t.groups:
        lines.append("")
        lines.append(table(
            ["#Group", "#Consumed", "#Retries", "#DeadLetter"],
            [[g.group, {True: "yes", False: "no", None: "-"}[g.consumed], str(g.retries),
              format_ms(g.dead_letter_time_ms) if g.dead_letter_time_ms else "no"]
             for g in t.groups]))
    for problem in t.problems:
        lines.append(f"note: {problem}")
    return "\n".join(lines)


@click.command("trace")
@namesrv_option
@click.option("--msg-id", "-i", "msg_id", required=True,
              help="the message id (what send results and consumers show)")
@click.option("--topic", "-t", help="the message's topic, needed only when no trace record "
              "names it")
@click.option("--trace-topic", default=None, help="the topic the clients traced to "
              "[default: RMQ_SYS_TRACE_TOPIC]")
@click.option("--max", "max_num", type=click.IntRange(1, 65_536), default=64, show_default=True,
              help="trace messages read per broker at most")
@format_option
@handles_errors
def trace_cmd(namesrv: str, msg_id: str, topic: str | None, trace_topic: str | None,
              max_num: int, fmt: str) -> None:
    """Show one message's journey: sent by (producer group, client host), stored where,
    consumed by which groups and clients, how long each step took, retries, dead letter."""
    from orbitmq.client import Admin

    with Admin(namesrv, timeout=ADMIN_TIMEOUT_S, credentials=cli_credentials(),
               tls=cli_tls()) as admin:
        found = admin.message_trace(msg_id, topic=topic, trace_topic=trace_topic,
                                    max_num=max_num)
    if fmt == "json":
        echo_json(found.as_dict())
        return
    click.echo(describe_trace(found))
    if not found.records and found.stored is None:
        raise click.ClickException(f"no trace and no message found for {msg_id}")
