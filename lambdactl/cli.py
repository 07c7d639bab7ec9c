"""`lambdactl`: the platform's command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence

from definitions.logs import configure
from definitions.settings import Settings, get_settings
from definitions.views import view_names
from infra.errors import StackError
from lambdactl import accept_loss, compact, generate, housekeeping, reset_speed
from lambdactl.arg_types import Parser, at_least_one, given, iso_time, log_lines, positive
from lambdactl.batch import cmd_batch, cmd_clean_realtime
from lambdactl.output import _emit, _say
from lambdactl.replay import cmd_replay
from lambdactl.report import cmd_report
from lambdactl.status import cmd_status
from lambdactl.views import cmd_views, cmd_views_apply

log = logging.getLogger("lambdactl")


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


def cmd_logs(settings: Settings, args: argparse.Namespace) -> int:
    from infra.process import ProcessSupervisor, follow_command, tail_file

    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", args.service):
        raise StackError(args.service, "not a service name (`lambdactl status` lists them)")
    path = ProcessSupervisor(settings.state_dir).log_file(args.service)
    if not path.exists():
        raise StackError(args.service, f"no log at {path}")
    if args.follow:
        try:
            return subprocess.run(follow_command(path, args.lines), check=False).returncode
        except KeyboardInterrupt:
            return 0
    sys.stdout.write(tail_file(path, args.lines) + "\n")
    return 0


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
    from definitions.settings_store import SettingsConflict, persisted_path, provenance, unset

    if args.unset:
        try:
            removed = unset(settings, args.unset)
        except SettingsConflict as exc:
            log.error("%s", exc)
            return 2
        path = persisted_path(settings)
        log.info(
            "%s taken out of %s; running processes keep what they loaded until `lambdactl up` restarts them"
            if removed
            else "%s is not in %s: nothing changed",
            args.unset,
            path,
        )
        if args.json:
            _emit({"unset": args.unset, "removed": bool(removed), "file": str(path)})
        return 0
    rows = [row for row in provenance(settings) if not (args.explicit and row[2] == "default")]
    if args.json:
        sys.stdout.write(json.dumps([{"setting": k, "value": v, "source": src} for k, v, src in rows], indent=2) + "\n")
        return 0
    width = max((len(k) for k, _, _ in rows), default=0)
    for key, value, source in rows:
        sys.stdout.write(f"{key:<{width}}  {json.dumps(value):<40}  {source}\n")
    return 0


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from lambdactl.demo import run_demo

    return run_demo(settings, count=args.count, rate=args.rate)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="lambdactl", description="Run and inspect the Lambda-architecture platform.")
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
    logs.add_argument("-n", "--lines", type=log_lines, default=50, help="how many lines, 1 to 100,000")
    logs.add_argument("-f", "--follow", action="store_true")
    logs.set_defaults(func=cmd_logs)
    generate.add_parser(sub)
    batch = sub.add_parser("batch", help="recompute the batch views now")
    batch.add_argument(
        "--cutoff", type=iso_time, help="ISO time on an ingest-bucket boundary (default: the last complete one)"
    )
    batch.add_argument(
        "--views",
        type=view_names,
        help="comma-separated view names (default: all); only these views' pointer "
        "entries move, the others keep their version and cutoff",
    )
    batch.add_argument("--force", action="store_true", help="recompute even if the views are served at this cutoff")
    batch.add_argument("--json", action="store_true", help="also print the result as JSON on stdout")
    batch.add_argument("--no-report", action="store_true", help="skip the accuracy report after the swap")
    batch.add_argument(
        "--skip-if-overtaken",
        action="store_true",
        help="exit 3 instead of refusing when a run beside this one (another `lambdactl batch`, the DAG) "
        "swapped first, serving each view of this run at or past its cutoff",
    )
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
    report.add_argument(
        "--reuse",
        action="store_true",
        help="name a stored report of that version instead of building another (a retried task)",
    )
    report.add_argument("--limit", type=at_least_one, default=20, help="how many reports to list")
    report.add_argument("--json", action="store_true")
    report.set_defaults(func=cmd_report)
    clean = sub.add_parser(
        "clean-realtime",
        help="delete realtime rows the serving batch version has absorbed (exit 5: some were left for a later clean-up)",
    )
    clean.add_argument("--json", action="store_true", help="also print the outcome as one JSON line")
    clean.set_defaults(func=cmd_clean_realtime)
    accept_loss.add_parser(sub)
    reset_speed.add_parser(sub)
    housekeeping.add_parser(sub)
    compact.add_parser(sub)
    run = sub.add_parser("run", help="run one service in the foreground (for containers and service managers)")
    run.add_argument("service")
    run.set_defaults(func=cmd_run)
    views = sub.add_parser("views", help="each view's state (building, serving, retired); `views apply` to change them")
    views.add_argument("--json", action="store_true", help="machine-readable output")
    views.set_defaults(func=cmd_views)
    views_sub = views.add_subparsers(dest="views_command")
    apply = views_sub.add_parser(
        "apply",
        help="bring the running platform to the declared views: restart the speed layer with them, build the "
        "history of new ones in a batch run, retire removed ones; the other views keep answering (exit 5: "
        "rows of a retired view left for a later clean-up)",
    )
    modules = apply.add_mutually_exclusive_group()
    modules.add_argument("--modules", help="comma-separated view modules: set the persisted views.modules first")
    modules.add_argument(
        "--no-modules",
        action="store_true",
        help="declare no view module: the built-in views only (every view a module declares is retired)",
    )
    paths = apply.add_mutually_exclusive_group()
    paths.add_argument(
        "--paths",
        help="with --modules or --no-modules: comma-separated absolute directories searched for them first (views.paths)",
    )
    paths.add_argument(
        "--no-paths",
        action="store_true",
        help="with --modules or --no-modules: search no directory of views.paths (installed modules only)",
    )
    apply.add_argument(
        "--timeout", type=positive, default=1800.0, help="seconds to wait for the speed layer and the master dataset"
    )
    apply.set_defaults(func=cmd_views_apply)
    replay = sub.add_parser(
        "replay",
        help="rebuild a view's realtime rows by re-reading Kafka through the speed layer's code (docs/changing-views.md)",
    )
    replay.add_argument("--view", required=True, type=given, help="the view to replay")
    replay.add_argument(
        "--from",
        dest="from_",
        type=given,
        help="the first ingest time replayed: an ISO time with a zone, or offsets:PARTITION=OFFSET,... "
        "(default: the view's batch cutoff)",
    )
    replay.add_argument(
        "--resume",
        action="store_true",
        help="take over the mark of an interrupted replay of the view (refused when none holds it)",
    )
    replay.add_argument(
        "--cancel",
        action="store_true",
        help="take off the mark of an interrupted replay of the view and delete the rows it wrote",
    )
    replay.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    replay.set_defaults(func=cmd_replay)
    config = sub.add_parser("config", help="the effective settings and where each came from")
    config.add_argument("--json", action="store_true", help="machine-readable output")
    config.add_argument("--explicit", action="store_true", help="only the settings that are not defaults")
    config.add_argument(
        "--unset",
        metavar="SETTING",
        type=given,
        help="take a setting (e.g. environment, api.admin_token) out of the persisted settings: its default "
        "applies again unless the environment or the TOML file gives it",
    )
    config.set_defaults(func=cmd_config)
    demo = sub.add_parser("demo", help="the whole story on generated data")
    demo.add_argument("--count", type=at_least_one, default=20_000, help="records to stream")
    demo.add_argument("--rate", type=positive, default=1_000.0, help="records per second")
    demo.set_defaults(func=cmd_demo)
    return parser


def _stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (poll says POLLERR)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # AttributeError: started with no standard output
        return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "batch" and (args.verify is not None or args.swap is not None):
        ignored = [
            name
            for name, given in (("--views", args.views), ("--cutoff", args.cutoff), ("--force", args.force))
            if given
        ]
        if ignored:
            parser.error(
                f"--verify and --swap act on the version given, whose run chose its views and cutoff: "
                f"{', '.join(ignored)} do not apply"
            )
    if args.command == "config" and args.unset and args.explicit:
        parser.error("--explicit lists the settings, --unset changes one: give one of them")
    if args.command == "report" and args.reuse and args.version is None:
        parser.error("--reuse names a stored report of the --version given: give --version")
    configure("lambdactl", "DEBUG" if args.verbose else "INFO", "short")
    from definitions.files import UntrustedStateDir
    from definitions.settings_store import SettingsConflict

    try:
        # `config --unset` works on the persisted file without loading it: it mends a persisted value
        # the settings no longer accept (every other command then refuses to start).
        settings = Settings() if args.command == "config" and args.unset else get_settings()
    except (SettingsConflict, ValueError) as exc:  # a conflict, or a setting that does not validate
        log.error("%s", exc)
        return 2
    except RecursionError:  # a LAMBDA_* value of JSON nested thousands deep
        log.error("the settings cannot be read: a value given in the environment nests too deep")
        return 2
    except OSError as exc:  # the state directory or a settings file this user cannot read
        log.error("the settings cannot be read: %s (check the owner and mode of the state directory)", exc)
        return 2
    try:
        code = args.func(settings, args)
        sys.stdout.flush()  # here, not at exit: a closed pipe is then answered below
        return code
    except (StackError, UntrustedStateDir) as exc:
        log.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError as exc:
        if not _stdout_closed():  # another pipe or socket of the command: a failure like any other
            log.error("%s failed: %s: %s", args.command, type(exc).__name__, _one_line(exc))
            return 1
        # `lambdactl … | head`: the reader stopped; end quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush writes nowhere
        return 141
    except Exception as exc:  # a store that does not answer, or a fault: one line, the traceback with -v
        if args.verbose:
            raise
        log.error(
            "%s failed: %s: %s (is the stack up? `lambdactl status`; -v shows the traceback)",
            args.command,
            type(exc).__name__,
            _one_line(exc),
        )
        return 1


def _one_line(exc: BaseException) -> str:
    """An error's message on one line, cut short: the Airflow DAG shows a failed command's last line
    as the run's cause, and a message of many lines (a JVM's stack) left a fragment there."""
    return " ".join(str(exc).split())[:500]


if __name__ == "__main__":
    sys.exit(main())
