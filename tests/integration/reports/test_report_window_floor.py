"""A report's batch side computes no cell the comparison leaves out as older than the realtime
rows' TTL: a window from the start of history (a first run, a view just added) brought every cell
of it to the driver. Checked on the real master dataset, against the scenario's whole window."""

from __future__ import annotations

from reports import read


def test_cells_below_the_floor_are_not_computed_only_their_ingest_buckets_listed(settings, spark, scenario):
    whole, _ = scenario["batch"]
    buckets = sorted({cell_id[4] for cell_id in whole})
    assert len(buckets) >= 2, "the scenario's window spans several ingest buckets"
    floor = buckets[len(buckets) // 2]
    cells, figures = read.batch_cells(
        settings, spark, scenario["views"], scenario["previous"], scenario["cutoff"], cells_from_s=floor
    )
    assert cells == {cell_id: cell for cell_id, cell in whole.items() if cell_id[4] >= floor}
    assert figures.pop(read.BUCKETS_NOT_COMPUTED) == [b for b in buckets if b < floor]
    assert figures == scenario["batch"][1], "the figures describe the whole window still"
