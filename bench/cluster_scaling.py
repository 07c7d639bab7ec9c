"""The same jobs in local mode and on the local Spark standalone cluster with one and two workers.

For each `--modes` entry (`local`, or a number of workers) the stack is restarted in that mode
(`lambdactl down`, then `up` with `LAMBDA_SPARK__CLUSTER__WORKERS`), left to settle for
`--settle` s, then:

1. Speed layer: the input-rate ladder of bench/speed_freshness.py (`--rates` records/s for
   `--step-duration` s each; a step is sustained when the lag stays flat and drains), while the
   CPU time of the speed layer's driver (its Python process and the JVM under it) and, on a
   cluster, of the workers' trees (their executors and Python workers) is sampled: each as a
   share of one core over the ladder. Writes that left the driver show as a driver share that
   stays low as the rate grows.
2. Batch: the batch job's recompute (bench/batch_engines.spark_recompute: de-duplication and
   every view, no HBase writes) over a synthetic master dataset of `--batch-size` records
   (bench/batch_dataset, local Parquet), as an application of that mode; median of `--runs`.

Prints a table and the ratios of each mode to the first; `--json` keeps everything. The stack is
left running in the last mode's settings (`LAMBDA_SPARK__CLUSTER__WORKERS=0 lambdactl up` after
`lambdactl down` returns to local mode).

    .venv/bin/python bench/cluster_scaling.py --modes local,1,2 --json /tmp/bench_cluster.json
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from batch_dataset import ensure_dataset  # bench/ itself: the scripts run as files
from batch_engines import spark_recompute  # bench/ itself
from figures import configure_logging, emit, fmt, int_list  # bench/ itself
from rate_ladder import sustained_rates  # bench/ itself

from definitions.settings_store import load
from infra.spark_services import SPARK_WORKERS
from infra.stack import Stack

log = logging.getLogger("bench.cluster_scaling")
ROOT = Path(__file__).resolve().parent.parent
LAMBDACTL = [sys.executable, "-m", "lambdactl.cli"]


def workers_of(mode: str) -> int:
    return 0 if mode == "local" else int(mode)


def restart_in(mode: str) -> None:
    os.environ["LAMBDA_SPARK__CLUSTER__WORKERS"] = str(workers_of(mode))
    for command in ("down", "up"):
        done = subprocess.run([*LAMBDACTL, command], cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"lambdactl {command} in mode {mode} failed: {done.stderr[-2000:]}")


def tree(proc: psutil.Process | None) -> list[psutil.Process]:
    if proc is None:
        return []
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def cpu_seconds(procs: list[psutil.Process], seen: dict[int, float]) -> None:
    """Record each process's own CPU seconds so far (a process that exits keeps its last figure).
    Its children are in `procs` themselves: their time, once reaped, also shows in the parent's
    children_* fields, and was counted twice."""
    for p in procs:
        try:
            t = p.cpu_times()
            seen[p.pid] = t.user + t.system
        except psutil.NoSuchProcess:
            continue


class CpuSampler:
    """CPU seconds of the speed layer's driver tree and of the workers' trees, sampled every second."""

    def __init__(self, stack: Stack, workers: int) -> None:
        self.stack, self.workers = stack, workers
        self.start: dict[str, dict[int, float]] = {"driver": {}, "workers": {}}
        self.last: dict[str, dict[int, float]] = {"driver": {}, "workers": {}}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _groups(self) -> dict[str, list[psutil.Process]]:
        driver = tree(self.stack.supervisor.process("speed-layer"))
        workers = [p for w in SPARK_WORKERS[: self.workers] for p in tree(self.stack.supervisor.process(w.name))]
        return {"driver": driver, "workers": workers}

    def _run(self) -> None:
        for name, procs in self._groups().items():
            cpu_seconds(procs, self.start[name])
        self.started = time.monotonic()
        while not self.stop.wait(1.0):
            for name, procs in self._groups().items():
                cpu_seconds(procs, self.last[name])

    def __enter__(self) -> CpuSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.wall = time.monotonic() - self.started

    def share(self, name: str) -> float:
        """% of one core over the sampling window."""
        used = sum(v - self.start[name].get(pid, 0.0) for pid, v in self.last[name].items())
        return 100.0 * used / self.wall if self.wall else 0.0


def run_mode(mode: str, args) -> dict:
    restart_in(mode)
    settings = load()
    log.info("mode %s: stack up (master %s); settling %.0f s", mode, settings.spark.cluster.master_url, args.settle)
    time.sleep(args.settle)
    stack = Stack(settings)
    run = f"cluster-{mode}-{int(time.time())}"
    with CpuSampler(stack, workers_of(mode)) as cpu:
        ladder = sustained_rates(settings, run, args.rates, args.step_duration, args.drain_timeout)
    from definitions.spark import spark_session

    spark = spark_session(settings, "lambda-bench-cluster", {"spark.driver.memory": args.driver_memory})
    try:
        url = ensure_dataset(spark, args.data_dir, args.batch_size)
        spark_recompute(spark, settings, url)  # warm-up, untimed
        seconds = [spark_recompute(spark, settings, url)["seconds"] for _ in range(args.runs)]
        master = spark.sparkContext.master
    finally:
        spark.stop()
    return {
        "mode": mode,
        "workers": workers_of(mode),
        "spark_master": master,
        "highest_sustained_rate": ladder["highest_sustained_target_rate"],
        "first_unsustained_rate": ladder["first_unsustained_target_rate"],
        "batch_cost_fit": ladder["batch_cost_fit"],
        "driver_cpu_pct": cpu.share("driver"),
        "workers_cpu_pct": cpu.share("workers"),
        "speed_window_s": cpu.wall,
        "batch_records": args.batch_size,
        "batch_seconds": statistics.median(seconds),
        "batch_runs": seconds,
        "load_average": os.getloadavg(),
        "ladder": ladder,
    }


def table(result: dict) -> str:
    rows = result["modes"]
    first = rows[0]
    lines = [
        f"Spark jobs by mode (speed ladder {result['rates']} records/s, {result['step_duration_s']:.0f} s steps; "
        f"batch recompute of {result['batch_size']:,} records, median of {result['runs']})",
        f"{'mode':<8} {'sustained/s':>11} {'not at/s':>9} {'driver CPU':>11} {'workers CPU':>12} {'batch s':>8} "
        f"{'rate x':>7} {'batch x':>8}",
    ]
    for r in rows:
        rate_ratio = (
            r["highest_sustained_rate"] / first["highest_sustained_rate"]
            if r["highest_sustained_rate"] and first["highest_sustained_rate"]
            else None
        )
        lines.append(
            f"{r['mode']:<8} {fmt(r['highest_sustained_rate']):>11} {fmt(r['first_unsustained_rate']):>9} "
            f"{r['driver_cpu_pct']:>10.1f}% {r['workers_cpu_pct']:>11.1f}% {r['batch_seconds']:>8.1f} "
            f"{fmt(rate_ratio, 2):>7} {first['batch_seconds'] / r['batch_seconds']:>8.2f}"
        )
    lines.append(
        "(CPU: % of one core over the ladder; driver = the speed layer's Python process and its JVM, which in "
        "local mode also runs the tasks; workers = the workers' trees: executors and their Python workers; "
        "x: relative to the first mode, higher is better)"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="local,1,2", help="comma-separated: local, or a number of workers")
    parser.add_argument("--rates", type=int_list, default=int_list("1000,2000,3000,4000"))
    parser.add_argument("--step-duration", type=float, default=30.0)
    parser.add_argument("--drain-timeout", type=float, default=45.0)
    parser.add_argument("--settle", type=float, default=90.0, help="seconds after `up` before measuring")
    parser.add_argument("--batch-size", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/lambda-bench-batch"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure_logging()
    result = {
        "rates": args.rates,
        "step_duration_s": args.step_duration,
        "batch_size": args.batch_size,
        "runs": args.runs,
        "cpu_count": os.cpu_count(),
        "modes": [run_mode(mode.strip(), args) for mode in args.modes.split(",")],
    }
    emit(result, table(result), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
