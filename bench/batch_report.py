"""bench/batch_recompute.py's result as the text it prints: Spark and DuckDB times, ratios, HBase load rates."""

from __future__ import annotations

import os


def report(result: dict) -> str:
    lines = [
        f"Batch recompute (Spark {result['spark_master']}, {result['shuffle_partitions']} shuffle partitions, "
        f"driver {result['driver_memory']}; DuckDB {result['duckdb_version']}, {result['duckdb_threads']} threads; "
        f"medians of {result['runs']} run(s)):",
        f"{'records':>12} {'distinct':>12} {'spark s':>9} {'dedup s':>8} {'duckdb s':>9} {'ratio':>7} {'spark s/M':>10} {'load':>5}",
    ]
    for row in result["sizes"]:
        lines.append(
            f"{row['records']:>12,} {row['distinct_events']:>12,} {row['spark_s']:>9.1f} {row['spark_dedup_s']:>8.1f} "
            f"{row['duckdb_s']:>9.2f} {row['spark_over_duckdb']:>6.1f}x {row['spark_s_per_million']:>10.2f} "
            f"{max(row['load_average_1m']):>5.1f}"
        )
    if "spark_marginal_s_per_million" in result:
        lines.append(
            f"Spark marginal cost (least-squares slope over sizes): {result['spark_marginal_s_per_million']:.2f} s per "
            f"million records, intercept {result['spark_intercept_s']:.1f} s"
        )
    lines.append(
        "(dedup s: the part of spark s spent de-duplicating; load: highest 1-min load average seen around the runs, "
        f"{os.cpu_count()} cores)"
    )
    lines.append(
        "Spark and DuckDB produced identical figures (rows, cells, sum of values) for every view and granularity "
        "(DuckDB computes no HLL sketch for unique_visitors)"
        if result["results_match"]
        else "WARNING: Spark and DuckDB figures differ (see the JSON output)"
    )
    hbase = result.get("hbase")
    if hbase:
        lines.append(
            f"HBase load via write_partitions ({hbase['records']:,} records, {hbase['events']:,} distinct; "
            "page_views + unique_visitors, every granularity; default put_batch_size "
            f"{hbase['default_put_batch_size']}):"
        )
        lines.append(
            f"{'put_batch_size':>14} {'cells':>9} {'seconds':>8} {'cells/s':>9} {'page_views/s':>13} {'unique_visitors/s':>18}"
        )
        for t in hbase["trials"]:
            lines.append(
                f"{t['put_batch_size']:>14,} {t['cells']:>9,} {t['seconds']:>8.1f} {t['cells_per_s']:>9,.0f} "
                f"{t['views']['page_views']['cells_per_s']:>13,.0f} {t['views']['unique_visitors']['cells_per_s']:>18,.0f}"
            )
        bulk = hbase.get("bulk")
        if bulk:
            lines.append(
                f"{'bulk (HFiles)':>14} {bulk['cells']:>9,} {bulk['seconds']:>8.1f} {bulk['cells_per_s']:>9,.0f} "
                f"{bulk['views']['page_views']['cells_per_s']:>13,.0f} "
                f"{bulk['views']['unique_visitors']['cells_per_s']:>18,.0f}"
            )
        lines.append(
            f"fastest: put_batch_size {hbase['fastest_put_batch_size']:,} (seconds: write_partitions, median of "
            f"{hbase['rounds']} round(s)"
            + ("; each table then verified, timed apart below)" if hbase["verified"] else ")")
        )
        if hbase["verified"]:
            lines.append("verification scan of both tables (s, median of the rounds): one scan / split into ranges")
            for t in hbase["trials"]:
                ranges = ", ".join(f"{name} {v['verify_ranges']}" for name, v in t["views"].items())
                lines.append(
                    f"{t['put_batch_size']:>14,} {t['verify_one_scan_s']:>8.1f} / {t['verify_ranges_s']:.1f} "
                    f"= {t['verify_one_scan_s'] / t['verify_ranges_s']:.2f}x (ranges: {ranges})"
                )
    return "\n".join(lines) + "\n"
