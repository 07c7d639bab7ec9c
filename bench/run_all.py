"""Run the benchmark suite on the running stack; write results.json and results.md (README tables).

Each benchmark runs as a subprocess of .venv/bin/python with `--json` to a temporary file, one
after another (the machine has few cores): bench/api_latency.py, bench/speed_freshness.py,
bench/ingest_throughput.py (`--runs 1 --gen-count 50000 --arch-count 100000`; it pauses the
stack's archiver during its drain and starts it again), bench/archiver_sustained.py (rate steps of
20k-50k records/s from Kafka's producer performance tool on a separate archiver; it pauses the
stack's archiver too), bench/batch_recompute.py (`--sizes
1000000,5000000,10000000 --runs 1`), bench/batch_end_to_end.py (a real batch run over 10M master
records, HBase load and verification included, `--size 10000000 --runs 1`), bench/replay_throughput.py (a replay of 1M Kafka records and
an added view's history over 10M master records, `--runs 1`). `--quick` uses smaller sizes and shorter durations
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

from figures import configure_logging
from results_markdown import markdown  # bench/ itself: the scripts run as files

REPO = Path(__file__).resolve().parent.parent
PYTHON = REPO / ".venv" / "bin" / "python"

log = logging.getLogger("bench.run_all")

STEP_NAMES = (
    "api_latency",
    "api_load",
    "speed_layer",
    "ingest_throughput",
    "archiver_sustained",
    "batch_recompute",
    "batch_end_to_end",
    "replay",
)


def step_commands(quick: bool, api_port: int | None = None) -> dict[str, list[str]]:
    port = ["--port", str(api_port)] if api_port else []
    if quick:
        return {
            "api_latency": ["bench/api_latency.py", "--clients", "1,8", "--duration", "5", "--probes", "10", *port],
            "api_load": ["bench/api_load.py", "--duration", "10", *port],
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
            "archiver_sustained": [
                "bench/archiver_sustained.py",
                "--rates",
                "20000,30000",
                "--step-duration",
                "60",
                "--warmup",
                "200000",
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
            "batch_end_to_end": ["bench/batch_end_to_end.py", "--size", "500000", "--runs", "1"],
            "replay": ["bench/replay_throughput.py", "--records", "100000", "--history", "500000", "--runs", "1"],
        }
    return {
        "api_latency": ["bench/api_latency.py", "--clients", "1,8", *port],
        "api_load": ["bench/api_load.py", *port],
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
        "archiver_sustained": ["bench/archiver_sustained.py", "--rates", "20000,30000,40000,50000"],
        "batch_recompute": ["bench/batch_recompute.py", "--sizes", "1000000,5000000,10000000", "--runs", "1"],
        "batch_end_to_end": ["bench/batch_end_to_end.py", "--size", "10000000", "--runs", "1"],
        "replay": ["bench/replay_throughput.py", "--records", "1000000", "--history", "10000000", "--runs", "1"],
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
        last = re.sub(r"^\d\d:\d\d:\d\d [A-Z]+ \S+: ", "", last)[:300]  # figures.configure_logging's prefix
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


# --- main -----------------------------------------------------------------------------------------


def previous_results(out_dir: Path) -> dict | None:
    """The last run's results.json, kept as results.previous.json before this run's replaces it
    (None: no earlier run, or one that cannot be read)."""
    last = out_dir / "results.json"
    if not last.is_file():
        return None
    try:
        previous = json.loads(last.read_text())
        markdown(previous)  # renders, or it is not kept as the figures before
    except Exception as exc:  # noqa: BLE001 - a file of an older suite's shape
        log.warning("the previous results (%s) cannot be read: %s: %s", last, type(exc).__name__, exc)
        return None
    last.replace(out_dir / "results.previous.json")
    return previous


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
    configure_logging("infra")
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
        if name in ("ingest_throughput", "archiver_sustained"):
            archiver = next((s for s in stack_memory().get("services", []) if s["service"] == "archiver"), None)
            if archiver is not None and not archiver["running"]:
                log.error("the stack's archiver is not running after %s: start it with `lambdactl up`", name)
                results["steps"][name]["archiver_not_running_after"] = True
    results["memory"]["after"] = stack_memory()
    results["finished"] = datetime.now(UTC).isoformat(timespec="seconds")

    text = json.dumps(results, indent=2, default=str)
    previous = previous_results(out_dir)
    (out_dir / "results.json").write_text(text)
    if args.json:
        args.json.write_text(text)
    md = markdown(results)
    if previous is not None:  # the figures before, in the same tables
        md += "\n\n" + markdown(previous).replace("# Benchmark results", "# The previous run's results", 1)
    (out_dir / "results.md").write_text(md)
    sys.stdout.write(md)
    sys.stdout.write(f"\n(written: {out_dir / 'results.json'}, {out_dir / 'results.md'}; logs in {logs})\n")
    return 0 if all(s.get("ok") for s in results["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
