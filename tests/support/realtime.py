"""Test helpers: what the realtime store holds for a test's own URLs, and the truth to compare it with."""

from __future__ import annotations

import json
import time
from collections import defaultdict

from datasketches import hll_sketch, hll_union

from definitions.events import parse_time
from definitions.views import GRANULARITIES, HLL_LG_K, key_text
from ingest.generator import SentRecord
from ingest.truth import distinct_events
from stores.clients import cassandra_cluster
from stores.realtime_scan import scan
from stores.realtime_schema import BY_BUCKET, BY_KEY

URL_VIEWS = ("page_views", "unique_visitors", "top_pages")


def truth(sent: list[SentRecord]) -> dict[tuple[str, str], dict[tuple[str, int], int]]:
    """{(view, granularity): {(url, event bucket): value}} for the url-keyed built-in views."""
    out: dict = {}
    events = [e for e in distinct_events(sent) if e["event_type"] == "page_view"]
    for granularity, size in GRANULARITIES.items():
        counts: dict = defaultdict(int)
        users: dict = defaultdict(set)
        for e in events:
            k = (e["url"], (e["event_time"] // 1000) // size * size)
            counts[k] += 1
            users[k].add(e["user_id"])
        out[("page_views", granularity)] = dict(counts)
        out[("top_pages", granularity)] = dict(counts)
        out[("unique_visitors", granularity)] = {k: len(v) for k, v in users.items()}
    return out


def counting_every_copy(sent: list[SentRecord], granularity: str) -> dict[tuple[str, int], int]:
    """{(url, event bucket): page views} as a speed layer that did NOT de-duplicate would hold them:
    every valid record counted, re-sent duplicates included."""
    size = GRANULARITIES[granularity]
    counts: dict = defaultdict(int)
    for record in sent:
        if record.kind in ("valid", "late", "duplicate"):
            e = json.loads(record.value)
            if e["event_type"] == "page_view":
                counts[(e["url"], int(parse_time(e["event_time"]).timestamp()) // size * size)] += 1
    return dict(counts)


def counted(settings, urls: set[str]) -> int:
    """Page views the speed layer has written for `urls` (minute rows, every ingest bucket): cheap to poll."""
    cluster = cassandra_cluster(settings)
    try:
        session = cluster.connect(settings.cassandra.keyspace)
        return sum(
            row.value
            for url in urls
            for row in session.execute(
                f"SELECT value FROM {BY_KEY} WHERE view_name='page_views' AND granularity='minute' AND key=%s",
                (key_text([url]),),
            )
        )
    finally:
        cluster.shutdown()


def planned_offsets(settings) -> dict[int, int]:
    """{partition: end offset} of the newest micro-batch the speed layer has planned for topic `events`:
    Spark writes it to the checkpoint's offset log before the batch runs (empty before the first)."""
    from stores.webhdfs import WebHdfs

    offsets_dir = f"{settings.speed.checkpoint_dir.rstrip('/')}/offsets"
    with WebHdfs(settings) as fs:
        batches = [int(name) for name in fs.list(offsets_dir) if name.isdigit()]
        if not batches:
            return {}
        lines = fs.read(f"{offsets_dir}/{max(batches)}").decode().splitlines()
    for line in lines[2:]:  # "v1", the batch metadata, then one JSON line per source
        doc = json.loads(line) if line.startswith("{") else {}
        if settings.kafka.events_topic in doc:
            return {int(p): int(o) for p, o in doc[settings.kafka.events_topic].items()}
    return {}


def realtime(settings, urls: set[str]) -> dict[tuple[str, str], dict[tuple[str, int], int]]:
    """The same shape, summed over every ingest bucket, read straight from Cassandra."""
    cluster = cassandra_cluster(settings)
    session = cluster.connect(settings.cassandra.keyspace)
    out: dict = defaultdict(dict)
    try:
        for granularity in GRANULARITIES:
            for view in ("page_views", "unique_visitors"):
                for url in urls:
                    sketches: dict[int, hll_union] = {}
                    rows = session.execute(
                        f"SELECT event_bucket, value, sketch FROM {BY_KEY} WHERE view_name=%s AND granularity=%s AND key=%s",
                        (view, granularity, key_text([url])),
                    )
                    for row in rows:
                        k = (url, row.event_bucket)
                        if view == "unique_visitors":
                            sketches.setdefault(row.event_bucket, hll_union(HLL_LG_K)).update(
                                hll_sketch.deserialize(bytes(row.sketch))
                            )
                        else:
                            out[(view, granularity)][k] = out[(view, granularity)].get(k, 0) + row.value
                    for bucket, union in sketches.items():
                        out[(view, granularity)][(url, bucket)] = union.get_result().get_estimate()
            unreadable: list = []
            rows = [
                row
                for part in scan(
                    session,
                    BY_BUCKET,
                    ("view_name", "granularity", "event_bucket"),
                    "event_bucket, key, value",
                    "view_name = 'top_pages' AND granularity = ?",
                    (granularity,),
                    unreadable=unreadable,
                )
                for row in part
            ]
            assert not unreadable, [u.describe() for u in unreadable]
            wanted = {key_text([u]): u for u in urls}
            for row in rows:
                if row.key in wanted:
                    k = (wanted[row.key], row.event_bucket)
                    out[("top_pages", granularity)][k] = out[("top_pages", granularity)].get(k, 0) + row.value
    finally:
        cluster.shutdown()
    return dict(out)


def differences(expected: dict, got: dict) -> list[str]:
    diffs = []
    for cell in expected:
        exp, have = expected[cell], got.get(cell, {})
        distinct = cell[0] == "unique_visitors"
        for k in set(exp) | set(have):
            e, g = exp.get(k, 0), have.get(k, 0)
            if (abs(g - e) > max(1.0, 0.05 * e)) if distinct else g != e:
                diffs.append(f"{cell} {k}: expected {e}, realtime {g}")
    return diffs


def wait_until_exact(settings, sent: list[SentRecord], timeout_s: float = 300) -> dict:
    expected = truth(sent)
    urls = {url for cells in expected.values() for url, _ in cells}
    deadline = time.monotonic() + timeout_s
    while True:
        got = realtime(settings, urls)
        diffs = differences(expected, got)
        if not diffs:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(diffs)} realtime cells differ from the truth, e.g.: " + "; ".join(diffs[:8]))
        time.sleep(1)
