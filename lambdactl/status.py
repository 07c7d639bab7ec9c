"""`lambdactl status`: every service, its restarts, and each view's batch version and staleness."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from definitions.settings import Settings

log = logging.getLogger("lambdactl")


def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    from infra.stack import Stack

    rows = Stack(settings).status(probe=True)
    if args.json:
        sys.stdout.write(json.dumps([row.__dict__ for row in rows], indent=2) + "\n")
        return 0 if all(r.healthy for r in rows) else 1
    sys.stdout.write(format_status(rows))
    stale = False
    if any(r.name == "hbase-thrift" and r.healthy for r in rows):
        lines, stale = view_lines(settings)
        sys.stdout.write("\n".join(lines) + "\n")
    return 0 if all(r.healthy for r in rows) and not stale else 1


def view_lines(settings: Settings) -> tuple[list[str], bool]:
    """What `status` says of each view's batch part: version, cutoff, and staleness in words."""
    from definitions.times import iso_ms
    from serving_layer.service import ServingLayer, StoreUnavailable

    serving = ServingLayer(settings)
    try:
        states = serving.view_states()
    except StoreUnavailable as exc:
        return [f"views: the batch views' pointer cannot be read ({exc.component})"], False
    finally:
        serving.close()
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
    return lines, any(s.stale for s in states)


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
