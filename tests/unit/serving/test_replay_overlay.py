"""A replay's fresh rows in the speed part of answers (no services): while a replay writes, the view
answers from the rows it had (never 409); once switched, ingest buckets in [from, split) come from the
replay's shadow rows and every other one from the view's own rows; once the cutoff reaches the
split, the shadow rows are no longer read."""

from __future__ import annotations

from typing import Any

from definitions.settings import Settings
from definitions.views import key_text
from serving_layer.service import ServingLayer
from stores.realtime import RealtimeCell
from stores.replays import ReplayMark, shadow_name
from tests.unit.serving.test_serving_caches import CUTOFF_MS, HOUR, MemoryBatchViews

C = CUTOFF_MS // 1000  # the first ingest bucket the merge reads realtime rows of


class MemoryRealtime:
    """Realtime rows in memory: (view, granularity, key, event bucket, ingest bucket) → value."""

    rows: dict[tuple[str, str, str, int, int], int] = {}

    def __init__(self, settings: Any, **kwargs: Any) -> None:
        pass

    @classmethod
    def _matching(cls, view, granularity, buckets, min_ingest_bucket, skip_ingest):
        low, high = skip_ingest or (0, 0)
        for (v, g, k, event, ingest), value in cls.rows.items():
            if v == view and g == granularity and event in buckets and ingest >= min_ingest_bucket:
                if not low <= ingest < high:
                    yield k, event, value

    def series(self, view, granularity, key, buckets, min_ingest_bucket, with_sketches=False, skip_ingest=None):
        out: dict[int, RealtimeCell] = {}
        for k, event, value in self._matching(view, granularity, set(buckets), min_ingest_bucket, skip_ingest):
            if k == key:
                cell = out.setdefault(event, RealtimeCell(sketches=[] if with_sketches else None))
                cell.value += value
                cell.ingest_buckets += 1
        return out

    def bucket(self, view, granularity, buckets, min_ingest_bucket, skip_ingest=None):
        out: dict[int, dict[str, int]] = {}
        for k, event, value in self._matching(view, granularity, set(buckets), min_ingest_bucket, skip_ingest):
            keys = out.setdefault(event, {})
            keys[k] = keys.get(k, 0) + value
        return out

    def close(self) -> None:
        pass


def _serving(tmp_path) -> ServingLayer:
    settings = Settings(
        state_dir=tmp_path,
        ingest_bucket_s=HOUR,
        api={"pointer_cache_s": 0},
        stores={
            "batch_views": "tests.unit.serving.test_serving_caches.MemoryBatchViews",
            "realtime_reader": f"{__name__}.MemoryRealtime",
        },
    )
    serving = ServingLayer(settings)
    serving.speed.known(None)
    assert MemoryBatchViews.current is not None
    MemoryBatchViews.current.publish(1, "run-1", {})
    return serving


def _rows(view: str, values: dict[int, int], key: str = key_text(["/a"]), event: int = C) -> None:
    """`view`'s rows of key `key` in event bucket `event`: {ingest bucket: value}, for page_views
    (hour) and top_pages (hour)."""
    for storage in (view, view.replace("page_views", "top_pages")):
        for ingest, value in values.items():
            MemoryRealtime.rows[(storage, "hour", key, event, ingest)] = value


def _answers(serving: ServingLayer) -> tuple[int, int]:
    """(page_views' total for /a, top_pages' count of /a) over the hours around the cutoff."""
    page_views = next(v for v in serving.views if v.name == "page_views")
    top_pages = next(v for v in serving.views if v.name == "top_pages")
    series = serving.series(page_views, {"url": "/a"}, C - HOUR, C + 3 * HOUR, "hour")
    top = serving.top(top_pages, C - HOUR, C + 3 * HOUR, "hour", 10)
    counts = {key: merged for key, merged, _batch, _speed in top.rows}
    return int(series.series.total), counts.get(key_text(["/a"]), 0)


def _overlay(view: str, from_s: int, split_s: int | None) -> ReplayMark:
    return ReplayMark(view, from_s * 1000, 1, shadow_name(view, 1), None if split_s is None else split_s * 1000)


def test_a_switched_replay_answers_for_its_buckets_and_the_views_own_rows_for_the_others(tmp_path):
    serving = _serving(tmp_path)
    MemoryRealtime.rows = {}
    _rows("page_views", {C: 1, C + HOUR: 100, C + 2 * HOUR: 7})  # C + HOUR: a wrong value to replace
    _rows(shadow_name("page_views", 1), {C: 2, C + HOUR: 3})
    assert _answers(serving) == (108, 108), "no overlay: the view's own rows"

    overlays = {v: _overlay(v, C, C + 2 * HOUR) for v in ("page_views", "top_pages")}
    replaying = {v: C * 1000 for v in ("page_views", "top_pages")}
    serving.speed.known(None, replaying=replaying)
    assert _answers(serving) == (108, 108), "while the replay writes, the rows it had answer (never 409)"
    states = {s.name: s.state for s in serving.view_states()}
    assert states["page_views"] == "replaying" and states["top_pages"] == "replaying", states

    serving.speed.known(None, overlays=overlays)
    assert _answers(serving) == (2 + 3 + 7, 2 + 3 + 7), "switched: [C, C+2h) from the replay, the rest own"


