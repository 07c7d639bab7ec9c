"""`lambdactl compact-master`: rewrite the master dataset's finished ingest hours as a few large files
(batch_layer.compaction). The `lambda_housekeeping` DAG runs it daily; running it again, or two at
once from one state directory (they take turns), or after one was killed, loses and duplicates
nothing; one from another host or state directory is refused while this one holds the master's
lease on HDFS (docs/operations.md). Exit 2 when it cannot run now (another compaction holds the
lease, or with --no-wait runs from this state directory, the archiver has not said how far the master is complete, its marker is doubted, or it is
behind the compacted hours), 1 when it failed, or found compacted hours whose originals hold other records than their
copy (those originals are kept).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

from definitions.settings import Settings
from definitions.times import iso_ms
from lambdactl.arg_types import at_least_one
from lambdactl.output import _emit, _say


def cmd_compact_master(settings: Settings, args: argparse.Namespace) -> int:
    from batch_layer.compaction import CompactionMismatch, CompactionRefused, compact_master

    failure = ""
    try:
        result = compact_master(settings, max_hours=args.max_hours, wait=not args.no_wait)
    except CompactionRefused as exc:
        _say(f"not compacted: {exc}")
        return 2
    except CompactionMismatch as exc:
        result, failure = exc.result, str(exc)
        _say(failure)
    through = iso_ms(result.through_ms) if result.through_ms is not None else "-"
    _say(
        f"master dataset: compacted before {through}; this run {len(result.compacted_hours)} hour(s), "
        f"{result.rows:,} rows, {len(result.originals_deleted)} original folder(s) deleted"
        + (
            f", originals kept while batch run(s) {result.originals_kept_for} may read them"
            if result.originals_kept_for
            else ""
        )
        + (
            f"; {len(result.from_folders)} hour(s) read from their folders (they held files the file sink's "
            "log does not list: forgotten by it, or a killed batch's)"
            if result.from_folders
            else ""
        )
    )
    if args.json:
        _emit({**asdict(result), "error": failure})
    return 1 if failure else 0


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "compact-master",
        help="rewrite the master dataset's finished ingest hours as a few large files (its small files go)",
    )
    parser.add_argument(
        "--max-hours", type=at_least_one, default=168, help="at most this many ingest hours in one run (default a week)"
    )
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="refuse (exit 2) while another compaction from this state directory runs, instead of waiting for it",
    )
    parser.add_argument("--json", action="store_true", help="also print the outcome as one JSON line")
    parser.set_defaults(func=cmd_compact_master)
