"""A run's HBase tables: every selected view computed from the run's events, written (HFiles or puts)
and verified, one table per view.

Views whose cells are the same (declarations equal but for their layout, such as page_views and
top_pages) are computed once, and each computed granularity is written into each of their tables.
Each table is scanned back (verified) while the next ones are computed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import nullcontext

from definitions.settings import Settings
from definitions.spark import cached
from definitions.view_rollup import compute_each
from definitions.views import View
from stores import batch_bulk_load
from stores import batch_layout as layout
from stores.batch_writer import (
    RangeCounter,
    TableStats,
    create_table,
    table_splits,
    verify_table,
    write_partitions,
)

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
    its verification scanned by (the run record keeps them).

    A table is verified (scanned back through HBase) while Spark computes and writes the next
    group: the two use different processes. The first failed verification fails the run, at the
    latest once every table is written."""
    tables: dict[str, TableStats] = {}
    splits: dict[str, list[bytes]] = {}
    verifying = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify")
    checks: list[Future] = []
    finished = False
    try:
        for group in same_cells(views):
            _raise_failed(checks)  # a table already found wrong: no point writing more
            written = _write_group(settings, spark, version, group, events, bulk)
            for view in group:
                tables[view.name] = sum((w.stats for w in written[view.name]), TableStats())
                splits[view.name] = table_splits(settings, written[view.name])
                name = layout.table_name(view, version)
                # A bulk run's driver holds the HBase client: it counts the table, not Thrift and Python.
                counter = batch_bulk_load.range_counter(settings, spark, name, view) if bulk else None
                checks.append(
                    verifying.submit(_verify, settings, name, view, tables[view.name], splits[view.name], counter)
                )
        wait(checks)
        _raise_failed(checks)
        finished = True
    finally:
        # A failed or interrupted run is recorded failed at once, not after the scan in progress.
        verifying.shutdown(wait=finished, cancel_futures=True)
    return tables, splits


def _write_group(settings: Settings, spark, version: int, group: list[View], events, bulk: bool) -> dict[str, list]:
    names = {view.name: layout.table_name(view, version) for view in group}
    still_writing(settings, version)
    for name in names.values():
        create_table(settings, name)
    written: dict[str, list] = {view.name: [] for view in group}
    for granularity, computed in compute_each(group[0], events):
        # Read by every table of the group: computed once.
        with cached(computed) if len(group) > 1 else nullcontext(computed) as computed:
            for view in group:
                name = names[view.name]
                if bulk:
                    done = batch_bulk_load.load_partitions(settings, spark, name, view, granularity, computed)
                else:
                    done = write_partitions(settings, name, view, granularity, computed)
                written[view.name].append(done)
                log.info("%s/%s: %d cells written", view.name, granularity, done.stats.cells)
    return written


def still_writing(settings: Settings, version: int) -> None:
    """Before a run makes its next tables: refused when its record is no longer "writing". Retention
    gives up a run of another host that did not beat within batch.retention_grace_s (its clock far
    behind, its machine paused) and deletes its record; tables it made after that were named by no
    run record, so no retention would ever drop them."""
    from stores.registry import version_store

    store = version_store(settings)
    if not store.record_run_if(version, "writing", heartbeat_ms=int(time.time() * 1000)):
        state = (store.runs().get(version) or {}).get("state")
        raise RuntimeError(  # as when found at the end of the run (batch_layer.job): a retry runs it again
            f"version {version} is no longer recorded writing (its record: {state or 'gone'}): retention gave it up "
            "(no beat within batch.retention_grace_s) and may have dropped its tables; run the batch again"
        )


def _verify(
    settings: Settings, name: str, view: View, expected: TableStats, splits: list[bytes], counter: RangeCounter | None
) -> None:
    verify_table(settings, name, view, expected, splits, counter)
    log.info(
        "%s verified in %d ranges: %d rows, %d cells, checksum %d",
        name,
        len(splits) + 1,
        expected.rows,
        expected.cells,
        expected.checksum,
    )


def _raise_failed(checks: list[Future]) -> None:
    for check in checks:
        if check.done() and check.exception() is not None:
            raise check.exception()  # type: ignore[misc]
