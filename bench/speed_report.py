"""bench/speed_freshness.py's result as the text it prints: freshness percentiles and the rate ladder."""

from __future__ import annotations

import os

from figures import fmt

from stores.realtime_schema import BY_KEY


def report(result: dict) -> str:
    lines = []
    d = result.get("dedupe")
    if d is not None:  # the checkpoint's operator, which the settings alone do not say
        lines.append(
            f"Speed-layer de-duplication: {d['operator']}, window {d['window_s']} s"
            if d.get("operator")
            else "Speed-layer de-duplication: not known (no progress file)"
        )
    f = result.get("freshness")
    if f:
        s = f["freshness_from_append_s"]
        lines.append(
            f"Speed-layer freshness (Kafka LogAppendTime -> count visible in Cassandra {BY_KEY}), "
            f"{f['probes']} probes every {f['probe_interval_s']} s among {fmt(f['background_rate_achieved'])} records/s "
            f"of background traffic for {f['duration_s']:.0f} s (trigger {result['trigger_s']} s):"
        )
        lines.append(
            f"  p50 {fmt(s['p50'], 2)} s   p95 {fmt(s['p95'], 2)} s   p99 {fmt(s['p99'], 2)} s   "
            f"(min {fmt(s['min'], 2)}, max {fmt(s['max'], 2)}; {f['visible']}/{f['probes']} probes visible, "
            f"poll every {f['poll_interval_s']} s)"
        )
        a = f["produce_ack_s"]
        lines.append(
            f"  (probe send -> broker ack p50 {fmt(a['p50'], 3)} s; freshness from send() p50 "
            f"{fmt(f['freshness_from_send_s']['p50'], 2)} s)"
        )
    r = result.get("rates")
    if r:
        lines.append(
            f"Speed-layer input rate steps of {r['step_duration_s']:.0f} s (trigger {r['trigger_s']} s, "
            f"maxOffsetsPerTrigger {r['max_offsets_per_trigger']:,}):"
        )
        lines.append(
            f"{'target/s':>9} {'offered/s':>10} {'processed/s':>12} {'committed/s':>12} {'batch ms':>9} "
            f"{'lag after commits':>26} {'lag max':>8} {'rows_behind':>12} {'drained s':>10}  verdict"
        )
        for s in r["steps"]:
            after = s["lag_after_commits"]
            shown = " ".join(_short(x) for x in (after if len(after) <= 5 else [*after[:2], None, *after[-2:]]))
            lines.append(
                f"{s['target_rate']:>9,} {s['offered_rate']:>10,.0f} {fmt(s['processed_rows_per_s']):>12} "
                f"{fmt(s['committed_rows_per_s']):>12} {fmt(s['batch_ms_median']):>9} {shown or '-':>26} "
                f"{fmt(s['lag_max']):>8} {fmt(s['rows_behind_max']):>12} {fmt(s['drained_after_s'], 1):>10}  "
                + ("sustained" if s["sustained"] else "NOT sustained: " + "; ".join(s["not_sustained_because"]))
            )
        if r["not_run"]:
            lines.append(f"  not run (a lower rate was not sustained): {', '.join(map(str, r['not_run']))}")
        best = r["highest_sustained_target_rate"]
        lines.append(
            f"highest sustained rate: {fmt(best)} records/s"
            + (f" (offered {fmt(r['highest_sustained_offered_rate'])}/s)" if best else " (none of the steps)")
            + (
                f"; not sustained at {r['first_unsustained_target_rate']:,}/s"
                if r["first_unsustained_target_rate"]
                else "; every step sustained (the limit is higher)"
            )
        )
        fit = r.get("batch_cost_fit")
        if fit:
            lines.append(
                f"batch cost fit over {fit['batches']} batches: {fit['fixed_ms']:,.0f} ms + {fit['per_row_ms'] * 1000:,.1f} us "
                f"per record -> rate ceiling ~{fmt(fit['ceiling_rows_per_s'])} records/s (batches grow without "
                "bound as the rate nears it)"
            )
        for s in r["steps"]:
            lines.extend(time_lines(s))
        lines.append(
            "(processed/s: Spark's processedRowsPerSecond over the step's batches (rows / busy time); committed/s: "
            "offsets committed per second; lag: Kafka end offsets - the speed layer's committed offsets, just after "
            "each commit (k = thousands); rows_behind: the progress file's figure, non-zero only when a batch is "
            "capped by maxOffsetsPerTrigger)"
        )
    for name, error in result.get("errors", {}).items():
        lines.append(f"{name}: FAILED: {error}")
    lines.append(f"(load average {', '.join(f'{x:.1f}' for x in result['load_average'])} on {os.cpu_count()} cores)")
    return "\n".join(lines) + "\n"


def time_lines(step: dict) -> list[str]:
    """Where the step's batch time went, per 1,000 input rows (bench/rate_ladder.time_breakdown)."""
    t = step.get("time_per_1k_rows")
    if not t:
        return []
    wall = ", ".join(f"{part} {ms:,.1f}" for part, ms in sorted(t["wall_ms"].items(), key=lambda kv: -kv[1]) if ms)
    lines = [
        f"  {step['target_rate']:,}/s, per 1,000 input rows over {t['batches']} batches ({t['rows']:,} rows), "
        f"wall ms: {wall or '-'}"
    ]
    for operator, times in t["state_task_ms"].items():
        lines.append(
            f"    state operator {operator}, task ms (partitions side by side): updates {times['updates_ms']:,.1f}, "
            f"removals {times['removals_ms']:,.1f}, commit {times['commit_ms']:,.1f}"
        )
    return lines


def _short(value) -> str:
    if value is None:
        return ".."
    return f"{value / 1000:.1f}k" if value >= 1000 else str(value)
