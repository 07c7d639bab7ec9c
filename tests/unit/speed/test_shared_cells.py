"""Views with the same cells (page_views and top_pages differ only in how they are stored) are
aggregated once by the speed layer and written as each of them, with the values aggregating them
one by one gives (local Spark, no service)."""

from __future__ import annotations

import json
from dataclasses import astuple
from datetime import datetime, timedelta

from definitions.sketches import read_sketch, union_estimate
from definitions.view_loading import load_views
from definitions.views import (
    BUILT_IN,
    HLL_LG_K,
    PAGE_VIEWS,
    SHARED_CELLS_PREFIX,
    TOP_PAGES,
    UNIQUE_VISITORS,
    Registry,
    View,
    cell_groups,
)
from speed_layer.job import BatchWriter, cells_by_ingest_bucket, realtime_rows, written_views
from stores.realtime import RealtimeRow

COLUMNS = (
    "reason STRING, event_id STRING, event_time TIMESTAMP, user_id STRING, url STRING, event_type STRING, "
    "referrer STRING, country STRING, device STRING, schema_version INT, channel STRING, "
    "kafka_partition INT, kafka_offset BIGINT, ingest_time TIMESTAMP"
)


def test_views_with_the_same_cells_share_one_label_that_names_none_of_them():
    groups = cell_groups(BUILT_IN, shared=True)
    shared = [label for label, views in groups.items() if views == (PAGE_VIEWS, TOP_PAGES)]
    assert len(shared) == 1 and shared[0].startswith(SHARED_CELLS_PREFIX), groups.keys()
    assert len(groups) == len(BUILT_IN.names()) - 1, "every other view keeps cells of its own"
    assert all(len(views) == 1 for label, views in groups.items() if label != shared[0])
    # The label stays when a view sharing it is retired or added: the state's groups go on.
    assert cell_groups([TOP_PAGES, UNIQUE_VISITORS], shared=True)[shared[0]] == (TOP_PAGES,)
    # Only the layout left out: a different filter, key or aggregation is different cells.
    assert PAGE_VIEWS.cells_fingerprint == TOP_PAGES.cells_fingerprint != UNIQUE_VISITORS.cells_fingerprint
    assert PAGE_VIEWS.fingerprint != TOP_PAGES.fingerprint
    clicks = View("clicks", keys=("url",), aggregation="count", where="event_type = 'click'")
    assert clicks.cells_fingerprint != PAGE_VIEWS.cells_fingerprint
    # A checkpoint made before cells were shared labels them by view.
    assert {label: views for label, views in cell_groups(BUILT_IN, shared=False).items()} == {
        v.name: (v,) for v in BUILT_IN
    }


def events(spark):
    """Page views and clicks over three URLs, two hours and two ingest buckets, with a later copy."""
    start = datetime(2026, 11, 20, 10)
    rows = []
    for i in range(120):
        kind = "click" if i % 5 == 0 else "page_view"
        when = start + timedelta(minutes=i)
        ingested = start + timedelta(hours=1, minutes=i // 60)
        rows.append(
            (None, f"e{i}", when, f"u{i % 7}", f"/p{i % 3}", kind, None, "FR", "mobile", 1, None, 0, i, ingested)
        )
    rows.append(
        (None, "e3", start, "u3", "/p0", "page_view", None, "FR", "mobile", 1, None, 1, 0, start + timedelta(hours=3))
    )
    return spark.createDataFrame(rows, COLUMNS)


def comparable(row: RealtimeRow) -> tuple:
    """A row, a sketch by the estimate of its registers: built by updates, its bytes and own estimate
    follow the order Spark fed it the values, which the groups' labels change."""
    if row.sketch is None:
        return astuple(row)
    return (*astuple(row)[:5], round(union_estimate([read_sketch(row.sketch)], HLL_LG_K), 6))


def written(cells, views: Registry, shared: bool) -> set:
    by_key, by_bucket = realtime_rows(written_views(views, shared), (row.asDict() for row in cells.collect()))
    return {("by_key", *comparable(row)) for row in by_key} | {("by_bucket", *comparable(row)) for row in by_bucket}


def test_shared_cells_are_aggregated_once_and_written_as_every_view_with_the_values_of_each_alone(spark, settings):
    frame = events(spark)
    per_view = cells_by_ingest_bucket(frame, list(BUILT_IN), settings, shared=False)
    shared = cells_by_ingest_bucket(frame, list(BUILT_IN), settings, shared=True)
    expected = written(per_view, BUILT_IN, shared=False)
    assert expected and {row[1] for row in expected} == set(BUILT_IN.names())
    assert written(shared, BUILT_IN, shared=True) == expected
    top_pages_groups = per_view.where("view = 'top_pages'").count()
    assert top_pages_groups > 0
    assert shared.count() == per_view.count() - top_pages_groups, "page_views' and top_pages' cells held once"


def test_the_sink_writes_a_shared_label_as_every_view_in_its_own_layout(spark, settings, tmp_path):
    chosen = settings.model_copy(
        update={
            "state_dir": tmp_path,
            "stores": settings.stores.model_copy(
                update={"realtime_writer": "tests.unit.stores.sample_adapters.FileRealtimeWriter"}
            ),
        }
    )
    views = load_views(chosen)
    (label,) = [label for label, group in cell_groups(views, shared=True).items() if TOP_PAGES in group]
    schema = (
        "view STRING, granularity STRING, key ARRAY<STRING>, event_bucket BIGINT, ingest_bucket BIGINT, "
        "n BIGINT, total DOUBLE, sketch BINARY, estimate DOUBLE"
    )
    rows = [(label, "hour", [f"/p{i}"], 3_600, 60 * i, i + 1, None, None, None) for i in range(50)]
    assert BatchWriter(chosen, views, shared=True)(spark.createDataFrame(rows, schema).repartition(2), 1) == 100
    records = [json.loads(line) for path in tmp_path.glob("writes-*.jsonl") for line in path.read_text().splitlines()]
    got = sorted((r["table"], r["view"], r["key"], r["ingest_bucket"], r["value"]) for r in records)
    assert got == sorted(
        (table, view, json.dumps([f"/p{i}"], separators=(",", ":")), 60 * i, i + 1)
        for i in range(50)
        for table, view in (("by_key", "page_views"), ("by_bucket", "top_pages"))
    )


def test_the_labels_a_checkpoint_holds_do_not_change_with_the_release():
    """A shared-cells checkpoint's state is keyed by labels hashed from View.shape at every start, and
    its marker records only that cells are shared: a release whose hash, or shape(), gave these views
    other labels would start every group from zero in the middle of its ingest bucket on resume. Such
    a change needs a new marker format (or labels recorded in the marker), not an edit of this test."""
    labels = {v.name: label for label, views in cell_groups(BUILT_IN, shared=True).items() for v in views}
    assert labels == {
        "page_views": "cells:161f698a8ff318bc",
        "top_pages": "cells:161f698a8ff318bc",
        "unique_visitors": "cells:8b2963e3c5ecb47a",
        "page_views_by_country_device": "cells:0993be203a2a77f9",
        "page_views_by_channel": "cells:3e10d5612d6d2926",
    }
