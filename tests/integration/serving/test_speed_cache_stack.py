"""The speed part kept between realtime writes (serving_layer.speed_cache), on the real stores: the
serving layer reads the stack's pointer and speed-layer marker, and a realtime store of the test's
own keyspace, into which the test writes and deletes rows with the platform's own writer and
clean-up. Every write and every deletion shows in the next answers within a fraction of a second
(far below the kept parts' age limit), and between them the kept part answers."""

from __future__ import annotations

import time

from definitions.views import key_text
from serving_layer.service import ServingLayer
from serving_layer.speed_cache import MAX_AGE_S
from stores.realtime import RealtimeRow, RealtimeWriter
from stores.realtime_cleanup import delete_view_from
from tests.support.cassandra_keyspace import scratch_keyspace
from tests.support.polling import wait_for

SHOWS_WITHIN_S = 5.0


def _now_buckets(settings) -> tuple[int, int]:
    """(this ingest bucket, this minute), in seconds."""
    now = int(time.time())
    return now - now % settings.ingest_bucket_s, now - now % 60


def test_answers_follow_every_realtime_write_and_deletion(settings, stack, served_version, unique):
    assert SHOWS_WITHIN_S < MAX_AGE_S / 4, "the age limit alone could not make the test pass"
    with scratch_keyspace(settings, f"speedcache_{unique}") as mine:
        writer = RealtimeWriter(mine)
        serving = ServingLayer(mine)
        try:
            view = next(v for v in serving.views if v.name == "page_views")
            ingest, minute = _now_buckets(mine)
            assert ingest * 1000 >= served_version.source("page_views").cutoff_ms
            url = f"/speed-cache-{unique}"

            def write(value: int) -> None:
                writer.write([RealtimeRow("page_views", "minute", key_text([url]), minute, ingest, value)], [])

            def total() -> float:
                return serving.series(view, {"url": url}, minute - 600, minute + 60, "minute").series.total

            def shows(value: int, what: str) -> float:
                started = time.monotonic()
                wait_for(lambda: total() == value, what, timeout_s=SHOWS_WITHIN_S, interval_s=0.01)
                return time.monotonic() - started

            assert total() == 0
            write(3)
            shows_write = shows(3, "the first write")
            hits = serving.realtime.cache.parts.hits
            assert [total() for _ in range(20)] == [3] * 20
            assert serving.realtime.cache.parts.hits - hits >= 15, "between writes the kept part answers"

            write(8)
            shows_second = shows(8, "a second write of the same row")
            delete_view_from(mine, "page_views", ingest, time.time_ns() // 1000)
            shows_deletion = shows(0, "the deletion")
            print(f"shown after {shows_write:.3f}s, {shows_second:.3f}s, {shows_deletion:.3f}s")
        finally:
            serving.close()
            writer.close()


def test_a_deletion_pass_that_fails_part_way_still_shows_what_it_deleted(
    settings, stack, served_version, unique, monkeypatch
):
    """The connection drops after the first deletions were sent (the store received them): the pass
    raises, and the answers still show those deletions at once, not after the kept parts' age limit."""
    import stores.realtime_cleanup as cleanup

    with scratch_keyspace(settings, f"speedcachefail_{unique}") as mine:
        writer = RealtimeWriter(mine)
        serving = ServingLayer(mine)
        try:
            view = next(v for v in serving.views if v.name == "page_views")
            ingest, minute = _now_buckets(mine)
            url = f"/speed-cache-fail-{unique}"
            writer.write([RealtimeRow("page_views", "minute", key_text([url]), minute, ingest, 5)], [])

            def total() -> float:
                return serving.series(view, {"url": url}, minute - 600, minute + 60, "minute").series.total

            wait_for(lambda: total() == 5, "the write", timeout_s=SHOWS_WITHIN_S, interval_s=0.01)
            sent = cleanup.execute_with_retries

            def sent_then_dropped(session, statement, params, **kwargs):
                sent(session, statement, params, **kwargs)
                if kwargs.get("what", "").endswith(" deletions") and params:
                    raise ConnectionError("the connection dropped after the deletions were sent")

            monkeypatch.setattr(cleanup, "execute_with_retries", sent_then_dropped)
            try:
                delete_view_from(mine, "page_views", ingest, time.time_ns() // 1000)
            except ConnectionError:
                pass
            else:
                raise AssertionError("the injected failure did not reach the deletion pass")
            wait_for(
                lambda: total() == 0, "the deletion sent before the failure", timeout_s=SHOWS_WITHIN_S, interval_s=0.01
            )
        finally:
            serving.close()
            writer.close()
