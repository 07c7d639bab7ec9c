"""A report's batch side computes no cell the comparison leaves out as older than the realtime
rows' TTL: a window from the start of history (a first run, a view just added) brought every cell
of it to the driver. Checked on the real master dataset, against the scenario's whole window."""

from __future__ import annotations

from reports import read


def test_cells_below_the_floor_are_not_computed_only_their_ingest_buckets_listed(settings, spark, scenario):
    whole, figures_whole = scenario["batch"]
    buckets = sorted({cell_id[4] for cell_id in whole})
    assert buckets, "the scenario's window holds cells"
    floor = buckets[-1] + settings.ingest_bucket_s  # every ingest bucket of the window is below it
    cells, figures = read.batch_cells(
        settings, spark, scenario["views"], scenario["previous"], scenario["cutoff"], cells_from_s=floor
    )
    assert cells == {}
    assert figures.pop(read.BUCKETS_NOT_COMPUTED) == buckets
    assert figures == figures_whole, "the figures describe the whole window still"
