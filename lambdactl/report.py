"""`lambdactl report`: the accuracy report of a batch version's ingest window, or the list of
stored reports."""

from __future__ import annotations

import argparse
import logging

from definitions.section import browser_url
from definitions.settings import Settings
from lambdactl.output import _emit, _say

log = logging.getLogger("lambdactl")

REUSE_AMONG = 10  # how many of the newest stored reports `report --reuse` looks among


def cmd_report(settings: Settings, args: argparse.Namespace) -> int:
    """Build the accuracy report of a batch version's ingest window, or list the reports."""
    from reports.build import NoWindow, produce, window_for_version
    from reports.storage import list_reports, report_file

    if args.version is None:
        for rid, report in list_reports(settings, args.limit):
            found = report.get("window")
            shown = found if isinstance(found, dict) else {}
            _say(f"{rid}: {shown.get('start')} → {shown.get('end')} (version {report.get('version')})")
        return 0
    base = browser_url(settings.api.host, settings.api.port, settings.api.public_url)
    try:
        window = window_for_version(settings, args.version)
    except NoWindow as exc:
        log.error("%s", exc)
        return 2
    if getattr(args, "reuse", False):
        # A task retried after its first attempt stored the report: that one, not a second of the run.
        # The newest few only: a report is built just after its version's swap.
        for rid, doc in list_reports(settings, REUSE_AMONG):
            if _of_the_run(doc, window):
                url = f"{base}/api/v1/reports/{rid}/html"
                _say(f"report {rid} for version {args.version} was stored already: {url}")
                if args.json:
                    _emit({"id": rid, "url": url, "json": str(report_file(settings, rid)), "reused": True})
                return 0
    from definitions.spark import spark_session

    spark = spark_session(settings, "lambda-report", {"spark.driver.memory": settings.batch.driver_memory})
    try:
        report, paths = produce(settings, spark, window)
    except NoWindow as exc:  # the clean-up deleted the window's realtime rows
        log.error("%s", exc)
        return 2
    url = f"{base}/api/v1/reports/{report['id']}/html"
    _say(f"report {report['id']} for version {args.version}: {url} ({paths.get('json')})")
    if args.json:
        _emit({"id": report["id"], "url": url, **paths})
    return 0


def _of_the_run(doc: dict, window) -> bool:
    """Whether a stored report is the one a build for `window` (a version's run) would make: of that
    run and its window (not an ad-hoc report of the version), built with the speed layer caught up
    (one built while it was behind is built again: it may have caught up since)."""
    made, speed = doc.get("window"), doc.get("speed_layer")
    return (
        isinstance(made, dict)
        and isinstance(speed, dict | None)
        and doc.get("version") == window.version
        and doc.get("run_id") == window.run_id
        and (made.get("start_ms"), made.get("end_ms")) == (window.start_ms, window.end_ms)
        and (speed or {}).get("caught_up") is not False
    )
