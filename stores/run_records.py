"""Which batch run records retention deletes.

The meta table holds one record per batch run (its state, cutoff, views, figures). Every swap,
verification, retention pass and report reads all of them, so an hourly schedule that kept them
all would slow each of those by a year's worth of rows. Retention deletes the records nothing
needs any more; what stays is everything a decision reads:
- the `keep` newest runs (`batch.keep_runs`): a report of a recent window, a rollback's record;
- every run the pointer names, or with a table left (retention drops tables from their records);
- every run the pointer's own version names (the realtime clean-up records its mark there);
- every run still live, retired (its tables kept for rollback), verified within the swap's grace
  (`batch.retention_grace_s`), or writing with its process running on this host or beating within
  the grace. A run of another host silent longer is given up, as retention gives up its tables:
  were it still running, it records nothing more (stores.batch_views.record_run_if: only while its
  record says "writing"), so its deleted record does not come back half made;
- for a kept record without its window's start (an earlier release's), the earlier run whose
  cutoff the report reads instead;
- per view, the run holding the highest realtime clean-up mark (reports.build.cleaned_below_s reads
  the highest).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from stores.pointer import Pointer

# Records of runs that ended and whose tables are gone.
ENDED = ("dropped", "failed")


def prunable_runs(
    runs: Mapping[int, Mapping],
    pointer: Pointer | None,
    with_tables: Collection[int],
    keep: int,
    now_ms: float,
    grace_ms: float,
    may_run: Callable[[Mapping], bool | None],
) -> list[int]:
    """The versions whose run records may be deleted, oldest first. `with_tables`: versions with a
    table of theirs left; `may_run` as in stores.pointer.retention_plan (False: its process is known
    gone)."""
    newest = set(sorted(runs)[-keep:]) if keep > 0 else set()
    # The pointer's own version too: the realtime clean-up records its mark on that run's record,
    # which a move that retired views may have left no entry naming.
    named = pointer.versions() | {pointer.version} if pointer is not None else set()
    highest: dict[str, tuple[int, int]] = {}
    for version, run in runs.items():
        try:
            for view, below_s in (run.get("realtime_cleaned_s") or {}).items():
                highest[str(view)] = max(highest.get(str(view), (-1, -1)), (int(below_s), version))
        except (AttributeError, TypeError, ValueError):  # a mark the platform did not write: kept
            highest[f"unread {version}"] = (0, version)
    marks = {version for _, version in highest.values()}
    out = []
    for version, run in sorted(runs.items()):
        if version in newest or version in named or version in marks or version in with_tables:
            continue
        state = run.get("state")
        since = max(run.get(k, 0) or 0 for k in ("started_ms", "verified_ms", "heartbeat_ms"))
        if state == "writing":
            if now_ms - since < grace_ms or may_run(run) is True:
                continue
        elif state == "verified":  # never swapped, and past the grace within which it could have been
            if now_ms - since < grace_ms:
                continue
        elif state not in ENDED:
            continue
        out.append(version)
    # A kept record of a release that did not record its window's start has it read from the
    # earlier runs' cutoffs (reports.build.window_for_version): the one it is read from stays.
    for version, run in runs.items():
        if version in out or "previous_cutoff_ms" in run or not isinstance(run.get("cutoff_ms"), int):
            continue
        earlier = [
            (r["cutoff_ms"], v)
            for v, r in runs.items()
            if v < version
            and r.get("state") in ("live", "retired", "dropped")
            and isinstance(r.get("cutoff_ms"), int)
            and r["cutoff_ms"] <= run["cutoff_ms"]
        ]
        if earlier and max(earlier)[1] in out:
            out.remove(max(earlier)[1])
    return out
