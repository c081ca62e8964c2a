"""The table and the targets of `make bench` (bench/run_bench.py), from one run's mqload results.

``build`` turns the raw runs into the JSON document written under bench/results/; ``render``
prints it. Every comparison is a ratio of two figures measured in the same run.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any

WORKLOAD_LABELS = {
    "pub p1": "publish, 1 producer, w1000 (msgs/s)",
    "sub": "consume all (msgs/s)",
    "pub p4": "publish, 4 producers, w1000 (msgs/s)",
    "batch64": "batch send 64 x 1 KiB, w16 (msgs/s)",
    "sync p1": "one at a time, p50/p99 (us)",
    "e2e 1k": "end to end, 1,000 msgs/s, p50/p99 (us)",
    "e2e max": "end to end, as fast as it goes, p50/p99 (us)",
    "e2e 50%": "end to end, 50% of e2e max, p50/p99 (us)",
}
E2E_WORKLOADS = ("e2e 1k", "e2e max", "e2e 50%")
E2E_PEER = "nats-js"  # the end-to-end targets' reference: NATS JetStream's push consumer
E2E_HALF_P99_MAX_MS = 5.0
# mqload's split of each delivery at the system's store time (bench/mqload/e2e.c): "in" from the
# send to the store, "out" from the store to the delivery; "tail": the medians of the two over the
# slowest 1% of deliveries.
E2E_SPLIT = ("in_p99_us", "out_p99_us", "tail_in_us", "tail_out_us")
# (OrbitMQ system, peer) pairs whose ratio the table shows: like acknowledgement semantics; and
# the same broker with its Prometheus endpoint on and scraped, next to it off (what metrics cost).
PAIRS = [("orbitmq-async", "nats-js"), ("orbitmq-async", "redis-everysec"),
         ("orbitmq-sync", "redis-always"), ("orbitmq-sync", "rabbit-quorum"),
         ("orbitmq-sync", "rabbit-classic"), ("orbitmq-async", "orbitmq-sink"),
         ("orbitmq-async-prom", "orbitmq-async"), ("orbitmq-auth-on", "orbitmq-auth-off"),
         ("orbitmq-auth-on", "orbitmq-auth-off-signing"),
         ("orbitmq-auth-on-stateful", "orbitmq-auth-off"),
         ("orbitmq-auth-off-signing", "orbitmq-auth-off")]
AUTH_ON, AUTH_OFF, AUTH_OFF_SIGNING = "orbitmq-auth-on", "orbitmq-auth-off", "orbitmq-auth-off-signing"
AUTH_ON_STATEFUL = "orbitmq-auth-on-stateful"


def _rate(runs: dict[tuple[str, str], dict[str, Any]], system: str, workload: str) -> float | None:
    rec = runs.get((system, workload))
    if rec is None or "msgs_s" not in rec or str(rec.get("errors", "0")) not in ("0", ""):
        return None
    return float(rec["msgs_s"])


def _lat(runs: dict[tuple[str, str], dict[str, Any]], system: str) -> tuple[float, float] | None:
    rec = runs.get((system, "sync p1"))
    if rec is None or "p50_us" not in rec:
        return None
    return float(rec["p50_us"]), float(rec["p99_us"])


def _e2e(runs: dict[tuple[str, str], dict[str, Any]], system: str,
         workload: str) -> dict[str, float] | None:
    """An e2e run's delivery latencies (us: p50, p99, p999, max), rate asked, rate carried
    (``msgs_s``: deliveries a second), deliveries and losses; None when it did not run or
    reported none."""
    rec = runs.get((system, workload))
    if rec is None or "e2e_p50_us" not in rec or int(rec.get("e2e_n", 0)) == 0:
        return None
    return {k: float(rec[f"e2e_{k}"]) for k in ("p50_us", "p99_us", "p999_us", "max_us", "n", "lost")
            } | {k: float(rec[f"e2e_{k}"]) for k in E2E_SPLIT if f"e2e_{k}" in rec
                 } | {"rate": float(rec["rate"]), "msgs_s": float(rec.get("e2e_msgs_s", 0)),
                      "behind_max_us": float(rec.get("behind_max_us", 0))}


def _target(name: str, value: float | None, goal: float, unit: str, higher: bool = True,
            why: str = "") -> dict[str, Any]:
    met = None if value is None else (value >= goal if higher else value <= goal)
    return {"target": name, "measured": None if value is None else round(value, 3),
            "goal": goal, "unit": unit, "higher_is_better": higher, "met": met, "note": why}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _p50(runs: dict[tuple[str, str], dict[str, Any]], system: str) -> float | None:
    lat = _lat(runs, system)
    return lat[0] if lat else None


def targets(runs: dict[tuple[str, str], dict[str, Any]], disk: dict[str, float]) -> list[dict[str, Any]]:
    """The targets of docs/performance.md, each as measured in this run (ratios of one run)."""
    r = _rate
    out = [
        _target("ASYNC_FLUSH 1 producer / NATS JetStream", _ratio(
            r(runs, "orbitmq-async", "pub p1"), r(runs, "nats-js", "pub p1")), 1.0, "x"),
        _target("ASYNC_FLUSH 4 producers / NATS JetStream", _ratio(
            r(runs, "orbitmq-async", "pub p4"), r(runs, "nats-js", "pub p4")), 1.0, "x"),
        _target("SYNC_FLUSH 4 producers / Redis appendfsync always", _ratio(
            r(runs, "orbitmq-sync", "pub p4"), r(runs, "redis-always", "pub p4")), 1.0, "x"),
        _target("SYNC_FLUSH 4 producers / RabbitMQ quorum", _ratio(
            r(runs, "orbitmq-sync", "pub p4"), r(runs, "rabbit-quorum", "pub p4")), 2.0, "x"),
    ]
    batch = r(runs, "orbitmq-async", "batch64")
    # The page cache's rate where the batch runs were (run_bench.run_all), the faster of the
    # two measured around them; the rate at the start of the sitting when those are missing.
    page = disk.get("page_cache_at_batch64_1k_msgs_s") or disk.get("page_cache_1k_msgs_s")
    goal = min(500_000.0, 0.7 * page) if page else 500_000.0
    out.append(_target("batch 64 x 1 KiB / min(500k msgs/s, 0.7x the page-cache write rate)",
                       _ratio(batch, goal), 1.0, "x",
                       why=f"page cache around the batch runs: {page:,} 1 KiB writes/s; goal "
                           f"{goal:,.0f} msgs/s" if page else "goal 500,000 msgs/s"))
    consume_peer = r(runs, "redis-everysec", "sub") or r(runs, "redis-always", "sub")
    out.append(_target("consume / Redis XREADGROUP", _ratio(r(runs, "orbitmq-async", "sub"),
                                                             consume_peer), 1.0, "x"))
    # One at a time (issue 41): ASYNC_FLUSH at most NATS's synchronous publish and 1.2x Redis
    # everysec's XADD, SYNC_FLUSH at most 1.1x Redis fsync-always.
    out.append(_target("orbitmq-async one-at-a-time p50 / Redis everysec p50",
                       _ratio(_p50(runs, "orbitmq-async"), _p50(runs, "redis-everysec")), 1.2,
                       "x", higher=False))
    for ours, peer, name, goal in (("orbitmq-async", "nats-js", "NATS synchronous publish", 1.0),
                                   ("orbitmq-sync", "redis-always", "Redis fsync-always", 1.1)):
        out.append(_target(f"{ours} one-at-a-time p50 / {name} p50",
                           _ratio(_p50(runs, ours), _p50(runs, peer)), goal, "x", higher=False))
        lat = _lat(runs, ours)
        peer_lat = _lat(runs, peer)
        why = f"{peer}: {peer_lat[1] / peer_lat[0]:.2f}" if peer_lat else ""
        if ours == "orbitmq-sync" and disk.get("fdatasync_p50_us"):
            why += (f"; the disk's own 1 KiB write+fdatasync p50 {disk['fdatasync_p50_us']} us, "
                    f"p99/p50 {disk['fdatasync_p99_us'] / disk['fdatasync_p50_us']:.2f}")
        out.append(_target(f"{ours} one-at-a-time p99/p50", lat[1] / lat[0] if lat else None,
                           3.0, "x", higher=False, why=why.lstrip("; ")))
    # Access control: the same broker build with authentication and authorization on and off, the
    # same load tool (bench/mqload), signed on the first.
    # ``why``: the broker's own share, on / off with the same signed load (the rest is what
    # signing costs the load tool, which shares the machine).
    # The stateful strategy's rows: the same, with a connection's signature checked once.
    for on, strategy in ((AUTH_ON, ""), (AUTH_ON_STATEFUL, " (stateful)")):
        for workload, label in (("pub p1", "1 producer"), ("pub p4", "4 producers"),
                                ("batch64", "batch 64")):
            share = _ratio(r(runs, on, workload), r(runs, AUTH_OFF_SIGNING, workload))
            out.append(_target(f"auth on{strategy} / off, ASYNC_FLUSH {label}", _ratio(
                r(runs, on, workload), r(runs, AUTH_OFF, workload)), 0.85, "x",
                why="" if share is None else f"the broker's share: on / off with the load "
                                             f"signed all the same {share:.2f}x"))
        out.append(_target(f"auth on{strategy} / off, one-at-a-time p50", _ratio(
            _p50(runs, on), _p50(runs, AUTH_OFF)), 1.1, "x", higher=False))
    out += e2e_targets(runs)
    peaks = [float(rec.get("server_peak_rss_mb", 0)) for (s, _), rec in runs.items()
             if s.startswith("orbitmq-") and s != "orbitmq-sink"]
    out.append(_target("broker peak RSS during the run", max(peaks) if peaks else None, 300.0, "MB",
                       higher=False, why="the 10-million-message soak is bench/soak_bench.py"))
    return out


def e2e_targets(runs: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 41's end-to-end targets: at 1,000 msgs/s, p50 <= 1.2x and p99 <= 2x NATS JetStream's
    push consumer; at half of the rate its own ``e2e max`` run carried, OrbitMQ's p99 <= 5 ms."""
    ours, peer = _e2e(runs, "orbitmq-async", "e2e 1k"), _e2e(runs, E2E_PEER, "e2e 1k")
    out = []
    for key, goal, label in (("p50_us", 1.2, "p50"), ("p99_us", 2.0, "p99")):
        value = _ratio(ours[key], peer[key]) if ours and peer else None
        why = f"{ours[key]:,.0f} vs {peer[key]:,.0f} us" if ours and peer else ""
        out.append(_target(f"e2e at 1,000 msgs/s {label} / NATS JetStream push {label}", value,
                           goal, "x", higher=False, why=why))
    half = _e2e(runs, "orbitmq-async", "e2e 50%")
    why = ""
    if half:
        why = (f"at {half['rate']:,.0f} msgs/s; p50 {half['p50_us']:,.0f} us, p99.9 "
               f"{half['p999_us']:,.0f} us; producer behind its schedule by up to "
               f"{half['behind_max_us'] / 1000:,.1f} ms")
        if "tail_in_us" in half:
            why += (f"; the slowest 1% spent {half['tail_in_us'] / 1000:,.1f} ms (median) before "
                    f"the store, {half['tail_out_us'] / 1000:,.1f} ms after it")
        rec = runs[("orbitmq-async", "e2e 50%")]
        if "machine_busy_pct" in rec:
            why += (f"; the machine's CPUs {rec['machine_busy_pct']}% busy (broker "
                    f"{rec['server_cpu_pct']}%, load tool {rec['client_cpu_pct']}% of one CPU)")
        if half["lost"]:
            why += f"; {half['lost']:,.0f} not delivered"
    out.append(_target("e2e at 50% of the e2e max rate, orbitmq-async p99", half["p99_us"] / 1000
                       if half else None, E2E_HALF_P99_MAX_MS, "ms", higher=False, why=why))
    return out


