"""A view's filter (`where`), checked before `lambdactl views apply` changes anything.

Spark judged a filter only when a layer built its query: one that did not parse, named a column
the layers do not give it, or was no true/false test stopped the speed layer for every view, at
every restart, and failed every batch run. Here Spark parses and analyses each filter against the
columns both layers give a filter (the contract's fields and `ingest_time`), refuses one whose
verdict could differ between the layers or between two runs (not deterministic, the current time,
a subquery), and evaluates it over probe events (empty, non-numeric and extreme values) to find the
ones that fail on an event (a cast of text to a number, a division by zero) rather than answer: a
mistake to name before it counts nothing. An event shaped past the probes (in a branch they do not
reach) is judged "not in the view" by both layers alike (definitions.views.total_filter).

The check runs in a child process with a small local Spark of its own: a process's JVM takes its
driver options once, and the process asking goes on to run the views' batch with its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from definitions.events import FIELDS, SCHEMA_VERSION, SPARK_TYPES, Field
from definitions.views import View

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Expressions whose value depends on when (or where) a query runs, not on the event.
_UNSTABLE = {"CurrentTimestamp", "Now", "CurrentDate", "LocalTimestamp", "CurrentBatchTimestamp", "CurrentTime"}
_SUBQUERIES = {"ListQuery", "ScalarSubquery", "Exists", "LateralSubquery", "InSubquery"}
CHECK_TIMEOUT_S = 300


def probe_times(
    min_event_time_s: int, max_future_s: int, now_ms: int, max_lens: Mapping[str, int] | None = None
) -> dict[str, list[int]]:
    """The times (epoch ms) probe events hold: what validation lets an event time be (events.min_event_time_s
    to now + events.max_future_s), and an ingest time (the brokers' clock: now, or long ago); with
    `max_lens` (text field → the longest text its events.max_*_chars setting lets it hold), under
    each such field's name, that length (else the contract's own)."""
    first = min_event_time_s * 1000
    lengths = {name: [int(n)] for name, n in (max_lens or {}).items()}
    return {"event_time": [first, now_ms, now_ms + max_future_s * 1000], "ingest_time": [first, now_ms], **lengths}


def _probe_values(field: Field, times: Mapping[str, list[int]]) -> list[str]:
    """SQL literals of values the contract lets `field` hold in an event: the ones a filter is most
    likely to fail on (a non-numeric text, the longest text, each choice, a missing value)."""
    missing = [] if field.required else ["NULL"]
    if field.kind == "int":  # schema_version: validation makes an absent one 1
        return [str(v) for v in range(1, SCHEMA_VERSION + 1)]
    if field.kind == "timestamp":
        return [f"timestamp_millis({ms})" for ms in times[field.name]]
    if field.choices:
        return [*missing, *(f"'{c}'" for c in field.choices)]
    if field.pattern is not None:  # country: two capitals
        return [*missing, "'DE'", "'ZZ'"]
    start = "/" if field.name == "url" else ""  # a url is a path
    texts = [f"{start}x", f"{start}0", f"{start}-1", f"{start} ", f"{start}%", f"{start}ü"]
    if start:
        texts.append(start)
    longest = times.get(field.name, [field.max_len])[0]
    return [*missing, *(f"'{t}'" for t in texts), f"'{start}' || repeat('x', {max(longest - len(start), 0)})"]


def probe_events(spark: SparkSession, times: Mapping[str, list[int]]) -> DataFrame:
    """Events holding, column by column, each of its probe values: not every combination, each value
    in one event at least."""
    from pyspark.sql import functions as F

    # The columns a filter sees in both layers: the master dataset and the speed layer's events hold these.
    probes = {f.name: (_probe_values(f, times), SPARK_TYPES[f.kind]) for f in FIELDS}
    probes["ingest_time"] = ([f"timestamp_millis({ms})" for ms in times["ingest_time"]], "TIMESTAMP")
    rows = max(len(values) for values, _ in probes.values())
    picks = []
    for name, (values, kind) in probes.items():
        array = ", ".join(f"CAST({v} AS {kind})" for v in values)
        picks.append(F.expr(f"element_at(array({array}), CAST(id % {len(values)} + 1 AS INT))").alias(name))
    return spark.range(rows, numPartitions=1).select(*picks)


def filter_problems(spark: SparkSession, views: Iterable[View], times: Mapping[str, list[int]]) -> list[str]:
    """What is wrong with each view's filter, one line naming the view each (empty: every one is fine);
    `times`: probe_times."""
    probes = probe_events(spark, times)
    problems = []
    for view in views:
        if not view.where:
            continue
        problem = _problem(probes, view.where)
        if problem is not None:
            problems.append(f"view {view.name}: where {view.where!r:.200}: {problem}")
    return problems


def _problem(probes: DataFrame, where: str) -> str | None:
    try:
        filtered = probes.where(where)
    except Exception as exc:  # noqa: BLE001 - Spark's parse and analysis errors: the message says what
        return _first_line(exc)
    plan = filtered._jdf.queryExecution().analyzed()
    if plan.getClass().getSimpleName() != "Filter":  # Spark reached below the events for a column
        return "names a column the layers do not give a filter (the contract's fields and ingest_time)"
    condition = plan.condition()
    for node in _nodes(condition):
        name = node.getClass().getSimpleName()
        if name in _SUBQUERIES:
            return "a subquery is not a test of the event alone"
        if name in _UNSTABLE:
            return f"{name} depends on when the layer runs, not on the event: the layers would disagree"
        if not node.deterministic() and all(child.deterministic() for child in _children(node)):
            return f"{name} is not deterministic: the layers would count different events"
    try:
        filtered.count()
    except Exception as exc:  # noqa: BLE001 - an event the filter cannot judge stops the layer reading it
        return f"fails on some events instead of judging them ({_first_line(exc)}); use try_cast, try_divide…"
    return None


def _nodes(expression) -> Iterable[Any]:
    yield expression
    for child in _children(expression):
        yield from _nodes(child)


def _children(expression) -> list[Any]:
    children = expression.children()
    return [children.apply(i) for i in range(children.size())]


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def check_filters(
    views: Sequence[View],
    sql_conf: Mapping[str, str],
    times: Mapping[str, list[int]],
    java_home: str = "",
    timeout_s: float = CHECK_TIMEOUT_S,
) -> list[str]:
    """filter_problems of `views` (those with a filter), from a child process with a local Spark
    (`sql_conf`: the `spark.sql.*` options the layers' sessions take; `java_home`: the JDK it runs
    on, else JAVA_HOME or PATH's); a check that cannot run is one problem, saying why."""
    filtered = [v for v in views if v.where]
    if not filtered:
        return []
    request = json.dumps(
        {"views": [{"name": v.name, "shape": v.shape()} for v in filtered], "sql_conf": dict(sql_conf), "times": times}
    )
    env = {**os.environ, **({"JAVA_HOME": java_home} if java_home else {})}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "definitions.view_filters"],
            input=request,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return [f"the views' filters could not be checked: Spark took longer than {timeout_s:.0f} s"]
    answer = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
    try:
        problems = json.loads(answer[0]) if answer else None
    except ValueError:
        problems = None
    if not isinstance(problems, list):
        tail = " ".join(done.stderr.strip().splitlines()[-3:])[-500:]
        return [f"the views' filters could not be checked (exit status {done.returncode}): {tail}"]
    return [str(p) for p in problems]


