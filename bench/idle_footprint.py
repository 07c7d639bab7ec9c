"""What the running stack costs while nothing arrives: RSS and CPU of every service's process tree.

(The supervisor's row is supervisord, its event listener and the programs' session leaders.)

Waits `--settle` seconds, then reads every service's process tree (the process `lambdactl status`
shows and all its descendants: JVMs, Python workers, Airflow's workers) at the start and the end of
a `--window`, and prints per service the RSS at the end and the CPU used over the window as a
percentage of one core; then the totals. Send no traffic meanwhile (the archiver's ticks still
arrive: they are part of idling).

    .venv/bin/python bench/idle_footprint.py --settle 60 --window 120 [--json out.json]

Needs the stack up (`lambdactl up`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from definitions.settings import get_settings  # noqa: E402
from infra.stack import Stack  # noqa: E402


def trees() -> dict[str, list[psutil.Process]]:
    """Each running service's process and its descendants."""
    found: dict[str, list[psutil.Process]] = {}
    for status in Stack(get_settings()).status(probe=False):
        if not status.running or status.pid is None:
            continue
        try:
            root = psutil.Process(status.pid)
            found[status.name] = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
    # The supervisor's tree holds the supervised programs: count each process once, under its program.
    owned = {proc.pid for name, procs in found.items() if name != "supervisor" for proc in procs}
    if "supervisor" in found:
        found["supervisor"] = [proc for proc in found["supervisor"] if proc.pid not in owned]
    return found


def cpu_seconds(procs: list[psutil.Process]) -> dict[int, float]:
    times = {}
    for proc in procs:
        try:
            t = proc.cpu_times()
            times[proc.pid] = t.user + t.system
        except psutil.Error:
            pass
    return times


def rss_mb(procs: list[psutil.Process]) -> float:
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def measure(window_s: float) -> dict:
    before = {name: cpu_seconds(procs) for name, procs in trees().items()}
    started = time.monotonic()
    time.sleep(window_s)
    elapsed = time.monotonic() - started
    rows = {}
    for name, procs in trees().items():
        after = cpu_seconds(procs)
        start = before.get(name, {})
        # A process that started during the window counts from zero; one that ended is not seen.
        used = sum(cpu - start.get(pid, 0.0) for pid, cpu in after.items())
        rows[name] = {"rss_mb": round(rss_mb(procs)), "cpu_pct": round(100 * used / elapsed, 1)}
    return {
        "window_s": round(elapsed, 1),
        "services": rows,
        "total_rss_mb": sum(r["rss_mb"] for r in rows.values()),
        "total_cpu_pct": round(sum(r["cpu_pct"] for r in rows.values()), 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settle", type=float, default=60.0, help="seconds to wait before measuring")
    parser.add_argument("--window", type=float, default=120.0, help="seconds of CPU accounting")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    time.sleep(args.settle)
    figures = measure(args.window)
    for name, row in figures["services"].items():
        print(f"{name:<22} {row['rss_mb']:>6} MiB {row['cpu_pct']:>6.1f} % of a core")
    print(
        f"{'total':<22} {figures['total_rss_mb']:>6} MiB {figures['total_cpu_pct']:>6.1f} % of a core "
        f"(window {figures['window_s']} s, load average {figures['load_average_1m']})"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