def build(results: list[dict[str, Any]], disk: dict[str, float], started: list[Any],
          notes: list[str], quick: bool) -> dict[str, Any]:
    runs = {(rec["system"], rec["workload"]): rec for rec in results}
    names = [s.name for s in started]
    ratios = []
    for ours, peer in PAIRS:
        if ours in names and peer in names:
            for workload in WORKLOAD_LABELS:
                if workload in E2E_WORKLOADS:
                    continue  # a fixed rate: its msgs/s is no comparison
                value = _ratio(_rate(runs, ours, workload), _rate(runs, peer, workload))
                if value is not None:
                    ratios.append({"orbitmq": ours, "peer": peer, "workload": workload,
                                   "ratio": round(value, 3)})
    return {
        "meta": {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": quick, "cpus": os.cpu_count(),
                 "python": platform.python_version(), "host": platform.node(),
                 "note": "one interleaved sitting on a shared, noisy machine: compare ratios only",
                 "skipped": notes,
                 "acks": {s.name: s.acks for s in started}},
        "disk": disk,
        "systems": names,
        "runs": results,
        "ratios": ratios,
        "targets": targets(runs, disk),
    }


def _cell(runs: dict[tuple[str, str], dict[str, Any]], system: str, workload: str) -> str:
    rec = runs.get((system, workload))
    if rec is None:
        return "-"
    if "msgs_s" not in rec:
        return "FAILED"
    if workload in E2E_WORKLOADS:
        e2e = _e2e(runs, system, workload)
        return "FAILED" if e2e is None else f"{e2e['p50_us']:.0f}/{e2e['p99_us']:.0f}"
    if workload == "sync p1":
        return f"{float(rec['p50_us']):.0f}/{float(rec['p99_us']):.0f}"
    errors = str(rec.get("errors", "0"))
    return f"{float(rec['msgs_s']):,.0f}" + ("" if errors in ("0", "") else f" ({errors} err)")


