"""`lambdactl`: the platform's command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from datetime import UTC
from pathlib import Path

from definitions.logs import configure
from definitions.settings import Settings, get_settings
from infra.errors import StackError

log = logging.getLogger("lambdactl")


def _say(message: str) -> None:
    log.info("%s", message)


def cmd_up(settings: Settings, args: argparse.Namespace) -> int:
    from infra.stack import Stack

    started = time.monotonic()
    outcome = Stack(settings).up(on_progress=_say)
    changed = [name for name, what in outcome.items() if what == "started"]
    if changed:
        _say(f"stack up in {time.monotonic() - started:.0f}s; started: {', '.join(changed)}")
    else:
        _say("stack already up; nothing changed")
    return 0


def cmd_bootstrap(settings: Settings, args: argparse.Namespace) -> int:
    from infra.bootstrap import bootstrap

    bootstrap(settings)
    _say("topics, HBase namespace and meta table, Cassandra keyspace are in place")
    return 0


def cmd_down(settings: Settings, args: argparse.Namespace) -> int:
    from infra.stack import Stack

    outcome = Stack(settings).down(on_progress=_say)
    if not any(what == "stopped" for what in outcome.values()):
        _say("nothing was running")
    return 0


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
        lines.append(f"{s.name:<30} {version:>5}  {cutoff:<20}  {s.stale or 'complete'}")
    return lines, any(s.stale for s in states)


def format_status(rows) -> str:
    lines = [f"{'SERVICE':<15} {'STATE':<10} {'PID':>7} {'RSS MiB':>8} {'UP':>7} {'RESTARTS':>8}  DETAIL"]
    for r in rows:
        state = "healthy" if r.healthy else ("unhealthy" if r.running else "stopped")
        pid = str(r.pid) if r.pid else "-"
        uptime = f"{r.uptime_s:.0f}s" if r.running else "-"
        restarts = str(r.restarts) if r.name not in ("supervisor",) else ""
        detail = r.detail if not r.restart_detail or r.restart_detail == r.detail else f"{r.detail}; {r.restart_detail}"
        lines.append(f"{r.name:<15} {state:<10} {pid:>7} {r.rss_mb:>8.0f} {uptime:>7} {restarts:>8}  {detail}")
    total = sum(r.rss_mb for r in rows)
    lines.append(f"{'total':<15} {'':<10} {'':>7} {total:>8.0f}")
    return "\n".join(lines) + "\n"


def cmd_logs(settings: Settings, args: argparse.Namespace) -> int:
    from infra.process import ProcessSupervisor, tail_file

    path = ProcessSupervisor(settings.state_dir).log_file(args.service)
    if not path.exists():
        raise StackError(args.service, f"no log at {path}")
    sys.stdout.write(tail_file(path, args.lines) + "\n")
    if args.follow:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            try:
                while True:
                    chunk = handle.read()
                    if chunk:
                        sys.stdout.write(chunk.decode("utf-8", errors="replace"))
                        sys.stdout.flush()
                    else:
                        time.sleep(0.5)
            except KeyboardInterrupt:
                return 0
    return 0


def cmd_generate(settings: Settings, args: argparse.Namespace) -> int:
    import contextlib
    from datetime import datetime

    from ingest.generator import GeneratorConfig, produce, read_sent
    from ingest.truth import write_truth

    start = datetime.fromisoformat(args.start).astimezone(UTC) if args.start else None
    config = GeneratorConfig(
        seed=args.seed,
        count=args.count,
        rate=args.rate,
        pages=args.pages,
        users=args.users,
        span_s=args.span,
        start=start,
        late_fraction=args.late_fraction,
        late_min_s=args.late_min,
        late_max_s=args.late_max,
        duplicate_fraction=args.duplicate_fraction,
        invalid_fraction=args.invalid_fraction,
        topic=args.topic or "",
    )
    events_out = args.events_out
    if args.truth_out and not events_out:
        events_out = args.truth_out.with_suffix(".events.jsonl")
    with contextlib.ExitStack() as stack:
        handle = stack.enter_context(open(events_out, "w")) if events_out else None
        report = produce(settings, config, handle, progress_every=max(1000, args.count // 10))
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(report.by_kind.items()))
    _say(f"sent {report.sent} records in {report.seconds:.1f}s ({report.rate:,.0f}/s); {kinds}")
    if events_out:
        _say(f"what was sent: {events_out}")
    if args.truth_out:
        write_truth(read_sent(events_out), args.granularity, args.truth_out)
        _say(f"ground truth ({args.granularity} buckets): {args.truth_out}")
    return 0 if report.failed == 0 else 1


def cmd_batch(settings: Settings, args: argparse.Namespace) -> int:
    """Run a batch recomputation, or one of its steps (what the Airflow DAG's tasks call)."""
    from batch_layer.hbase_writer import VerificationError
    from batch_layer.job import CutoffError, choose_cutoff, iso, parse_cutoff, run_batch, swap_version, verify_version
    from definitions.views import load_views
    from stores.batch_views import PointerMoved, VersionStore

    cutoff = parse_cutoff(args.cutoff) if args.cutoff else None
    try:
        if args.plan:
            current = VersionStore(settings).pointer()
            names = args.views.split(",") if args.views else load_views(settings).names()
            planned = choose_cutoff(settings, cutoff, current, names)
            # new when some view of the run would move past the cutoff it serves at
            fresh = current is None or any(current.entry(n) is None or current.cutoff_of(n) < planned for n in names)
            _emit(
                {
                    "cutoff": iso(planned),
                    "cutoff_ms": planned,
                    "new": fresh,
                    "views": names,
                    "serving_version": current.version if current else None,
                }
            )
            return 0 if fresh or args.force else 3
        if args.verify is not None:
            tables = verify_version(settings, args.verify)
            _emit({"version": args.verify, "verified": {k: vars(v) for k, v in tables.items()}})
            return 0
        if args.swap is not None:
            pointer = swap_version(settings, args.swap)
            moved = {n: e.cutoff_ms for n, e in pointer.entries.items() if e.version == args.swap}
            _emit(
                {
                    "version": args.swap,
                    "cutoff": iso(max(moved.values(), default=0)),
                    "views": sorted(moved),
                    "swapped": True,
                }
            )
            return 0
        result = run_batch(
            settings, cutoff, args.views.split(",") if args.views else None, args.force, swap=not args.no_swap
        )
    except (CutoffError, VerificationError, PointerMoved) as exc:
        log.error("batch refused: %s", exc)
        return 2
    if result.skipped:
        _say(f"nothing to do: version {result.version} already serves cutoff {iso(result.cutoff_ms)}")
    else:
        verb = "now serves" if not args.no_swap else "is written and verified, not yet serving,"
        _say(
            f"version {result.version} {verb} {', '.join(result.tables)} below {iso(result.cutoff_ms)} "
            f"({result.events:,} distinct events, {result.seconds:.0f}s)"
        )
        for name, stats in result.tables.items():
            _say(f"  {name}: {stats.rows:,} rows, {stats.cells:,} cells, checksum {stats.checksum:,}")
        if not args.no_swap and not args.no_report:
            # The accuracy report of the window this run absorbed (the DAG runs it as its own task).
            try:
                cmd_report(settings, argparse.Namespace(version=result.version, limit=0, json=False))
            except Exception:  # the batch itself is done and serving; say what failed
                log.exception("the accuracy report failed; version %d serves all the same", result.version)
    if args.json:
        _emit(
            {
                "version": result.version,
                "cutoff": iso(result.cutoff_ms),
                "cutoff_ms": result.cutoff_ms,
                "run_id": result.run_id,
                "skipped": result.skipped or None,
            }
        )
    return 0


def cmd_report(settings: Settings, args: argparse.Namespace) -> int:
    """Build the accuracy report of a batch version's ingest window, or list the reports."""
    from reports.build import NoWindow, produce, window_for_version
    from reports.storage import list_reports

    if args.version is None:
        for rid, report in list_reports(settings, args.limit):
            window = report.get("window") or {}
            _say(f"{rid}: {window.get('start')} → {window.get('end')} (version {report.get('version')})")
        return 0
    try:
        window = window_for_version(settings, args.version)
    except NoWindow as exc:
        log.error("%s", exc)
        return 2
    from definitions.spark import spark_session

    spark = spark_session(settings, "lambda-report", {"spark.driver.memory": settings.batch.driver_memory})
    report, paths = produce(settings, spark, window)
    url = f"http://{settings.api.host}:{settings.api.port}/api/v1/reports/{report['id']}/html"
    _say(f"report {report['id']} for version {args.version}: {url} ({paths.get('json')})")
    if args.json:
        _emit({"id": report["id"], "url": url, **paths})
    return 0


def cmd_clean_realtime(settings: Settings, args: argparse.Namespace) -> int:
    from speed_layer.realtime_cleanup import delete_absorbed
    from stores.batch_views import VersionStore

    pointer = VersionStore(settings).pointer()
    if pointer is None:
        _say("no batch version serves yet: every realtime row is still needed")
        return 0
    # Each view's rows below the cutoff its own batch table covers; a view no table serves keeps all.
    cutoffs = pointer.cleanup_cutoffs_s()
    cleanup = delete_absorbed(settings, cutoffs)
    _say(f"realtime clean-up below each view's serving cutoff: {cleanup.summary()}")
    if args.json:
        _emit(
            {
                "version": pointer.version,
                "cutoffs_s": cutoffs,
                "cutoff_s": cleanup.cutoff_s,
                "rows_below_cutoff": cleanup.rows_below_cutoff,
                "deletions": cleanup.deletions,
                "complete": cleanup.complete,
                "unreadable": [u.describe() for u in cleanup.unreadable],
            }
        )
    return 0


def _emit(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")


def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    """Run one service in the foreground (containers, systemd): render its config, then exec it."""
    import os

    from infra.java import find_java
    from infra.services import BY_NAME
    from infra.stack import Stack

    service = BY_NAME.get(args.service)
    if service is None:
        raise StackError(args.service, f"unknown service; known: {', '.join(BY_NAME)}")
    java = find_java(settings.stack.java_home)
    command = Stack(settings, [service.name]).prepare(service, java)
    os.chdir(service.dirs(settings).root)
    os.execv(command[0], command)
    return 0  # not reached


def cmd_config(settings: Settings, args: argparse.Namespace) -> int:
    from definitions.settings_store import provenance

    rows = provenance(settings)
    if args.json:
        sys.stdout.write(json.dumps([{"setting": k, "value": v, "source": src} for k, v, src in rows], indent=2) + "\n")
        return 0
    width = max(len(k) for k, _, _ in rows)
    for key, value, source in rows:
        if args.explicit and source == "default":
            continue
        sys.stdout.write(f"{key:<{width}}  {json.dumps(value):<40}  {source}\n")
    return 0


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from lambdactl.demo import run_demo

    return run_demo(settings, count=args.count, rate=args.rate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lambdactl", description="Run and inspect the Lambda-architecture platform.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start the local stack and wait until every service is healthy").set_defaults(func=cmd_up)
    sub.add_parser(
        "bootstrap", help="create the topics, HBase tables and Cassandra keyspace the platform uses"
    ).set_defaults(func=cmd_bootstrap)
    sub.add_parser("down", help="stop every process of the local stack").set_defaults(func=cmd_down)
    status = sub.add_parser("status", help="each service's state, memory and health")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=cmd_status)
    logs = sub.add_parser("logs", help="the tail of a service's log")
    logs.add_argument("service")
    logs.add_argument("-n", "--lines", type=int, default=50)
    logs.add_argument("-f", "--follow", action="store_true")
    logs.set_defaults(func=cmd_logs)
    gen = sub.add_parser("generate", help="produce a realistic, seeded clickstream into Kafka")
    gen.add_argument("--count", type=int, default=10_000, help="records to send")
    gen.add_argument("--rate", type=float, default=0.0, help="records per second (0: as fast as possible)")
    gen.add_argument("--seed", type=int, default=42)
    gen.add_argument("--pages", type=int, default=500)
    gen.add_argument("--users", type=int, default=5_000)
    gen.add_argument(
        "--span",
        type=float,
        default=0.0,
        help="spread event times over this many seconds before --start, following a daily rhythm (0: live)",
    )
    gen.add_argument("--start", help="ISO time the simulated span ends at (default: now)")
    gen.add_argument("--late-fraction", type=float, default=0.0)
    gen.add_argument("--late-min", type=float, default=3_600.0, help="seconds")
    gen.add_argument("--late-max", type=float, default=172_800.0, help="seconds")
    gen.add_argument("--duplicate-fraction", type=float, default=0.0)
    gen.add_argument("--invalid-fraction", type=float, default=0.0)
    gen.add_argument("--topic", help="default: the events topic from settings")
    gen.add_argument(
        "--events-out", type=Path, help="write every sent record (kind, partition, offset, ingest time) as JSONL"
    )
    gen.add_argument("--truth-out", type=Path, help="write the ground-truth view values the valid events imply")
    gen.add_argument("--granularity", choices=["minute", "hour", "day"], default="hour")
    gen.set_defaults(func=cmd_generate)
    batch = sub.add_parser("batch", help="recompute the batch views now")
    batch.add_argument("--cutoff", help="ISO time on an ingest-bucket boundary (default: the last complete one)")
    batch.add_argument(
        "--views",
        help="comma-separated view names (default: all); only these views' pointer "
        "entries move, the others keep their version and cutoff",
    )
    batch.add_argument("--force", action="store_true", help="recompute even if the views are served at this cutoff")
    batch.add_argument("--json", action="store_true", help="also print the result as JSON on stdout")
    batch.add_argument("--no-report", action="store_true", help="skip the accuracy report after the swap")
    steps = batch.add_mutually_exclusive_group()
    steps.add_argument(
        "--plan",
        action="store_true",
        help="only print the cutoff a run would use; exit 3 if no view of the run would move past "
        "the cutoff it is served at",
    )
    steps.add_argument("--no-swap", action="store_true", help="write and verify a new version, leave serving as it is")
    steps.add_argument("--verify", type=int, metavar="VERSION", help="check a written version's tables again")
    steps.add_argument(
        "--swap",
        type=int,
        metavar="VERSION",
        help="move the pointer entries of a verified version's views to it (compare-and-set: "
        "refused if another run swapped since this one read the pointer)",
    )
    batch.set_defaults(func=cmd_batch)
    report = sub.add_parser("report", help="build (--version N) or list speed-vs-batch accuracy reports")
    report.add_argument("--version", type=int, help="the batch version whose ingest window to report on")
    report.add_argument("--limit", type=int, default=20, help="how many reports to list")
    report.add_argument("--json", action="store_true")
    report.set_defaults(func=cmd_report)
    clean = sub.add_parser("clean-realtime", help="delete realtime rows the serving batch version has absorbed")
    clean.add_argument("--json", action="store_true", help="also print the outcome as one JSON line")
    clean.set_defaults(func=cmd_clean_realtime)
    run = sub.add_parser("run", help="run one service in the foreground (for containers and service managers)")
    run.add_argument("service")
    run.set_defaults(func=cmd_run)
    config = sub.add_parser("config", help="the effective settings and where each came from")
    config.add_argument("--json", action="store_true", help="machine-readable output")
    config.add_argument("--explicit", action="store_true", help="only the settings that are not defaults")
    config.set_defaults(func=cmd_config)
    demo = sub.add_parser("demo", help="the whole story on generated data")
    demo.add_argument("--count", type=int, default=20_000, help="records to stream")
    demo.add_argument("--rate", type=float, default=1_000.0, help="records per second")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure("lambdactl", "DEBUG" if args.verbose else "INFO", "short")
    from definitions.settings_store import SettingsConflict

    try:
        settings = get_settings()
    except (SettingsConflict, ValueError) as exc:  # a conflict, or a setting that does not validate
        log.error("%s", exc)
        return 2
    try:
        return args.func(settings, args)
    except StackError as exc:
        log.error("%s", exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