# Options of spark.conf that change how Spark judges an expression (others, such as extensions or
# catalogs, need jars or services the check's own Spark does not have).
_SEMANTIC_OPTIONS = ("spark.sql.ansi.", "spark.sql.legacy.", "spark.sql.caseSensitive", "spark.sql.timestampType")


def declared_filter_problems(settings, registry: Iterable[View], java_home: str = "") -> list[str]:
    """check_filters of the declared views but the built-in ones, with the layers' options that change
    how an expression is judged, and the times validation lets an event hold now."""
    import time

    from definitions.views import BUILT_IN

    sql_conf = {k: v for k, v in settings.spark.conf.items() if k.startswith(_SEMANTIC_OPTIONS)}
    events = settings.events
    max_lens = {f.name: int(getattr(events, f.limit_setting)) for f in FIELDS if f.limit_setting}
    times = probe_times(events.min_event_time_s, events.max_future_s, int(time.time() * 1000), max_lens)
    return check_filters([v for v in registry if v not in BUILT_IN], sql_conf, times, java_home)


def _main() -> int:
    from pyspark.sql import SparkSession

    request = json.loads(sys.stdin.read())
    views = [View.from_shape(v["name"], v["shape"]) for v in request["views"]]
    builder = (
        SparkSession.builder.master("local[1]")
        .appName("lambda-view-filters")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.shuffle.partitions", "1")
    )
    for key, value in {**request["sql_conf"], "spark.sql.session.timeZone": "UTC"}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        print(json.dumps(filter_problems(spark, views, request["times"])))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
