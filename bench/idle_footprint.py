"""What the running stack costs while nothing arrives: RSS and CPU of every service's process tree.

(The supervisor's row is supervisord, its event listener and the programs' session leaders.)

Waits `--settle` seconds, then reads every service's process tree (the process `lambdactl status`
shows and all its descendants: JVMs, Python workers, Airflow's workers) at the start and the end of
a `--window`, and prints per service the RSS at the end and the CPU used over the window as a
percentage of one core; then the totals. Send no traffic meanwhile (the archiver's ticks still
arrive: they are part of idling), or let `--trickle N` send N generated events a second over the
window (`lambdactl generate`, not counted in the figures): what a platform costs while events only
trickle in, where every trigger of the speed layer finds records. The speed layer's JVM is also
split by kind of thread (the JIT's compiler threads, the query's stream execution thread, Spark's
task threads, its listener bus, GC …): where its CPU goes.

    .venv/bin/python bench/idle_footprint.py --settle 60 --window 120 [--trickle 20] [--json out.json]

Needs the stack up (`lambdactl up`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from speed_lag import speed_progress  # noqa: E402  (bench/ itself)

from definitions.settings import get_settings  # noqa: E402
from infra.stack import Stack  # noqa: E402
from stores.health import state_held  # noqa: E402

POLL_S = 0.5  # how often the speed layer's progress file is read during the window
THREAD_KINDS_SHOWN = 8  # the speed layer's JVM: the kinds of threads printed (the JSON has all)


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


def jvm_threads(procs: list[psutil.Process]) -> dict[int, tuple[str, float]]:
    """The CPU seconds of each thread of the first JVM among `procs`, by thread id, with its name
    (Linux names a thread by its first 15 characters)."""
    for proc in procs:
        try:
            if proc.name() != "java":
                continue
        except psutil.Error:  # a Python worker that ended since the listing: the JVM may come after it
            continue
        try:
            threads = {}
            for thread in proc.threads():
                try:
                    name = Path(f"/proc/{proc.pid}/task/{thread.id}/comm").read_text().strip()
                except OSError:  # ended since the listing
                    continue
                threads[thread.id] = (name, thread.user_time + thread.system_time)
            return threads
        except psutil.Error:
            return {}
    return {}


def thread_kind(name: str) -> str:
    """A thread's name with its numbers as N (`GC Thread#0` and `GC Thread#1` are one kind); a
    number right after a letter stays (`C1 CompilerThre` and `C2 CompilerThre` are two)."""
    return re.sub(r"(?<![A-Za-z])\d+", "N", name)


def thread_split(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], elapsed_s: float) -> dict:
    """Percent of one core each kind of thread used between two readings, largest first: a thread
    that started between them counts from zero, one that ended is not seen."""
    used: dict[str, float] = {}
    for tid, (name, cpu) in after.items():
        kind = thread_kind(name)
        used[kind] = used.get(kind, 0.0) + cpu - before.get(tid, (name, 0.0))[1]
    shares = {kind: round(100 * cpu / elapsed_s, 1) for kind, cpu in used.items() if cpu > 0}
    return dict(sorted(shares.items(), key=lambda item: item[1], reverse=True))


def micro_batches(seen: dict[int, dict]) -> dict | None:
    """The speed layer's micro-batches, by batch id as its progress file reported them: how many,
    the median duration and state-store removals (ms), the state rows after the last one."""
    if not seen:
        return None
    batches = [seen[batch_id] for batch_id in sorted(seen)]
    return {
        "count": len(batches),
        "batch_ms_median": statistics.median(b.get("batch_ms") or 0 for b in batches),
        "removals_ms_median": statistics.median((b.get("state_ms") or {}).get("removals") or 0 for b in batches),
        "state_rows_last": batches[-1].get("state_rows"),
        "state_bytes_last": batches[-1].get("state_bytes"),
    }


def trickle(rate: float, window_s: float) -> subprocess.Popen | None:
    """`lambdactl generate` sending `rate` live events a second for the window (fresh ids each run)."""
    if rate <= 0:
        return None
    lambdactl = Path(sys.executable).parent / "lambdactl"
    count = str(max(1, round(rate * window_s)))
    seed = str(time.time_ns() % 2**31)
    return subprocess.Popen(
        [str(lambdactl), "generate", "--count", count, "--rate", f"{rate:g}", "--span", "0", "--seed", seed],
        stdout=subprocess.DEVNULL,
    )


def measure(window_s: float, trickle_rate: float = 0.0) -> dict:
    settings = get_settings()
    services = trees()
    before = {name: cpu_seconds(procs) for name, procs in services.items()}
    speed_threads = jvm_threads(services.get("speed-layer", []))
    sender = trickle(trickle_rate, window_s)
    started = time.monotonic()
    seen: dict[int, dict] = {}
    while time.monotonic() - started < window_s:
        # A stopped speed layer leaves its last progress file behind: not a micro-batch of this window.
        progress = (speed_progress(settings) or {}) if "speed-layer" in before else {}
        if isinstance(progress.get("batch_id"), int):
            seen[progress["batch_id"]] = progress
        time.sleep(min(POLL_S, max(0.0, window_s - (time.monotonic() - started))))
    elapsed = time.monotonic() - started
    if sender is not None:
        failed = sender.poll() not in (None, 0)  # ended before the window did, and not by sending it all
        sender.terminate()
        sender.wait()
        if failed:
            raise SystemExit(f"the trickle's `lambdactl generate` exited with {sender.returncode}: no figures")
    rows = {}
    services = trees()
    threads = thread_split(speed_threads, jvm_threads(services.get("speed-layer", [])), elapsed)
    for name, procs in services.items():
        after = cpu_seconds(procs)
        start = before.get(name, {})
        # A process that started during the window counts from zero; one that ended is not seen.
        used = sum(cpu - start.get(pid, 0.0) for pid, cpu in after.items())
        rows[name] = {"rss_mb": round(rss_mb(procs)), "cpu_pct": round(100 * used / elapsed, 1)}
    return {
        "window_s": round(elapsed, 1),
        "trickle_per_s": trickle_rate,
        "services": rows,
        "total_rss_mb": sum(r["rss_mb"] for r in rows.values()),
        "total_cpu_pct": round(sum(r["cpu_pct"] for r in rows.values()), 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "speed_micro_batches": micro_batches(seen),
        "speed_jvm_threads": threads,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settle", type=float, default=60.0, help="seconds to wait before measuring")
    parser.add_argument("--window", type=float, default=120.0, help="seconds of CPU accounting")
    parser.add_argument("--trickle", type=float, default=0.0, help="events a second sent over the window (0: none)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    time.sleep(args.settle)
    figures = measure(args.window, args.trickle)
    for name, row in figures["services"].items():
        print(f"{name:<22} {row['rss_mb']:>6} MiB {row['cpu_pct']:>6.1f} % of a core")
    print(
        f"{'total':<22} {figures['total_rss_mb']:>6} MiB {figures['total_cpu_pct']:>6.1f} % of a core "
        f"(window {figures['window_s']} s, load average {figures['load_average_1m']}"
        + (f", {args.trickle:g} events/s sent" if args.trickle else "")
        + ")"
    )
    batches = figures["speed_micro_batches"]
    if batches:
        print(
            f"speed layer: {batches['count']} micro-batches, median {batches['batch_ms_median']:,.0f} ms "
            f"(state-store removals {batches['removals_ms_median']:,.0f} ms); "
            f"{state_held({'state_rows': batches['state_rows_last'], 'state_bytes': batches['state_bytes_last']})} "
            "at the end"
        )
    threads = figures["speed_jvm_threads"]
    if threads:
        top = list(threads.items())[:THREAD_KINDS_SHOWN]
        print("speed layer's JVM by thread (% of a core): " + ", ".join(f"{kind} {pct:.1f}" for kind, pct in top))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
