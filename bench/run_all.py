"""Run the benchmark suite on the running stack; write results.json and results.md (README tables).

Each benchmark runs as a subprocess of .venv/bin/python with `--json` to a temporary file, one
after another (the machine has few cores): bench/api_latency.py, bench/speed_freshness.py,
bench/ingest_throughput.py (`--runs 1 --gen-count 50000 --arch-count 100000`; it pauses the
stack's archiver during its drain and starts it again), bench/batch_recompute.py (`--sizes
1000000,5000000,10000000 --runs 1`). `--quick` uses smaller sizes and shorter durations
everywhere. Also the resident memory of each process tree of the running stack, before and after
the benchmarks, and a description of the machine. bench/stack_startup.py needs the stack down
and is not run: pass `--startup-json` with the JSON of an earlier run to include its figures.

    .venv/bin/python bench/run_all.py                 # the full suite (about an hour on 2 cores)
    .venv/bin/python bench/run_all.py --quick         # about 15 minutes

A failing benchmark is reported (exit code, the tail of its log) and the others still run; the
exit code is 1 when any step failed. Logs of every step: <out-dir>/logs/.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = REPO / ".venv" / "bin" / "python"

log = logging.getLogger("bench.run_all")

STEP_NAMES = ("api_latency", "speed_layer", "ingest_throughput", "batch_recompute")


def step_commands(quick: bool, api_port: int | None = None) -> dict[str, list[str]]:
    port = ["--port", str(api_port)] if api_port else []
    if quick:
        return {
            "api_latency": ["bench/api_latency.py", "--clients", "1,8", "--duration", "5", "--probes", "10", *port],
            "speed_layer": [
                "bench/speed_freshness.py",
                "--fresh-duration",
                "20",
                "--rates",
                "500,1000,2000",
                "--step-duration",
                "30",
                "--drain-timeout",
                "45",
            ],
            "ingest_throughput": [
                "bench/ingest_throughput.py",
                "--runs",
                "1",
                "--gen-count",
                "20000",
                "--arch-count",
                "50000",
            ],
            "batch_recompute": [
                "bench/batch_recompute.py",
                "--sizes",
                "200000,500000",
                "--runs",
                "1",
                "--hbase-size",
                "200000",
            ],
        }
    return {
        "api_latency": ["bench/api_latency.py", "--clients", "1,8", *port],
        "speed_layer": ["bench/speed_freshness.py"],
        "ingest_throughput": [
            "bench/ingest_throughput.py",
            "--runs",
            "1",
            "--gen-count",
            "50000",
            "--arch-count",
            "100000",
        ],
        "batch_recompute": ["bench/batch_recompute.py", "--sizes", "1000000,5000000,10000000", "--runs", "1"],
    }


# --- the machine -----------------------------------------------------------------------------------


def machine() -> dict:
    info: dict = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    try:
        models = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        info["cpu_model"] = models[0].strip() if models else platform.processor() or "unknown"
    except OSError:
        info["cpu_model"] = platform.processor() or "unknown"
    try:
        kb = int(re.search(r"^MemTotal:\s*(\d+) kB", Path("/proc/meminfo").read_text(), re.M).group(1))
        info["memory_gib"] = round(kb / 2**20, 1)
    except (OSError, AttributeError):
        info["memory_gib"] = None
    try:
        from definitions.settings import get_settings
        from infra.java import find_java

        java = find_java(get_settings().stack.java_home)
        out = subprocess.run([str(java.executable), "-version"], capture_output=True, text=True, timeout=60)
        info["java"] = (out.stderr or out.stdout).splitlines()[0].strip()
    except Exception as exc:  # report, do not fail the suite
        info["java"] = f"unknown ({type(exc).__name__}: {exc})"
    return info


def stack_memory() -> dict:
    from definitions.settings import get_settings
    from infra.stack import Stack

    try:
        rows = [
            {"service": s.name, "running": s.running, "pid": s.pid, "rss_mb": round(s.rss_mb, 1)}
            for s in Stack(get_settings()).status(probe=False)
        ]
        return {
            "services": rows,
            "total_rss_mb": round(sum(r["rss_mb"] for r in rows), 1),
            "load_average_1m": os.getloadavg()[0],
            "time": datetime.now(UTC).strftime("%H:%M:%S UTC"),
        }
    except Exception as exc:
        log.exception("could not read the stack's memory")
        return {"error": f"{type(exc).__name__}: {exc}"}


# --- running one step ------------------------------------------------------------------------------


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_step(name: str, args: list[str], logs: Path, timeout_s: float) -> dict:
    with tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".json", delete=False) as tmp:
        json_path = Path(tmp.name)
    json_path.unlink()
    command = [str(PYTHON), *args, "--json", str(json_path)]
    stdout_path, stderr_path = logs / f"{name}.stdout.txt", logs / f"{name}.stderr.log"
    log.info("%s: %s (log: %s)", name, " ".join(command[1:]), stderr_path)
    started = time.monotonic()
    step: dict = {"command": " ".join([".venv/bin/python", *args]), "log": str(stderr_path)}
    with open(stdout_path, "w") as out, open(stderr_path, "w") as err:
        proc = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=err, start_new_session=True)
        try:
            step["returncode"] = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            # SIGINT first so that the benchmark's finally blocks run (ingest_throughput restarts
            # the stack's archiver in one); then the whole process group.
            log.error("%s: still running after %.0fs: interrupting it", name, timeout_s)
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(180)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
            step["returncode"] = proc.returncode
            step["error"] = f"timed out after {timeout_s:.0f}s"
        finally:
            if proc.poll() is None:  # e.g. KeyboardInterrupt in run_all itself
                proc.send_signal(signal.SIGINT)
    step["seconds"] = round(time.monotonic() - started, 1)
    step["stdout"] = stdout_path.read_text(errors="replace")
    if json_path.exists():
        try:
            step["result"] = json.loads(json_path.read_text())
        except ValueError as exc:
            step["error"] = step.get("error") or f"unreadable JSON output: {exc}"
        json_path.unlink()
    step["ok"] = step.get("returncode") == 0 and "result" in step and "error" not in step
    if not step["ok"]:
        step["stderr_tail"] = tail(stderr_path)
        last = next((line for line in reversed(step["stderr_tail"].splitlines()) if line.strip()), "")
        last = re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ", "", last)[:300]
        step.setdefault(
            "error",
            f"exit code {step.get('returncode')}"
            + ("" if "result" in step else ", no JSON written")
            + (f"; last log line: {last}" if last else ""),
        )
        log.error("%s FAILED (%s); tail of its log:\n%s", name, step["error"], step["stderr_tail"])
    else:
        log.info("%s: done in %.0fs", name, step["seconds"])
    return step


# --- Markdown ----------------------------------------------------------------------------------------


def f(value, digits: int = 0, suffix: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}{suffix}"
    return str(value)


def table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> list[str]:
    align = align or ["l"] + ["r"] * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(sep) + "|",
        *["| " + " | ".join(r) + " |" for r in rows],
        "",
    ]


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

    summary = []
    api = (steps.get("api_latency") or {}).get("result")
    speed = (steps.get("speed_layer") or {}).get("result")
    ingest = (steps.get("ingest_throughput") or {}).get("result")
    batch = (steps.get("batch_recompute") or {}).get("result")
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
    if batch and batch.get("sizes"):
        biggest = batch["sizes"][-1]
        summary.append(
            [
                f"batch recompute of {f(biggest['records'])} records (Spark / DuckDB)",
                f"{f(biggest['spark_s'], 1)} s / {f(biggest['duckdb_s'], 1)} s",
            ]
        )
    mem = results["memory"].get("after") or results["memory"].get("before") or {}
    if mem.get("services") and any(x["running"] for x in mem["services"]):
        summary.append(["stack RSS (all services)", f"{f(mem['total_rss_mb'])} MiB"])
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


# --- main -----------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and shorter durations everywhere")
    parser.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--steps", default=",".join(STEP_NAMES), help=f"comma-separated among {', '.join(STEP_NAMES)}")
    parser.add_argument("--startup-json", type=Path, help="figures of an earlier bench/stack_startup.py --json run")
    parser.add_argument("--api-port", type=int, help="load the query API on this loopback port (default: settings)")
    parser.add_argument("--step-timeout", type=float, default=5400.0, help="seconds before a step is interrupted")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    for noisy in ("kafka", "infra", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    names = [n.strip() for n in args.steps.split(",") if n.strip()]
    unknown = [n for n in names if n not in STEP_NAMES]
    if unknown:
        parser.error(f"unknown step(s) {unknown}; known: {', '.join(STEP_NAMES)}")
    from definitions.settings import get_settings

    settings = get_settings()
    out_dir = args.out_dir
    logs = out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    command = " ".join([".venv/bin/python bench/run_all.py", *sys.argv[1:]])
    results: dict = {
        "command": command,
        "quick": args.quick,
        "machine": machine(),
        "settings": {
            "ingest_bucket_s": settings.ingest_bucket_s,
            "env_LAMBDA_INGEST_BUCKET_S": os.environ.get("LAMBDA_INGEST_BUCKET_S"),
        },
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "steps": {},
        "memory": {},
    }
    if "LAMBDA_INGEST_BUCKET_S" not in os.environ:
        log.warning(
            "LAMBDA_INGEST_BUCKET_S is not set: the benchmarks use ingest_bucket_s=%d", settings.ingest_bucket_s
        )
    if args.startup_json:
        try:
            results["startup"] = json.loads(args.startup_json.read_text())
            results["startup_json"] = str(args.startup_json)
        except (OSError, ValueError) as exc:
            results["startup"] = {"error": f"{args.startup_json}: {type(exc).__name__}: {exc}"}
    results["memory"]["before"] = stack_memory()
    commands = step_commands(args.quick, args.api_port)
    for name in names:
        try:
            results["steps"][name] = run_step(name, commands[name], logs, args.step_timeout)
        except Exception as exc:  # a step that could not even start
            log.exception("%s could not run", name)
            results["steps"][name] = {
                "command": " ".join(commands[name]),
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
            }
        if name == "ingest_throughput":
            archiver = next((s for s in stack_memory().get("services", []) if s["service"] == "archiver"), None)
            if archiver is not None and not archiver["running"]:
                log.error("the stack's archiver is not running after ingest_throughput: start it with `lambdactl up`")
                results["steps"][name]["archiver_not_running_after"] = True
    results["memory"]["after"] = stack_memory()
    results["finished"] = datetime.now(UTC).isoformat(timespec="seconds")

    text = json.dumps(results, indent=2, default=str)
    (out_dir / "results.json").write_text(text)
    if args.json:
        args.json.write_text(text)
    md = markdown(results)
    (out_dir / "results.md").write_text(md)
    sys.stdout.write(md)
    sys.stdout.write(f"\n(written: {out_dir / 'results.json'}, {out_dir / 'results.md'}; logs in {logs})\n")
    return 0 if all(s.get("ok") for s in results["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
