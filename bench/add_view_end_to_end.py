"""Adding a view to the running platform, end to end, over a master dataset of `--history` records:
`lambdactl views apply` timed whole on the running stack, and its answers checked.

1. The history (bench/batch_dataset.py's synthetic master: ingest and event times in January 2025)
   goes into the stack's master dataset as compacted hours (stores.master_compacted: hours before
   the compaction marker are read from `_compacted/`), so batch runs read it as the master;
2. `lambdactl views apply` with one more view module (a count per URL: by default of clicks, by
   hour and day; `--where ''` `--granularities minute,hour,day` for one the size of page_views),
   timed, each line of its output with the second it came;
3. the new view's answer through the API, per day for the busiest URLs of the history, against a
   count by Spark over the history (the first copy of each event);
4. `lambdactl views apply` back to the views declared before (the view retired), timed;
5. the history taken out of the master dataset again (also when a step fails).

For a development stack whose master is compacted (`lambdactl compact-master`), with no batch run
under way and none due (a full batch run made while the history is there would serve it until the
next one): only the added view's batch runs here.

    .venv/bin/python bench/add_view_end_to_end.py --history 10000000
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
from batch_dataset import START, ensure_dataset  # bench/ itself: the scripts run as files
from figures import configure_logging, emit, fmt  # bench/ itself

from definitions.settings import get_settings
from definitions.settings_store import load
from definitions.spark import spark_session
from stores.master import first_copies, read_archived
from stores.master_compacted import compacted_path, day_folders, read_compacted
from stores.webhdfs import WebHdfs

log = logging.getLogger("bench.add_view")

DAY_MS = 86_400_000
URLS_CHECKED = 5


def put_history(spark, settings, local_url: str) -> list[str]:
    """Copy the history into the master dataset's compacted hours; the day folders added."""
    with WebHdfs(settings) as fs:
        marker = read_compacted(fs, settings)
        if marker is None or marker.through_ms <= int(START.timestamp() * 1000):
            raise SystemExit("the master dataset is not compacted past January 2025: run `lambdactl compact-master`")
        root = compacted_path(settings)
        tmp = f"{root}/_tmp-bench-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    spark.read.parquet(local_url).write.partitionBy("ingest_date", "ingest_hour").parquet(f"{settings.hdfs.url}{tmp}")
    with WebHdfs(settings) as fs:
        days = day_folders(fs, tmp)
        taken = set(day_folders(fs, root))
        if taken & set(days):
            fs.delete(tmp, recursive=True)
            raise SystemExit(f"{root} already holds {sorted(taken & set(days))}: a killed run's? remove them first")
        for day in days:
            fs.rename(f"{tmp}/{day}", f"{root}/{day}")
        fs.delete(tmp, recursive=True)
    log.info("history put into %s in %.1fs: %s", root, time.monotonic() - started, ", ".join(days))
    return days


def take_history(settings, days: list[str]) -> None:
    with WebHdfs(settings) as fs:
        for day in days:
            fs.delete(f"{compacted_path(settings)}/{day}", recursive=True)


def event_truth(spark, local_url: str, where: str) -> dict[str, dict[int, int]]:
    """The events `where` selects of the busiest URLs per event-time day (epoch ms), first copies only."""
    from pyspark.sql import functions as F

    clicks = first_copies(read_archived(spark, local_url))
    clicks = clicks.where(where) if where else clicks
    top = [r["url"] for r in clicks.groupBy("url").count().orderBy(F.desc("count")).limit(URLS_CHECKED).collect()]
    day = (F.unix_millis("event_time") - F.unix_millis("event_time") % DAY_MS).alias("day")
    out: dict[str, dict[int, int]] = {u: {} for u in top}
    for r in clicks.where(F.col("url").isin(top)).groupBy("url", day).count().collect():
        out[r["url"]][r["day"]] = r["count"]
    return out


