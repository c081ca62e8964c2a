"""``orbitmq cluster | producer | consumer | stats``: mqadmin's clusterList, producerConnection,
consumerStatus and statsAll (and GET_TOPICS_BY_CLUSTER as ``cluster topics``)."""

from __future__ import annotations

from typing import Any

import click

from orbitmq.cli.common import (
    cli_credentials,
    cli_tls,
    echo_json,
    format_option,
    handles_errors,
    namesrv_option,
    table,
)
from orbitmq.protocol.topics import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

__all__ = ["cluster_group", "producer_group", "consumer_group", "stats_group"]

ADMIN_TIMEOUT_S = 5.0
RETRY_PREFIX, DLQ_PREFIX = RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX


def _admin(namesrv: str) -> Any:
    from orbitmq.client import Admin

    return Admin(namesrv, timeout=ADMIN_TIMEOUT_S, credentials=cli_credentials(), tls=cli_tls())


# -- cluster ----------------------------------------------------------------------------------
@click.group("cluster")
def cluster_group() -> None:
    """Brokers of the clusters and their load."""


def _broker_row(admin: Any, m: Any) -> dict[str, Any]:
    from orbitmq.client import first_rate

    row: dict[str, Any] = m.as_dict()
    row["broker"] = row.pop("broker_name")
    if m.error:
        return row
    info = m.runtime
    row.update({
        "version": info.get("brokerVersionDesc", ""),
        "in_tps": first_rate(info.get("putTps")), "out_tps": first_rate(info.get("getTransferedTps")),
        "in_today": int(info.get("msgPutTotalTodayNow", 0)) - int(info.get("msgPutTotalTodayMorning", 0)),
        "out_today": int(info.get("msgGetTotalTodayNow", 0)) - int(info.get("msgGetTotalTodayMorning", 0)),
        "disk_ratio": float(info.get("commitLogDiskRatio", 0.0)),
    })
    if info.get("controllerMode") == "true":
        row.update({"controller_member": info.get("controllerMember", ""),
                    "controller_epoch": int(info.get("controllerEpoch", "0") or 0),
                    "controller_in_sync": info.get("controllerInSync", ""),
                    "controller_status": info.get("controllerStatus", "")})
    return row


def _lag_cells(r: dict[str, Any]) -> list[str]:
    if r["broker_id"] == 0:
        return ["", ""]
    lag_b = "" if r["lag_bytes"] is None else str(r["lag_bytes"])
    lag_s = "" if r["lag_seconds"] is None else f"{r['lag_seconds']:.1f}"
    return [lag_b, lag_s]


@cluster_group.command("list")
@namesrv_option
@click.option("--cluster", "-c", help="only this cluster")
@format_option
@handles_errors
def cluster_list_cmd(namesrv: str, cluster: str | None, fmt: str) -> None:
    """Every broker set with its members: role, address, version, rates (last 10 s), today's
    totals, disk use, and each slave's replication lag in bytes and seconds (mqadmin
    clusterList). A broker that does not answer is listed with its error."""
    with _admin(namesrv) as admin:
        rows = [_broker_row(admin, m) for m in admin.broker_members(cluster)]
    if fmt == "json":
        for row in rows:
            echo_json(row)
        return
    out = []
    for r in rows:
        figures = ([r["error"] or "unreachable", "", "", "", "", "", "", "", ""] if r["error"] else
                   [r["role"], *_lag_cells(r), r["version"], f"{r['in_tps']:.2f}",
                    f"{r['out_tps']:.2f}", str(r["in_today"]), str(r["out_today"]),
                    f"{r['disk_ratio']:.1%}"])
        out.append((r["cluster"], r["broker"], str(r["broker_id"]), r["addr"], *figures))
    click.echo(table(("CLUSTER", "BROKER", "BID", "ADDR", "ROLE", "LAG_BYTES", "LAG_S", "VERSION",
                      "IN_TPS", "OUT_TPS", "IN_TODAY", "OUT_TODAY", "DISK"), out))
    states = [f"{r['broker']} id {r['broker_id']}: {r['state']}" for r in rows
              if r.get("state") and r["state"] not in ("in sync",)]
    for line in states:
        click.echo(line)
    for r in rows:  # controller mode (docs/failover.md): epoch, in-sync set, what it does now
        if r.get("controller_member"):
            click.echo(f"{r['broker']} member {r['controller_member']}: epoch "
                       f"{r['controller_epoch']}, in sync [{r['controller_in_sync']}], "
                       f"{r['controller_status']}")


@cluster_group.command("topics")
@namesrv_option
@click.option("--cluster", "-c", required=True)
@format_option
@handles_errors
def cluster_topics_cmd(namesrv: str, cluster: str, fmt: str) -> None:
    """Topics with queues on a broker of the cluster (GET_TOPICS_BY_CLUSTER)."""
    with _admin(namesrv) as admin:
        known = {b.cluster for b in admin.cluster_brokers()}
        if cluster not in known:
            raise click.ClickException(f"no cluster named {cluster!r}; known: {sorted(known)}")
        topics = admin.topics_by_cluster(cluster)
    if fmt == "json":
        echo_json({"cluster": cluster, "topics": topics})
        return
    for topic in topics:
        click.echo(topic)


# -- producers --------------------------------------------------------------------------------
@click.group("producer")
def producer_group() -> None:
    """Producer groups."""