def render(doc: dict[str, Any]) -> str:
    runs = {(rec["system"], rec["workload"]): rec for rec in doc["runs"]}
    names: list[str] = doc["systems"]
    width = max(15, *(len(n) + 1 for n in names))
    lines = [f"\nOrbitMQ vs peers, 1 KiB messages, mqload ({'quick' if doc['meta']['quick'] else 'full'}"
             f" run, {doc['meta']['date']}; {doc['meta']['note']})",
             f"{'workload':<38}" + "".join(f"{n:>{width}}" for n in names)]
    for workload, label in WORKLOAD_LABELS.items():
        lines.append(f"{label:<38}" + "".join(f"{_cell(runs, n, workload):>{width}}" for n in names))
    lines.append(f"{'server peak RSS (MB)':<38}" + "".join(
        f"{max((float(r.get('server_peak_rss_mb', 0)) for (s, _), r in runs.items() if s == n), default=0):>{width}.0f}"
        for n in names))
    disk = doc["disk"]
    lines.append(f"disk in this run: page cache {disk['page_cache_write_mb_s']:,.0f} MB/s at the "
                 f"start, {disk['fdatasync_per_s']:,} fdatasync/s (1 KiB each, p50 "
                 f"{disk.get('fdatasync_p50_us', '?')} us, p99 {disk.get('fdatasync_p99_us', '?')} us)")
    around = disk.get("page_cache_at_batch64_mb_s")
    if around:
        lines.append("page cache around the batch runs: "
                     + ", ".join(f"{v:,.0f} MB/s {k.removesuffix('_mb_s')}" for k, v in around.items()))
    lines += _render_e2e(runs, names)
    if doc["ratios"]:
        lines.append("\nOrbitMQ / peer (same run):")
        for r in doc["ratios"]:
            lines.append(f"  {r['orbitmq']:<14} / {r['peer']:<15} {r['workload']:<8} {r['ratio']:7.2f}x")
    lines.append("\ntargets (docs/performance.md):")
    for t in doc["targets"]:
        state = {True: "met", False: "NOT met", None: "n/a (not run)"}[t["met"]]
        value = "-" if t["measured"] is None else f"{t['measured']:,.2f} {t['unit']}"
        goal = f"{'>=' if t['higher_is_better'] else '<='} {t['goal']:g}"
        lines.append(f"  {t['target']:<66} {value:>14}  (goal {goal}) {state}"
                     + (f"  [{t['note']}]" if t["note"] else ""))
    for name, acks in doc["meta"]["acks"].items():
        lines.append(f"  {name}: acks {acks}")
    for note in doc["meta"]["skipped"]:
        lines.append(f"  skipped {note}")
    return "\n".join(lines)


