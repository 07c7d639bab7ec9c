"""`lambdactl status`: every service, its restarts, and each view's batch version and staleness."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys

from definitions.settings import Settings

log = logging.getLogger("lambdactl")


def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    """Exit 0 when every service is healthy and no view is stale, else 1 (both forms)."""
    from infra.stack import Stack

    rows = Stack(settings).status(probe=True)
    # the views are read through HBase's Thrift server: none when it is not healthy
    thrift = any(r.name == "hbase-thrift" and r.healthy for r in rows)
    views = view_states(settings) if thrift else "hbase-thrift is not healthy: the batch views' pointer is not read"
    stale = isinstance(views, list) and any(s.stale for s in views)
    if args.json:
        body = {
            "services": [row.__dict__ for row in rows],
            "views": [dataclasses.asdict(s) for s in views] if isinstance(views, list) else None,
            "views_error": views if isinstance(views, str) else None,
        }
        sys.stdout.write(json.dumps(body, indent=2) + "\n")
    else:
        sys.stdout.write(format_status(rows))
        if thrift:
            sys.stdout.write("\n".join(view_lines(views)) + "\n")
    return 0 if all(r.healthy for r in rows) and not stale else 1


def view_states(settings: Settings) -> list | str:
    """Each view's state (serving_layer.view_states.ViewState), or why they cannot be read."""
    from serving_layer.service import ServingLayer, StoreUnavailable

    serving = ServingLayer(settings)
    try:
        return serving.view_states()
    except StoreUnavailable as exc:
        return f"the batch views' pointer cannot be read ({exc.component})"
    finally:
        serving.close()


def view_lines(states: list | str) -> list[str]:
    """What `status` says of each view's batch part: version, cutoff, and staleness in words."""
    from definitions.times import iso_ms

    if isinstance(states, str):
        return [f"views: {states}"]
    lines = [f"\n{'VIEW':<30} {'BATCH':>5}  {'CUTOFF':<20}  STATE"]
    for s in states:
        version = str(s.version) if s.version is not None else "-"
        cutoff = iso_ms(s.cutoff_ms) if s.cutoff_ms else "-"
        said = (
            {
                "building": s.reason,
                "retired": "no longer declared; `lambdactl views apply` retires its table",
            }.get(s.state)
            or s.stale
            or "complete"
        )
        lines.append(f"{s.name:<30} {version:>5}  {cutoff:<20}  {s.state}: {said}")
    return lines


def format_status(rows) -> str:
    w = max([len("SERVICE"), *(len(r.name) for r in rows)])
    lines = [f"{'SERVICE':<{w}} {'STATE':<10} {'PID':>7} {'RSS MiB':>8} {'UP':>7} {'RESTARTS':>8}  DETAIL"]
    for r in rows:
        state = "healthy" if r.healthy else ("unhealthy" if r.running else "stopped")
        pid = str(r.pid) if r.pid else "-"
        uptime = f"{r.uptime_s:.0f}s" if r.running else "-"
        restarts = str(r.restarts) if r.name not in ("supervisor",) else ""
        detail = r.detail if not r.restart_detail or r.restart_detail == r.detail else f"{r.detail}; {r.restart_detail}"
        lines.append(f"{r.name:<{w}} {state:<10} {pid:>7} {r.rss_mb:>8.0f} {uptime:>7} {restarts:>8}  {detail}")
    total = sum(r.rss_mb for r in rows)
    lines.append(f"{'total':<{w}} {'':<10} {'':>7} {total:>8.0f}")
    return "\n".join(lines) + "\n"
