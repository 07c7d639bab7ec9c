"""results.md: the benchmark suite's results (bench/run_all.py's results.json) as the README's tables."""

from __future__ import annotations

from results_format import f, table  # bench/ itself: the scripts run as files
from results_summary import summary_rows


def markdown(results: dict) -> str:
    m = results["machine"]
    before = results["memory"].get("before") or {}
    running = [x["service"] for x in before.get("services", []) if x["running"]]
    stack = (
        f"{len(running)} of {len(before.get('services', []))} stack services running"
        if before.get("services")
        else "stack state unknown"
    )
    lines = [
        "# Benchmark results",
        "",
        f"`{results['command']}` — {m['date']}, {stack}"
        f" (ingest bucket {results['settings'].get('ingest_bucket_s')} s){' — quick mode' if results['quick'] else ''}.",
        "",
    ]
    lines += table(
        ["machine", ""],
        [
            ["CPU", f"{m.get('cpu_model')} ({m.get('cores')} cores)"],
            ["memory", f"{f(m.get('memory_gib'), 1)} GiB"],
            ["Python", m.get("python", "?")],
            ["Java", m.get("java", "?")],
            ["kernel", m.get("kernel", "?")],
            [
                "load average (1 min) before / after",
                f"{f(results['memory'].get('before', {}).get('load_average_1m'), 1)} / "
                f"{f(results['memory'].get('after', {}).get('load_average_1m'), 1)}",
            ],
        ],
        ["l", "l"],
    )
    steps = results["steps"]

    api = (steps.get("api_latency") or {}).get("result")
    speed = (steps.get("speed_layer") or {}).get("result")
    ingest = (steps.get("ingest_throughput") or {}).get("result")
    sustained = (steps.get("archiver_sustained") or {}).get("result")
    batch = (steps.get("batch_recompute") or {}).get("result")
    end_to_end = (steps.get("batch_end_to_end") or {}).get("result")
    summary = summary_rows(results)
    if summary:
        lines += ["## Summary", ""] + table(["what", "figure"], summary)

    if api and api.get("routes"):
        lines += [
            f"## Query API ({api['base_url']}, {f(api['duration_s'])} s per route and client count, httpx clients "
            "in threads on the same machine)",
            "",
        ]
        rows = []
        for r in api["routes"]:
            errors = sum(r["errors"].values())
            rows.append(
                [
                    f"`{r['path'].split('?')[0]}`" + (f" ({r['route']})" if r["route"] not in r["path"] else ""),
                    str(r["clients"]),
                    f(r["requests_per_s"], 1),
                    f(r["p50_ms"], 1),
                    f(r["p90_ms"], 1),
                    f(r["p99_ms"], 1),
                    f(errors) + (f" ({', '.join(r['errors'])})" if errors else ""),
                ]
            )
        lines += table(["route", "clients", "req/s", "p50 ms", "p90 ms", "p99 ms", "errors"], rows)
        if api.get("freshness"):
            a = api["freshness"]
            lines += [
                f"Freshness end to end: {a['visible']}/{a['probes']} probe events posted through "
                f"`POST /api/v1/events` became visible in `GET /api/v1/views/page_views?granularity=minute` after "
                f"p50 {f(a['p50_s'], 1)} s, p95 {f(a['p95_s'], 1)} s, p99 {f(a['p99_s'], 1)} s "
                f"(max {f(a['max_s'], 1)} s; polled every {a['poll_interval_s']} s).",
                "",
            ]
        for warning in (api.get("api_batch_error"),):
            if warning:
                lines += [f"Warning: the API reported `{warning}`.", ""]

    if speed:
        lines += ["## Speed layer", ""]
        if speed.get("freshness"):
            fr = speed["freshness"]
            s = fr["freshness_from_append_s"]
            lines += [
                f"Freshness: {fr['visible']}/{fr['probes']} probe page views (one every {fr['probe_interval_s']} s, "
                f"among {f(fr['background_rate_achieved'])} records/s of generator traffic for {f(fr['duration_s'])} s) "
                f"counted in Cassandra `realtime_by_key` after p50 {f(s['p50'], 1)} s, p95 {f(s['p95'], 1)} s, "
                f"p99 {f(s['p99'], 1)} s (min {f(s['min'], 1)}, max {f(s['max'], 1)}; from the broker's LogAppendTime; "
                f"trigger {speed.get('trigger_s')} s).",
                "",
            ]
        if speed.get("rates"):
            r = speed["rates"]
            rows = [
                [
                    f(s["target_rate"]),
                    f(s["offered_rate"]),
                    f(s["processed_rows_per_s"]),
                    f(s["committed_rows_per_s"]),
                    f(s["batch_ms_median"]),
                    " → ".join(f(x) for x in s["lag_after_commits"]) or "–",
                    f(s["rows_behind_max"]),
                    f(s["drained_after_s"], 1),
                    "yes" if s["sustained"] else "**no**: " + "; ".join(s["not_sustained_because"]),
                ]
                for s in r["steps"]
            ]
            rows += [[f(rate), "not run", "", "", "", "", "", "", ""] for rate in r.get("not_run", [])]
            lines += [
                f"Input rate steps of {f(r['step_duration_s'])} s (generator, valid events; trigger {r['trigger_s']} s):",
                "",
            ]
            lines += table(
                [
                    "target /s",
                    "offered /s",
                    "processed /s (Spark)",
                    "committed /s",
                    "batch ms (median)",
                    "lag just after each commit",
                    "rows_behind max",
                    "caught up after (s)",
                    "sustained",
                ],
                rows,
                ["r"] * 8 + ["l"],
            )
            fit = r.get("batch_cost_fit")
            if fit and fit.get("ceiling_rows_per_s"):
                lines += [
                    f"Batch cost fitted over {fit['batches']} micro-batches: {f(fit['fixed_ms'])} ms + "
                    f"{f(fit['per_row_ms'] * 1000, 1)} µs per record, so the input rate cannot exceed about "
                    f"{f(fit['ceiling_rows_per_s'])} records/s (micro-batches, and freshness, grow without bound as it "
                    "nears that).",
                    "",
                ]
    if ingest:
        lines += ["## Ingest", ""]
        lines += table(
            ["what", "figure"],
            [
                [
                    "generator send rate (kafka-python, one process)",
                    f"{f(ingest['generator_records_per_s_median'])} records/s (runs: {' / '.join(f(x) for x in ingest['generator_runs'])})",
                ],
                [
                    "archiver drain of a backlog (5 % invalid) into HDFS + DLQ",
                    f"{f(ingest['archiver_events_per_s_median'])} records/s ({f(ingest['archiver_runs'][0]['records'])} records)",
                ],
            ],
        )
    if sustained:
        lines += [
            f"Archiver input rate steps of {f(sustained['step_duration_s'])} s sent by Kafka's producer performance "
            f"tool (trigger {sustained['trigger_s']} s; a separate archiver, warmed up on "
            f"{f(sustained['warmup_records'])} records):",
            "",
        ]
        lines += table(
            [
                "target /s",
                "offered /s",
                "batch ms (median / max)",
                "lag after commits",
                "drained after (s)",
                "sustained",
            ],
            [
                [
                    f(s["target_rate"]),
                    f(s["offered_rate"]),
                    f"{f(s['batch_ms_median'])} / {f(s['batch_ms_max'])}",
                    " → ".join(f(x) for x in s["lag_after_commits"]),
                    f(s["drained_after_s"], 1),
                    "yes" if s["sustained"] else "no: " + "; ".join(s["not_sustained_because"]),
                ]
                for s in sustained["steps"]
            ],
        )
    if batch and batch.get("sizes"):
        lines += [
            f"## Batch recompute (Spark {batch['spark_master']}, driver {batch['driver_memory']}; "
            f"DuckDB {batch['duckdb_version']}, {batch['duckdb_threads']} threads)",
            "",
        ]
        lines += table(
            [
                "records",
                "distinct events",
                "Spark (s)",
                "of which dedup (s)",
                "DuckDB (s)",
                "Spark / DuckDB",
                "Spark s per M",
            ],
            [
                [
                    f(r["records"]),
                    f(r["distinct_events"]),
                    f(r["spark_s"], 1),
                    f(r["spark_dedup_s"], 1),
                    f(r["duckdb_s"], 2),
                    f(r["spark_over_duckdb"], 1, "×"),
                    f(r["spark_s_per_million"], 2),
                ]
                for r in batch["sizes"]
            ],
        )
        lines += [
            "Spark and DuckDB figures match for every view."
            if batch.get("results_match")
            else "**Spark and DuckDB figures differ** (see results.json).",
            "",
        ]
        hb = batch.get("hbase")
        if hb:
            lines += [f"HBase load ({f(hb['records'])} records; page_views + unique_visitors, every granularity):", ""]
            lines += table(
                ["put batch size", "cells", "seconds", "cells/s"],
                [
                    [f(t["put_batch_size"]), f(t["cells"]), f(t["seconds"], 1), f(t["cells_per_s"])]
                    for t in hb["trials"]
                ],
            )
    if end_to_end:
        run = sorted(end_to_end["runs"], key=lambda r: r["seconds"])[len(end_to_end["runs"]) // 2]
        lines += [
            f"## Batch run end to end ({f(end_to_end['records'])} master records, load {run['load']}, "
            f"driver {end_to_end['driver_memory']} `{end_to_end['jvm_options']}`; the middle of "
            f"{len(end_to_end['runs'])} run(s) by time, of an even number the slower middle one)",
            "",
        ]
        rows = [
            ["session start, plan", f(run["session_s"], 1)],
            ["read, de-duplicate, cache", f(run["deduplication_s"], 1)],
        ]
        rows += [[f"`{name}` computed and loaded", f(sec, 1)] for name, sec in run["views_written_s"].items()]
        rows += [
            ["waiting for the last verifications", f(run["last_verification_s"], 1)],
            ["**total**", f"**{f(run['seconds'], 1)}**"],
        ]
        lines += table(["phase", "seconds"], rows)
    before, after = results["memory"].get("before") or {}, results["memory"].get("after") or {}
    if before.get("services") or after.get("services"):
        names = [s["service"] for s in (before.get("services") or after.get("services"))]
        b = {s["service"]: s for s in before.get("services", [])}
        a = {s["service"]: s for s in after.get("services", [])}

        def cell(row):
            if row is None:
                return "–"
            return f(row["rss_mb"]) if row["running"] else "not running"

        lines += ["## Memory of the running stack (RSS of each process tree, MiB)", ""]
        rows = [[n, cell(b.get(n)), cell(a.get(n))] for n in names]
        rows.append(["**total**", f"**{f(before.get('total_rss_mb'))}**", f"**{f(after.get('total_rss_mb'))}**"])
        lines += table(["service", "before the benchmarks", "after"], rows)
    startup = results.get("startup")
    if startup and not startup.get("error"):
        lines += [
            f"## Cold start (bench/stack_startup.py, {startup.get('runs')} run(s), from `{results.get('startup_json')}`)",
            "",
        ]
        rows = [[s["service"], f(s["ready_s_median"], 1), f(s["rss_mb_median"])] for s in startup.get("services", [])]
        rows.append(
            [
                "**whole stack**",
                f"**{f(startup.get('stack_ready_s_median'), 1)}**",
                f"**{f(startup.get('stack_rss_mb_median'))}**",
            ]
        )
        lines += table(["service", "healthy after (s)", "RSS (MiB)"], rows)
    elif startup:
        lines += [f"Cold start figures not included: {startup['error']}", ""]
    failed = [(n, s) for n, s in steps.items() if not s.get("ok")]
    if failed:
        lines += ["## Failures", ""]
        lines += table(
            ["step", "error", "log"],
            [[n, s.get("error", "?").replace("|", "\\|"), f"`{s.get('log')}`"] for n, s in failed],
            ["l", "l", "l"],
        )
    lines += ["Step durations: " + ", ".join(f"{n} {f(s.get('seconds'))} s" for n, s in steps.items()) + ".", ""]
    return "\n".join(lines)