@producer_group.command("connection")
@namesrv_option
@click.option("--group", "-g", required=True, help="producer group")
@format_option
@handles_errors
def producer_connection_cmd(namesrv: str, group: str, fmt: str) -> None:
    """The live connections of a producer group, one per broker it talks to (mqadmin
    producerConnection)."""
    with _admin(namesrv) as admin:
        conns = admin.producer_connections(group)
    if not conns:
        raise click.ClickException(f"no producer of group {group} is connected")
    if fmt == "json":
        for c in conns:
            echo_json({"group": group, "client_id": c.client_id, "client_addr": c.client_addr,
                       "language": c.language, "version": c.version})
        return
    click.echo(table(("CLIENT_ID", "CLIENT_ADDR", "LANGUAGE", "VERSION"),
                     [(c.client_id, c.client_addr, c.language, str(c.version)) for c in conns]))


# -- consumers --------------------------------------------------------------------------------
@click.group("consumer")
def consumer_group() -> None:
    """Consumer clients (what they report about themselves)."""


def _held_queues(info: dict[str, Any]) -> list[str]:
    import orjson

    from orbitmq.client import running_info_queues

    return [f"{mq.topic}:{mq.broker_name}:{mq.queue_id}"
            for mq in running_info_queues(orjson.dumps(info))]


@consumer_group.command("status")
@namesrv_option
@click.option("--group", "-g", required=True)
@click.option("--client-id", "-i", help="only this client")
@format_option
@handles_errors
def consumer_status_cmd(namesrv: str, group: str, client_id: str | None, fmt: str) -> None:
    """What each client of a group reports (mqadmin consumerStatus): its settings,
    subscriptions and the queues it holds, asked of the client through a broker."""
    with _admin(namesrv) as admin:
        ids = [c.client_id for c in admin.consumer_connections(group).connections]
        if client_id is not None:
            if client_id not in ids:
                raise click.ClickException(f"client {client_id} of group {group} is not online")
            ids = [client_id]
        if not ids:
            raise click.ClickException(f"no client of group {group} is online")
        infos = [(i, admin.consumer_running_info(group, i)) for i in ids]
    for cid, info in infos:
        if fmt == "json":
            echo_json({"group": group, "client_id": cid, "running_info": info})
            continue
        props = info.get("properties") or {}
        click.echo(f"# {cid}")
        for key in sorted(props):
            click.echo(f"  {key} = {props[key]}")
        for sub in info.get("subscriptionSet") or []:
            if isinstance(sub, dict):
                click.echo(f"  subscription {sub.get('topic')}: {sub.get('subString', '*')}")
        held = _held_queues(info)
        click.echo(f"  queues held ({len(held)}): {' '.join(held) or '-'}")


# -- stats ------------------------------------------------------------------------------------
@click.group("stats")
def stats_group() -> None:
    """Traffic figures of topics and groups."""


def _topic_rows(admin: Any, topic: str) -> list[dict[str, Any]]:
    route = admin.topic_route(topic)
    masters = [bd.broker_addrs[0] for bd in route.broker_datas if 0 in bd.broker_addrs]
    puts = [admin.broker_stats(a, "TOPIC_PUT_NUMS", topic) for a in masters]
    in_tps, in_24h = sum(p.minute.tps for p in puts), sum(p.last_24h_sum() for p in puts)
    groups = admin.topic_consumer_groups(topic)
    if not groups:
        return [{"topic": topic, "group": None, "accumulation": 0, "in_tps": in_tps,
                 "out_tps": None, "in_24h": in_24h, "out_24h": None}]
    rows = []
    for group in groups:
        gets = [admin.broker_stats(a, "GROUP_GET_NUMS", f"{topic}@{group}") for a in masters]
        rows.append({"topic": topic, "group": group,
                     "accumulation": admin.group_status(group, topic).total_lag,
                     "in_tps": in_tps, "out_tps": sum(g.minute.tps for g in gets),
                     "in_24h": in_24h, "out_24h": sum(g.last_24h_sum() for g in gets)})
    return rows


def _rows_or_none(admin: Any, topic: str, *, strict: bool) -> list[dict[str, Any]]:
    """A topic's rows; when listing every topic, one that vanished or whose broker does not
    answer is left out (as mqadmin does) rather than ending the listing."""
    from orbitmq.errors import OrbitMQError

    try:
        return _topic_rows(admin, topic)
    except (OrbitMQError, OSError):
        if strict:
            raise
        return []


@stats_group.command("all")
@namesrv_option
@click.option("--topic", "-t", help="only this topic")
@click.option("--active", is_flag=True, help="only topics with traffic in the last 24 hours")
@format_option
@handles_errors
def stats_all_cmd(namesrv: str, topic: str | None, active: bool, fmt: str) -> None:
    """Per topic and consumer group: accumulation, in and out rates (last minute) and messages
    in the last 24 hours (mqadmin statsAll). Retry and dead-letter topics are left out."""
    with _admin(namesrv) as admin:
        topics = [topic] if topic else [t for t in admin.list_topics()
                                        if not t.startswith((RETRY_PREFIX, DLQ_PREFIX))]
        rows = [r for t in topics for r in _rows_or_none(admin, t, strict=topic is not None)
                if not active or r["in_24h"] or r["out_24h"]]
    if fmt == "json":
        for r in rows:
            echo_json(r)
        return
    click.echo(table(("TOPIC", "GROUP", "ACCUMULATION", "IN_TPS", "OUT_TPS", "IN_MSG_24H",
                      "OUT_MSG_24H"),
                     [(r["topic"], r["group"] or "", str(r["accumulation"]), f"{r['in_tps']:.2f}",
                       "" if r["out_tps"] is None else f"{r['out_tps']:.2f}", str(r["in_24h"]),
                       "NO_CONSUMER" if r["out_24h"] is None else str(r["out_24h"]))
                      for r in rows]))
