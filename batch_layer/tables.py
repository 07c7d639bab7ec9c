"""A run's HBase tables: every selected view computed from the run's events, written (HFiles or puts)
and verified, one table per view.

Views whose cells are the same (declarations equal but for their layout, such as page_views and
top_pages) are computed once, and each computed granularity is written into each of their tables.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from definitions.settings import Settings
from definitions.view_rollup import compute_each
from definitions.views import View
from stores import batch_bulk_load
from stores import batch_layout as layout
from stores.batch_writer import TableStats, create_table, table_splits, verify_table, write_partitions

log = logging.getLogger("lambda.batch")


def same_cells(views: Iterable[View]) -> list[list[View]]:
    """`views` grouped by the cells they compute (everything but the layout and description decides
    them), in their order."""
    groups: dict[str, list[View]] = {}
    for view in views:
        shape = {k: v for k, v in view.shape().items() if k != "layout"}
        groups.setdefault(repr(sorted(shape.items())), []).append(view)
    return list(groups.values())


def write_tables(
    settings: Settings, spark, version: int, views: list[View], events, bulk: bool
) -> tuple[dict[str, TableStats], dict[str, list[bytes]]]:
    """Write and verify each view's table of `version` from `events`; what each holds and the cuts
    its verification scanned by (the run record keeps them)."""
    tables: dict[str, TableStats] = {}
    splits: dict[str, list[bytes]] = {}
    for group in same_cells(views):
        names = {view.name: layout.table_name(view, version) for view in group}
        for name in names.values():
            create_table(settings, name)
        written: dict[str, list] = {view.name: [] for view in group}
        for granularity, computed in compute_each(group[0], events):
            shared = len(group) > 1 and not computed.is_cached
            if shared:  # read by every table of the group: computed once
                computed = computed.cache()
            try:
                for view in group:
                    name = names[view.name]
                    if bulk:
                        done = batch_bulk_load.load_partitions(settings, spark, name, view, granularity, computed)
                    else:
                        done = write_partitions(settings, name, view, granularity, computed)
                    written[view.name].append(done)
                    log.info("%s/%s: %d cells written", view.name, granularity, done.stats.cells)
            finally:
                if shared:
                    computed.unpersist()
        for view in group:
            name = names[view.name]
            expected = sum((w.stats for w in written[view.name]), TableStats())
            splits[view.name] = table_splits(settings, written[view.name])
            verify_table(settings, name, view, expected, splits[view.name])
            tables[view.name] = expected
            log.info(
                "%s verified in %d ranges: %d rows, %d cells, checksum %d",
                name,
                len(splits[view.name]) + 1,
                expected.rows,
                expected.cells,
                expected.checksum,
            )
    return tables, splits
