"""The summary table of results.md: one row per headline figure of bench/run_all.py's results.json."""

from __future__ import annotations

from results_format import f


def summary_rows(results: dict) -> list[list[str]]:
    """(what, figure) for each figure the benchmarks measured."""
    steps = results["steps"]
    summary = []
    api = (steps.get("api_latency") or {}).get("result")
    speed = (steps.get("speed_layer") or {}).get("result")
    ingest = (steps.get("ingest_throughput") or {}).get("result")
    sustained = (steps.get("archiver_sustained") or {}).get("result")
    batch = (steps.get("batch_recompute") or {}).get("result")
    for route in ((steps.get("api_load") or {}).get("result") or {}).get("routes", []):
        summary.append(
            [
                f"`GET {route['route']}` at {route['rate_asked']} req/s asked (hey, "
                f"{route.get('arrivals', 'lockstep')} arrivals)",
                f"{f(route['rate_achieved'], 1)} req/s served, p50 / p99 {f(route['p50_ms'], 1)} / "
                f"{f(route['p99_ms'], 1)} ms, {route['errors']} errors"
                + (f", {route['shortfall']} short of what hey scheduled" if route.get("shortfall") else ""),
            ]
        )
    if speed and speed.get("freshness"):
        s = speed["freshness"]["freshness_from_append_s"]
        summary.append(
            [
                "speed-layer freshness (Kafka → Cassandra), p50 / p95 / p99",
                f"{f(s['p50'], 1)} / {f(s['p95'], 1)} / {f(s['p99'], 1)} s",
            ]
        )
    if speed and speed.get("rates"):
        r = speed["rates"]
        best = r.get("highest_sustained_target_rate")
        above = r.get("first_unsustained_target_rate")
        summary.append(
            [
                "speed layer, highest sustained input rate (steps tried)",
                (f"{f(best)} records/s" if best else "none sustained")
                + (f" (not sustained at {f(above)}/s)" if above else " (every step sustained)"),
            ]
        )
        fit = r.get("batch_cost_fit") or {}
        if fit.get("ceiling_rows_per_s"):
            summary.append(
                [
                    "speed layer, rate ceiling fitted from micro-batch costs",
                    f"~{f(fit['ceiling_rows_per_s'])} records/s ({f(fit['fixed_ms'])} ms per batch + "
                    f"{f(fit['per_row_ms'] * 1000, 1)} µs per record)",
                ]
            )
    if api and api.get("freshness"):
        a = api["freshness"]
        summary.append(
            [
                "end-to-end freshness (POST /api/v1/events → GET page_views), p50 / p95 / p99",
                f"{f(a['p50_s'], 1)} / {f(a['p95_s'], 1)} / {f(a['p99_s'], 1)} s",
            ]
        )
    if api and api.get("routes"):
        pv = max((r for r in api["routes"] if r["route"] == "page_views"), key=lambda r: r["clients"], default=None)
        if pv:
            summary.append(
                [
                    f"GET page_views latency p50 / p99, {pv['clients']} concurrent client(s)",
                    f"{f(pv['p50_ms'], 1)} / {f(pv['p99_ms'], 1)} ms, {f(pv['requests_per_s'], 0)} req/s",
                ]
            )
    if ingest:
        summary.append(["generator send rate", f"{f(ingest.get('generator_records_per_s_median'))} records/s"])
        summary.append(["archiver drain into HDFS", f"{f(ingest.get('archiver_events_per_s_median'))} records/s"])
    if sustained:
        summary.append(
            [
                "archiver, highest sustained input rate (steps tried)",
                f"{f(sustained.get('highest_sustained_offered_rate'))} records/s ({archiver_steps(sustained)})",
            ]
        )
    if batch and batch.get("sizes"):
        biggest = batch["sizes"][-1]
        summary.append(
            [
                f"batch recompute of {f(biggest['records'])} records (Spark / DuckDB)",
                f"{f(biggest['spark_s'], 1)} s / {f(biggest['duckdb_s'], 1)} s",
            ]
        )
    end_to_end = (steps.get("batch_end_to_end") or {}).get("result")
    if end_to_end:
        summary.append(
            [
                f"batch run of {f(end_to_end['records'])} master records end to end (HBase load and verification included)",
                f"{f(end_to_end['seconds'], 1)} s",
            ]
        )
    mem = results["memory"].get("after") or results["memory"].get("before") or {}
    if mem.get("services") and any(x["running"] for x in mem["services"]):
        summary.append(["stack RSS (all services)", f"{f(mem['total_rss_mb'])} MiB"])
    replay = (steps.get("replay") or {}).get("result") or {}
    if replay.get("replay"):
        r = replay["replay"]
        summary.append(
            [
                f"`lambdactl replay --view {r['view']}` over {f(r['records'])} Kafka records",
                f"{f(r['records_per_s'])} records/s in the job ({f(r['job_seconds'], 1)} s), "
                f"{f(r['wall_seconds'], 1)} s for the command",
            ]
        )
    if replay.get("added_view"):
        a = replay["added_view"]
        summary.append(
            [
                f"an added view's history ({a['view']}) over {f(a['history'])} master records",
                f"{f(a['seconds'], 1)} s (HBase load not included)",
            ]
        )
    return summary


def archiver_steps(result: dict) -> str:
    """`20,000 yes, 30,000 no` for an archiver ladder."""
    return ", ".join(f"{f(s['target_rate'])} {'yes' if s['sustained'] else 'no'}" for s in result.get("steps", []))