def test_an_overlay_from_after_the_cutoff_keeps_the_earlier_buckets_and_one_behind_the_cutoff_is_not_read(tmp_path):
    serving = _serving(tmp_path)
    MemoryRealtime.rows = {}
    _rows("page_views", {C: 1, C + HOUR: 100, C + 2 * HOUR: 7})
    _rows(shadow_name("page_views", 1), {C + HOUR: 3})
    overlays = {v: _overlay(v, C + HOUR, C + 2 * HOUR) for v in ("page_views", "top_pages")}
    serving.speed.known(None, overlays=overlays)
    assert _answers(serving) == (1 + 3 + 7, 1 + 3 + 7)

    _rows(shadow_name("page_views", 1), {C - 2 * HOUR: 50})  # below the cutoff: never read
    behind = {v: _overlay(v, C - 3 * HOUR, C) for v in ("page_views", "top_pages")}
    serving.speed.known(None, overlays=behind)
    # page_views' batch table has cutoff C (top_pages has none, so its overlay still answers)
    assert _answers(serving)[0] == 108, "the cutoff reached the split: the view's own rows only"


def test_a_claim_left_by_an_in_place_replay_of_an_earlier_release_is_still_refused(tmp_path):
    from serving_layer.service import ViewBuilding

    serving = _serving(tmp_path)
    MemoryRealtime.rows = {}
    _rows("page_views", {C: 1})
    serving.speed.known(None, replaying={"page_views": C * 1000}, in_place={"page_views"})
    page_views = next(v for v in serving.views if v.name == "page_views")
    try:
        serving.series(page_views, {"url": "/a"}, C - HOUR, C + 3 * HOUR, "hour")
    except ViewBuilding as exc:
        assert "--resume" in str(exc)
    else:
        raise AssertionError("a view whose rows an older replay deleted answered (short) instead of 409")


def test_a_view_whose_replay_mark_is_no_mark_is_refused_naming_it_and_the_other_views_answer(tmp_path):
    from serving_layer.service import ViewBuilding

    serving = _serving(tmp_path)
    MemoryRealtime.rows = {}
    _rows("page_views", {C: 1})
    _rows("top_pages", {C: 2})
    why = "page_views.json: a JSON list, not an object"
    serving.speed.known(None, replaying={"page_views": 0}, unreadable={"page_views": why})
    page_views = next(v for v in serving.views if v.name == "page_views")
    try:
        serving.series(page_views, {"url": "/a"}, C - HOUR, C + 3 * HOUR, "hour")
    except ViewBuilding as exc:
        assert why in str(exc) and "--resume" in str(exc)
    else:
        raise AssertionError("a view with a broken replay mark answered as if none were there")
    top_pages = next(v for v in serving.views if v.name == "top_pages")
    assert serving.top(top_pages, C - HOUR, C + 3 * HOUR, "hour", 10).rows, "the other views still answer"


def test_rows_dropped_as_late_that_a_switched_replay_counted_no_longer_flag_the_answers(tmp_path):
    """A replay reads Kafka whole, with no watermark: rows the speed layer dropped as late are in its
    rows. Its answers were still flagged "may be missing rows" until the next batch run."""
    serving = _serving(tmp_path)
    MemoryRealtime.rows = {}
    _rows("page_views", {C: 1})
    page_views = next(v for v in serving.views if v.name == "page_views")

    def reasons() -> list[str]:
        return serving.series(page_views, {"url": "/a"}, C - HOUR, C + 3 * HOUR, "hour").provenance.reasons

    dropped = ((C + HOUR) * 1000, 7)  # rows ingested at or before C + 1 h, after the cutoff C
    serving.speed.known(None, late_drops=dropped)
    assert any("7 rows later than its watermark" in r for r in reasons())
    serving.speed.known(None, late_drops=dropped, overlays={"page_views": _overlay("page_views", C, C + 2 * HOUR)})
    assert reasons() == [], "the replay's rows, from the cutoff to past the drops, hold them"
    for from_s, split_s in ((C + HOUR, C + 2 * HOUR), (C, C + HOUR)):  # from after the cutoff; split on the watermark
        overlays = {"page_views": _overlay("page_views", from_s, split_s)}
        serving.speed.known(None, late_drops=dropped, overlays=overlays)
        assert any("7 rows later than its watermark" in r for r in reasons()), (from_s, split_s)