def answers_differ(settings, view: str, truth: dict[str, dict[int, int]]) -> list[str]:
    base = f"http://{settings.api.host}:{settings.api.port}"
    first, last = min(min(d) for d in truth.values()), max(max(d) for d in truth.values()) + DAY_MS
    iso = lambda ms: datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    out = []
    for url, days in truth.items():
        resp = httpx.get(
            f"{base}/api/v1/views/{view}",
            params={"url": url, "granularity": "day", "start": iso(first), "end": iso(last)},
            timeout=60,
        )
        if resp.status_code != 200:
            out.append(f"{url}: HTTP {resp.status_code} {resp.text[:200]}")
            continue
        got = {
            int(datetime.fromisoformat(b["bucket"].replace("Z", "+00:00")).timestamp() * 1000): b["value"]
            for b in resp.json()["series"]
            if b["value"]
        }
        if got != days:
            out.append(f"{url}: API {sorted(got.items())} vs history {sorted(days.items())}")
    return out


def apply(*args: str) -> dict:
    """`lambdactl views apply ARGS`: exit status, wall seconds, each output line with its second."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lambdactl.cli", "views", "apply", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = [f"{time.monotonic() - started:6.1f}s {line.rstrip()}" for line in proc.stdout]
    code = proc.wait()
    return {"exit": code, "seconds": round(time.monotonic() - started, 1), "lines": lines}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=10_000_000, help="master records of history")
    parser.add_argument("--where", default="event_type = 'click'", help="the added view's filter (SQL; '' for none)")
    parser.add_argument("--granularities", default="hour,day", help="the added view's, e.g. minute,hour,day")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/lambda-bench-batch"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure_logging()
    settings = get_settings()
    before = load().views
    suffix = uuid.uuid4().hex[:6]
    module, view = f"bench_views_{suffix}", f"bench_clicks_{suffix}"
    folder = Path(tempfile.mkdtemp(prefix="bench-views-"))
    (folder / f"{module}.py").write_text(
        textwrap.dedent(
            f"""
            from definitions.views import View

            VIEWS = [View(name="{view}", keys=("url",), aggregation="count", where={args.where or None!r},
                          granularities={tuple(args.granularities.split(","))!r}, description="a benchmark's")]
            """
        )
    )
    spark = spark_session(settings, "bench-add-view")
    try:
        local = ensure_dataset(spark, args.data_dir, args.history)
        truth = event_truth(spark, local, args.where)
        days = put_history(spark, settings, local)
    finally:
        spark.stop()
    result: dict = {"history": args.history, "view": view, "where": args.where, "granularities": args.granularities}
    try:
        modules = ",".join([*before.modules, module])
        paths = ",".join([*map(str, before.paths), str(folder)])
        added = result["add"] = apply("--modules", modules, "--paths", paths)
        print("\n".join(added["lines"]))
        if added["exit"] != 0:
            raise SystemExit(f"views apply exited {added['exit']}")
        result["differences"] = answers_differ(settings, view, truth)
    finally:
        back = ["--modules", ",".join(before.modules)] if before.modules else ["--no-modules"]
        folders = ["--paths", ",".join(map(str, before.paths))] if before.paths else ["--no-paths"]
        removed = result["remove"] = apply(*back, *folders)
        take_history(settings, days)
    checked = sum(len(d) for d in truth.values())
    text = (
        f"`views apply` adding a view ({args.where or 'every event'}; {args.granularities}) over {fmt(args.history)} master records: {fmt(added['seconds'], 1)} s end to end; "
        f"its day answers for the {len(truth)} busiest URLs ({checked} days) "
        + ("equal the history" if not result["differences"] else f"DIFFER: {result['differences'][:3]}")
        + f"; removing it: {fmt(removed['seconds'], 1)} s (exit {removed['exit']})"
    )
    emit(result, text, args.json)
    return 1 if result["differences"] or removed["exit"] else 0


if __name__ == "__main__":
    sys.exit(main())