def _render_e2e(runs: dict[tuple[str, str], dict[str, Any]], names: list[str]) -> list[str]:
    """The end-to-end runs in full: each message's delivery to a waiting consumer minus its send,
    on one clock, and whether the producer kept its rate."""
    rows = []
    for workload in E2E_WORKLOADS:
        for name in names:
            rec = runs.get((name, workload))
            if rec is None:
                continue
            e2e = _e2e(runs, name, workload)
            if e2e is None:
                why = rec.get("error", "no deliveries").splitlines()[-1:] or ["?"]
                rows.append(f"  {workload:<8} {name:<15} FAILED: {why[0][:120]}")
                continue
            rows.append(f"  {workload:<8} {name:<15} {e2e['rate']:>10,.0f} {e2e['msgs_s']:>9,.0f} "
                        f"{e2e['p50_us']:>8,.0f} {e2e['p99_us']:>8,.0f} {e2e['p999_us']:>8,.0f} "
                        f"{e2e['max_us']:>8,.0f} "
                        f"{e2e['n']:>9,.0f} {e2e['lost']:>6,.0f} {e2e['behind_max_us'] / 1000:>8,.1f}"
                        + "".join(f" {e2e[k]:>8,.0f}" if k in e2e else f" {'-':>8}"
                                  for k in E2E_SPLIT)
                        + f" {rec.get('machine_busy_pct', '-'):>5}")
    if not rows:
        return []
    return ["\nend to end (delivery to a waiting consumer - send, one clock; us):",
            f"  {'workload':<8} {'system':<15} {'rate':>10} {'carried':>9} {'p50':>8} {'p99':>8} "
            f"{'p99.9':>8} {'max':>8} {'delivered':>9} {'lost':>6} {'behind ms':>8} "
            f"{'in p99':>8} {'out p99':>8} {'tail in':>8} {'tail out':>8} {'cpu%':>5}", *rows,
            "  (in: send to the system's store time, out: store to delivery; tail: medians of the"
            " slowest 1%; cpu%: the machine's CPUs busy)"]
