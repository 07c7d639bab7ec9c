"""HBase load rate of bench/batch_recompute.py: computed views written through the real
stores.batch_writer.write_partitions into fresh tables, per put batch size, and optionally loaded as
HFiles through stores.batch_bulk_load.load_partitions (batch.load = "bulk"); each table dropped after."""

from __future__ import annotations

import logging
import statistics
import time

from batch_engines import spark_events  # bench/ itself: the scripts run as files

from definitions.settings import Settings
from definitions.views import PAGE_VIEWS, UNIQUE_VISITORS, View
from stores import batch_bulk_load
from stores import batch_layout as layout
from stores.batch_writer import TableStats, create_table, table_splits, verify_table, write_partitions
from stores.clients import hbase_connection

log = logging.getLogger("bench.batch")


def drop_table(settings: Settings, name: str) -> None:
    conn = hbase_connection(settings)
    try:
        if name.encode() in conn.tables():
            conn.delete_table(name, disable=True)
    finally:
        conn.close()


def with_put_batch_size(settings: Settings, size: int) -> Settings:
    return settings.model_copy(update={"batch": settings.batch.model_copy(update={"put_batch_size": size})})


def load_view(
    settings: Settings,
    name: str,
    view: View,
    computed: dict,
    verify: bool,
    granularities: tuple[str, ...] | None = None,
    ranges_first: bool = False,
    bulk_spark=None,
) -> dict:
    """Write `view` (every granularity by default) into a fresh table `name`, verify it (if asked)
    both ways the job can, one scan and split into ranges as the job does (in the order asked),
    then drop it. With `bulk_spark` (a session holding the bulk load), as HFiles instead of puts."""
    create_table(settings, name)
    try:
        started = time.monotonic()
        written = [
            batch_bulk_load.load_partitions(settings, bulk_spark, name, view, g, computed[(view.name, g)])
            if bulk_spark is not None
            else write_partitions(settings, name, view, g, computed[(view.name, g)])
            for g in granularities or view.granularities
        ]
        load = {"cells": sum(w.stats.cells for w in written), "seconds": time.monotonic() - started}
        if verify:
            expected = sum((w.stats for w in written), TableStats())
            splits = table_splits(settings, written)
            ways = [("verify_one_scan_s", []), ("verify_ranges_s", splits)]
            for label, keys in reversed(ways) if ranges_first else ways:
                started = time.monotonic()
                verify_table(settings, name, view, expected, keys)
                load[label] = time.monotonic() - started
            load["verify_ranges"] = len(splits) + 1
    finally:
        drop_table(settings, name)
    return load


def hbase_load(
    spark, settings: Settings, url: str, batch_sizes: list[int], rounds: int, verify: bool, bulk: bool = False
) -> dict:
    """Write page_views and unique_visitors (every granularity) once per put batch size and round,
    and with `bulk` once more per round as HFiles (the session must hold the bulk load).

    Rounds go through the batch sizes in turn (500, 2000, 10000, 500, ...), so that a drift of
    the machine's load does not favour one size; the figures are medians over the rounds.
    """
    views = (PAGE_VIEWS, UNIQUE_VISITORS)
    events, distinct = spark_events(spark, settings, url)
    # Computed once and checkpointed, so that each timed write reads the same rows from memory.
    computed = {(v.name, g): v.compute(events, g).localCheckpoint(eager=True) for v in views for g in v.granularities}
    events.unpersist(blocking=True)
    stamp = int(time.time())
    samples: dict[int, dict[str, list[dict]]] = {b: {v.name: [] for v in views} for b in batch_sizes}
    bulk_samples: dict[str, list[dict]] = {v.name: [] for v in views}
    try:
        # Untimed: starts the Python workers and the Thrift connections' server side.
        load_view(settings, layout.table_name("bench_warmup", stamp), PAGE_VIEWS, computed, False, ("hour",))
        for r in range(rounds):
            for n, batch_size in enumerate(batch_sizes):
                tuned = with_put_batch_size(settings, batch_size)
                for view in views:
                    name = layout.table_name(f"bench_{view.name}", stamp + 1 + r * len(batch_sizes) + n)
                    # The two verification scans take turns at going first, round by round.
                    load = load_view(tuned, name, view, computed, verify, ranges_first=r % 2 == 1)
                    samples[batch_size][view.name].append(load)
                    log.info(
                        "round %d, put batch %d: %s, %d cells in %.1fs = %.0f cells/s%s",
                        r + 1,
                        batch_size,
                        name,
                        load["cells"],
                        load["seconds"],
                        load["cells"] / load["seconds"],
                        f" (verified: one scan {load['verify_one_scan_s']:.1f}s, {load['verify_ranges']} ranges "
                        f"{load['verify_ranges_s']:.1f}s)"
                        if verify
                        else "",
                    )
            for view in views if bulk else ():
                name = layout.table_name(f"bench_bulk_{view.name}", stamp + 1 + r)
                load = load_view(settings, name, view, computed, verify, ranges_first=r % 2 == 1, bulk_spark=spark)
                bulk_samples[view.name].append(load)
                log.info(
                    "round %d, bulk load: %s, %d cells in %.1fs = %.0f cells/s%s",
                    r + 1,
                    name,
                    load["cells"],
                    load["seconds"],
                    load["cells"] / load["seconds"],
                    " (verified)" if verify else "",
                )
    finally:
        for frame in computed.values():
            frame.unpersist()
    trials = []
    for batch_size in batch_sizes:
        trial: dict = {"put_batch_size": batch_size, "views": {}}
        for view in views:
            loads = samples[batch_size][view.name]
            seconds = statistics.median(x["seconds"] for x in loads)
            trial["views"][view.name] = {
                "cells": loads[0]["cells"],
                "seconds": seconds,
                "cells_per_s": loads[0]["cells"] / seconds,
                "runs_s": [x["seconds"] for x in loads],
            }
            if verify:
                for label in ("verify_one_scan_s", "verify_ranges_s"):
                    trial["views"][view.name][label] = statistics.median(x[label] for x in loads)
                trial["views"][view.name]["verify_ranges"] = loads[0]["verify_ranges"]
        trial["cells"] = sum(v["cells"] for v in trial["views"].values())
        trial["seconds"] = sum(v["seconds"] for v in trial["views"].values())
        trial["cells_per_s"] = trial["cells"] / trial["seconds"]
        if verify:
            for label in ("verify_one_scan_s", "verify_ranges_s"):
                trial[label] = sum(v[label] for v in trial["views"].values())
        trials.append(trial)
    fastest = max(trials, key=lambda t: t["cells_per_s"])
    bulk_trial = None
    if bulk:
        per_view = {
            name: {"cells": loads[0]["cells"], "seconds": statistics.median(x["seconds"] for x in loads)}
            for name, loads in bulk_samples.items()
        }
        for figures in per_view.values():
            figures["cells_per_s"] = figures["cells"] / figures["seconds"]
        cells, seconds = sum(v["cells"] for v in per_view.values()), sum(v["seconds"] for v in per_view.values())
        bulk_trial = {"views": per_view, "cells": cells, "seconds": seconds, "cells_per_s": cells / seconds}
    return {
        "bulk": bulk_trial,
        "events": distinct,
        "rounds": rounds,
        "verified": verify,
        "trials": trials,
        "fastest_put_batch_size": fastest["put_batch_size"],
        "default_put_batch_size": settings.batch.put_batch_size,
    }
