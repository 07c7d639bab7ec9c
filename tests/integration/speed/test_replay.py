"""`lambdactl replay` on the real stack: a view's wiped realtime rows come back exact from Kafka while
traffic flows; the replay writes fresh rows and then switches, so the view keeps answering (never
409, never 5xx) and so do the other views; a second replay replaces the first one's rows; the
accuracy report of the batch run that absorbs them compares the replayed rows with the batch; a replay
cannot run twice at once, and an interrupted one is taken over by `--resume`."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx

from lambdactl.views import refresh_api
from stores import completeness
from stores.clients import cassandra_cluster
from stores.realtime import RealtimeRow, RealtimeWriter
from stores.realtime_cleanup import delete_view_from
from stores.realtime_schema import BY_KEY
from stores.registry import version_store
from stores.replays import mark, read_marks, read_overlays, shadow_name, unmark
from tests.integration.api.test_end_to_end import api, merged, mismatches, parts, wait_exact, window
from tests.support.cli import env, lambdactl
from tests.support.events import mixed_workload
from tests.support.polling import wait_for


def served_cutoff_ms(settings, view: str) -> int:
    """The cutoff of the batch table serving `view`; 0 before its first batch run."""
    pointer = version_store(settings).pointer()
    return pointer.cutoff_of(view) if pointer is not None and pointer.entry(view) is not None else 0


def rows_named(settings, name: str) -> int:
    """How many `realtime_by_key` rows are stored under `name` (a small test keyspace: a full scan)."""
    cluster = cassandra_cluster(settings, timeout_s=30)
    try:
        session = cluster.connect(settings.cassandra.keyspace)
        return session.execute(f"SELECT count(*) FROM {BY_KEY} WHERE view_name = %s ALLOW FILTERING", (name,)).one()[0]
    finally:
        cluster.shutdown()


def test_wiped_rows_come_back_exact_by_replay_while_traffic_flows(settings, stack):
    prefix = f"/replay-{uuid.uuid4().hex[:8]}"
    sent = mixed_workload(settings, prefix, count=3_000, pages=25)
    wait_exact(settings, sent)
    assert parts(settings, sent)[1] > 0, "the workload has a speed part to lose"

    cutoff_s = served_cutoff_ms(settings, "page_views") // 1000
    delete_view_from(settings, "page_views", cutoff_s, time.time_ns() // 1000)
    assert mismatches(settings, sent), "wiping the view's realtime rows made its answers short"

    url = sorted({json.loads(r.value)["url"] for r in sent if r.kind == "valid"})[0]
    start, end = window(sent)
    seen: dict[str, list[int]] = {"page_views": [], "unique_visitors": []}
    more: list = []
    replay = subprocess.Popen(
        [sys.executable, "-m", "lambdactl.cli", "replay", "--view", "page_views", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(settings),
    )

    def traffic() -> None:  # new records the whole time: the running speed layer counts them
        more.extend(mixed_workload(settings, prefix, count=1_500, pages=25))

    sender = threading.Thread(target=traffic)
    sender.start()
    while replay.poll() is None:
        for view in seen:
            seen[view].append(merged(settings, url, start, end, view=view).status_code)
        time.sleep(0.5)
    sender.join()
    out, err = replay.communicate()
    assert replay.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["view"] == "page_views" and summary["records"] > 0 and summary["rows_written"] > 0, summary

    assert len(seen["page_views"]) > 3, "answers were asked during the replay"
    assert set(seen["page_views"]) == {200}, f"the replayed view kept answering: {seen['page_views']}"
    assert set(seen["unique_visitors"]) == {200}, f"the other views kept answering: {seen['unique_visitors']}"
    wait_exact(settings, sent + more, timeout_s=240)
    assert "page_views" not in read_marks(settings), "the claim is gone once switched"
    first = read_overlays(settings)["page_views"]
    assert (first.shadow, first.split_ms) == (summary["shadow"], summary["split_ms"]), first
    assert rows_named(settings, first.shadow) > 0

    # Once more, over the switched one: it replaces the first replay's rows, and stays exact. No query
    # runs while these two commands wait before deleting rows an answer may read: the shortest settle
    # the settings allow (test_pointer_cache_swap.py proves the settle with queries running).
    settle = {"LAMBDA_BATCH__CLEANUP_SETTLE_S": str(settings.api.pointer_cache_s + 5)}
    again = lambdactl(settings, "replay", "--view", "page_views", "--json", extra_env=settle)
    assert again.returncode == 0, again.stderr[-3000:]
    second = json.loads(again.stdout.strip().splitlines()[-1])
    assert second["from_ms"] <= summary["from_ms"] and second["shadow"] != first.shadow, second
    assert read_overlays(settings)["page_views"].shadow == second["shadow"]
    assert rows_named(settings, first.shadow) == 0, "the replaced replay's rows are deleted"
    wait_exact(settings, sent + more, timeout_s=240)

    # A batch run whose cutoff passes the split absorbs the replayed rows: the clean-up deletes them
    # and the switched replay, and the answers stay exact.
    split = second["split_ms"]
    wait_for(
        lambda: (c := completeness.latest(settings)) is not None and (c.complete_before_ms or 0) > split,
        "the archiver's completeness to pass the replay's split",
        timeout_s=300,
        interval_s=2,
    )
    batch = lambdactl(settings, "batch", "--views", "page_views", "--json")
    assert batch.returncode == 0, batch.stderr[-3000:]
    assert served_cutoff_ms(settings, "page_views") >= second["split_ms"]
    # The accuracy report of that run compares the replayed rows with the batch like any others: the
    # originals of the test's URLs were wiped, so a report that read past the replay would find them short.
    version = version_store(settings).pointer().entry("page_views").version
    built = lambdactl(settings, "report", "--version", str(version), "--json")
    assert built.returncode == 0, built.stderr[-3000:]
    report = json.loads(Path(json.loads(built.stdout.strip().splitlines()[-1])["json"]).read_text())
    compared = report["views"]["page_views"]
    ours = [d for d in compared["differences"] if str(d["key"]).find(prefix) >= 0]
    assert compared["differences_total"] == len(compared["differences"]), "every differing cell is listed"
    assert ours == [], f"the report found the replayed view short: {ours[:5]}"
    assert compared["granularities"]["minute"]["speed_total"] > 0, compared["granularities"]["minute"]
    # Rows of a replay no mark names (a cancel that could not reach Cassandra left them) go too.
    orphan = shadow_name("page_views", second["split_ms"] - 3_600_000)
    writer = RealtimeWriter(settings)
    try:
        bucket = split // 1000 // 60 * 60 - 60
        writer.write([RealtimeRow(orphan, "hour", "/orphan", bucket // 3600 * 3600, bucket, 1)], [])
    finally:
        writer.close()
    clean = lambdactl(settings, "clean-realtime", "--json", extra_env=settle)
    assert clean.returncode == 0, clean.stderr[-3000:]
    orphaned = json.loads(clean.stdout.strip().splitlines()[-1])["orphaned_replays"]
    assert orphan in orphaned["names"] and second["shadow"] not in orphaned["names"], orphaned
    assert rows_named(settings, orphan) == 0
    assert "page_views" not in read_overlays(settings)
    assert rows_named(settings, second["shadow"]) == 0, "the replayed rows below the cutoff are deleted"
    wait_exact(settings, sent + more, timeout_s=240)


def test_a_replay_from_a_time_or_from_offsets_rebuilds_the_rows_from_there_on(settings, stack):
    """`--from <time>` and `--from offsets:P=O`: rows wiped from a moment on come back exact from a
    replay that starts there (floored to its ingest bucket), not from the batch cutoff."""
    if (earlier := read_overlays(settings).get("page_views")) is not None:  # a replay replaces it from its --from
        absorb_replay(settings, earlier.split_ms)
    prefix = f"/replay-from-{uuid.uuid4().hex[:8]}"
    bucket_ms = settings.ingest_bucket_s * 1000
    early = mixed_workload(settings, prefix, count=600, pages=10)
    valid = lambda sent: sorted((r for r in sent if r.kind == "valid"), key=lambda r: r.ingest_time_ms)  # noqa: E731
    boundary = valid(early)[-1].ingest_time_ms // bucket_ms * bucket_ms + bucket_ms
    wait_for(lambda: time.time() * 1000 > boundary + 1_000, "the next ingest bucket", timeout_s=120, interval_s=0.5)
    late = mixed_workload(settings, prefix, count=600, pages=10)
    sent = early + late
    wait_exact(settings, sent)
    offsets_from, time_from = valid(early)[0], valid(late)[0]
    assert time_from.ingest_time_ms // bucket_ms > offsets_from.ingest_time_ms // bucket_ms
    assert offsets_from.ingest_time_ms > served_cutoff_ms(settings, "page_views"), "both after the batch cutoff"

    for record, given in (
        (
            time_from,
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time_from.ingest_time_ms / 1000))
            + f".{time_from.ingest_time_ms % 1000:03d}+00:00",
        ),
        (offsets_from, f"offsets:{offsets_from.partition}={offsets_from.offset}"),
    ):
        start_ms = record.ingest_time_ms // bucket_ms * bucket_ms
        delete_view_from(settings, "page_views", start_ms // 1000, time.time_ns() // 1000)
        assert mismatches(settings, sent), f"wiping the rows from {start_ms} made the answers short"
        done = lambdactl(settings, "replay", "--view", "page_views", "--from", given, "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        assert summary["from_ms"] == start_ms, (given, summary)
        wait_exact(settings, sent, timeout_s=240)

    absorb_replay(settings, summary["split_ms"])
    wait_exact(settings, sent, timeout_s=240)


def absorb_replay(settings, split_ms: int) -> None:
    """A batch run of page_views past a switched replay's split absorbs its rows; the clean-up
    deletes them and the replay's overlay."""
    wait_for(
        lambda: (c := completeness.latest(settings)) is not None and (c.complete_before_ms or 0) > split_ms,
        "the archiver's completeness to pass the replay's split",
        timeout_s=300,
        interval_s=2,
    )
    batch = lambdactl(settings, "batch", "--views", "page_views")
    assert batch.returncode == 0, batch.stderr[-3000:]
    settle = {"LAMBDA_BATCH__CLEANUP_SETTLE_S": str(settings.api.pointer_cache_s + 5)}
    clean = lambdactl(settings, "clean-realtime", extra_env=settle)
    assert clean.returncode == 0, clean.stderr[-3000:]
    assert "page_views" not in read_overlays(settings)


def by_country_device(settings) -> httpx.Response:
    now = int(time.time()) // 3_600 * 3_600
    iso = lambda s: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(s))  # noqa: E731
    return httpx.get(
        f"{api(settings)}/api/v1/views/{VIEW}",
        params={
            "country": "DE",
            "device": "mobile",
            "granularity": "hour",
            "start": iso(now - 7_200),
            "end": iso(now + 3_600),
        },
        timeout=30,
    )


VIEW = "page_views_by_country_device"


def mark_left_by_a_killed_replay(settings, view: str, from_ms: int, started_ms: int) -> None:
    """The claim a replay killed half-way leaves: made by a process that has ended since (one made
    by this test's process would name a holder still running)."""
    code = (
        "import sys; from definitions.settings import get_settings; from stores.replays import mark, shadow_name; "
        "view, from_ms, started_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]); "
        "mark(get_settings(), view, from_ms, started_ms, shadow=shadow_name(view, started_ms))"
    )
    made = subprocess.run(
        [sys.executable, "-c", code, view, str(from_ms), str(started_ms)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env(settings),
    )
    assert made.returncode == 0, made.stderr[-3000:]


def test_a_second_replay_is_refused_and_an_interrupted_one_is_taken_over(settings, stack):
    from_ms = served_cutoff_ms(settings, VIEW)
    started_ms = int(time.time() * 1000)
    mark_left_by_a_killed_replay(settings, VIEW, from_ms, started_ms)
    try:
        refresh_api(settings)
        answer = by_country_device(settings)
        assert answer.status_code == 200, f"a view being replayed answers from the rows it has: {answer.text}"
        views = {v["name"]: v for v in httpx.get(f"{api(settings)}/api/v1/views", timeout=30).json()["views"]}
        assert views[VIEW]["state"] == "replaying" and "replay" in views[VIEW]["reason"], views[VIEW]

        again = lambdactl(settings, "replay", "--view", VIEW)
        assert again.returncode == 2 and "holds its mark" in again.stderr, again.stderr[-2000:]

        resumed = lambdactl(settings, "replay", "--view", VIEW, "--resume", "--json")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert json.loads(resumed.stdout.strip().splitlines()[-1])["from_ms"] <= from_ms
        assert VIEW not in read_marks(settings)
        answer = by_country_device(settings)
        assert answer.status_code == 200, answer.text
    finally:
        unmark(settings, VIEW)
        refresh_api(settings)


def test_an_interrupted_replay_is_cancelled_its_rows_deleted_and_the_view_answers_as_before(settings, stack):
    from stores.realtime import RealtimeRow, RealtimeWriter

    started_ms = int(time.time() * 1000)  # with rows written
    shadow = shadow_name(VIEW, started_ms)
    mark_left_by_a_killed_replay(settings, VIEW, served_cutoff_ms(settings, VIEW), started_ms)
    try:
        writer = RealtimeWriter(settings)
        try:
            bucket = started_ms // 1000 // 60 * 60
            key = '["US","mobile"]'
            writer.write(
                [
                    RealtimeRow(shadow, "hour", key, bucket // 3600 * 3600, bucket, 1),
                    RealtimeRow(shadow, "day", key, bucket // 86400 * 86400, bucket, 3),
                ],
                [],
            )
        finally:
            writer.close()
        assert rows_named(settings, shadow) == 2
        refresh_api(settings)
        before = by_country_device(settings)
        assert before.status_code == 200, before.text

        cancelled = lambdactl(settings, "replay", "--view", VIEW, "--cancel", "--json")
        assert cancelled.returncode == 0, cancelled.stderr[-3000:]
        assert json.loads(cancelled.stdout.strip().splitlines()[-1]) == {
            "view": VIEW,
            "shadow": shadow,
            "rows_deleted": 2,
            "switched": False,
        }
        assert VIEW not in read_marks(settings)
        assert rows_named(settings, shadow) == 0
        views = {v["name"]: v for v in httpx.get(f"{api(settings)}/api/v1/views", timeout=30).json()["views"]}
        assert views[VIEW]["state"] == "serving", views[VIEW]
        after = by_country_device(settings)
        assert after.status_code == 200, after.text

        again = lambdactl(settings, "replay", "--view", VIEW, "--cancel")
        assert again.returncode == 2 and "no replay holds" in again.stderr, again.stderr[-2000:]
    finally:
        unmark(settings, VIEW)
        refresh_api(settings)


def test_a_mark_file_that_is_no_mark_is_refused_by_name_until_resume_and_harms_no_other_view(settings, stack):
    from stores.replays import marks_dir
    from stores.webhdfs import WebHdfs

    directory = marks_dir(settings)
    hostile = {  # a time past the year 9999 (once a 500 on every query of the view), and foreign names
        f"{VIEW}.json": b'{"from_ms": 253402300800000, "started_ms": 1, "shadow": "x"}',
        "notes.txt": b"not a mark",
        "x.switched-abc.json": b"[1]",
    }
    with WebHdfs(settings) as fs:
        fs.mkdirs(directory)
        for name, data in hostile.items():
            fs.write(f"{directory}/{name}", data, overwrite=True)
        fs.mkdirs(f"{directory}/folder.json")  # a directory under a mark's name: read as no mark, not retried
    try:
        refresh_api(settings)
        answer = by_country_device(settings)
        assert answer.status_code == 409, answer.text
        assert f"{VIEW}.json" in answer.json()["detail"] and "--resume" in answer.json()["detail"], answer.text
        assert "Traceback" not in answer.text
        for path in ("/api/v1/views", "/api/v1/status"):
            assert httpx.get(f"{api(settings)}{path}", timeout=30).status_code == 200, path
        views = {v["name"]: v for v in httpx.get(f"{api(settings)}/api/v1/views", timeout=30).json()["views"]}
        assert views["page_views"]["state"] == "serving", views["page_views"]

        plain = lambdactl(settings, "replay", "--view", VIEW)
        assert plain.returncode == 2 and "not one" in plain.stderr and "--resume" in plain.stderr, plain.stderr[-2000:]
        resumed = lambdactl(settings, "replay", "--view", VIEW, "--resume", "--json")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert VIEW not in read_marks(settings)
        answer = by_country_device(settings)
        assert answer.status_code == 200, answer.text
    finally:
        with WebHdfs(settings) as fs:
            for name in [*hostile, "folder.json"]:
                fs.delete(f"{directory}/{name}", recursive=True)
        refresh_api(settings)


def test_replay_refuses_what_it_cannot_do_exactly(settings, stack):
    unknown = lambdactl(settings, "replay", "--view", "no_such_view")
    assert unknown.returncode == 2 and "unknown view 'no_such_view'" in unknown.stderr, unknown.stderr[-2000:]
    future = lambdactl(settings, "replay", "--view", "page_views", "--from", "2999-01-01T00:00:00Z")
    assert future.returncode == 2 and "in the future" in future.stderr, future.stderr[-2000:]
    # --resume with no claim to take over started a fresh replay, overwriting any claim made meanwhile.
    nothing = lambdactl(settings, "replay", "--view", "page_views", "--resume")
    assert nothing.returncode == 2 and "nothing to resume" in nothing.stderr, nothing.stderr[-2000:]
    # A shell naming another topic: the replay read nothing and switched the view to no rows.
    elsewhere = lambdactl(
        settings, "replay", "--view", "page_views", extra_env={"LAMBDA_KAFKA__EVENTS_TOPIC": "events-elsewhere"}
    )
    assert elsewhere.returncode == 2, elsewhere.stderr[-2000:]
    assert "topic events-elsewhere has no partitions" in elsewhere.stderr, elsewhere.stderr[-2000:]
    assert read_marks(settings) == {}, "a refused replay marks nothing"


def test_a_replay_that_fails_after_its_claim_leaves_a_claim_another_took_over_since(settings, stack, monkeypatch):
    """It deleted whatever claim was there: one a `--resume` in another shell had taken over since,
    which was then refused at its switch after all its work."""
    import argparse

    from lambdactl.replay import cmd_replay
    from stores import checkpoints

    real = checkpoints.read_marker
    taken: list[int] = []

    def marker_then_taken_over(s):
        held = read_marks(s).get(VIEW)
        if held is None or taken:
            return real(s)
        other = held.started_ms + 1  # a `--resume` in another shell takes the claim over, then HDFS fails here
        mark(s, VIEW, held.from_ms, other, take_over=True, shadow=shadow_name(VIEW, other))
        taken.append(other)
        raise OSError("HDFS went away")

    monkeypatch.setattr(checkpoints, "read_marker", marker_then_taken_over)
    args = argparse.Namespace(view=VIEW, from_=None, resume=False, cancel=False, json=False)
    try:
        assert cmd_replay(settings, args) == 1
        assert taken, "the failure came after the claim"
        assert read_marks(settings)[VIEW].started_ms == taken[0], "the other replay's claim stays"
    finally:
        unmark(settings, VIEW)
        refresh_api(settings)


def no_spark(monkeypatch) -> None:
    """The replay's Spark session, stood aside: in this process it would be the tests' shared one, and
    the replay stops its session when done."""
    import definitions.spark

    monkeypatch.setattr(
        definitions.spark, "spark_session", lambda *args, **kwargs: type("S", (), {"stop": lambda self: None})()
    )


def test_a_replay_whose_speed_layer_was_reset_meanwhile_does_not_switch(settings, stack, monkeypatch):
    """`lambdactl reset-speed` beside a replay: the replay switched to rows beside tables the fresh
    speed layer was about to empty, and `up` then refused the fresh start for a replay recorded."""
    import argparse
    from dataclasses import replace

    import speed_layer.replay as replay_job
    from lambdactl.replay import cmd_replay
    from stores import checkpoints

    real_marker = checkpoints.read_marker
    reset = []

    def rewrite_then_reset(*args, **kwargs):
        reset.append(True)  # the speed layer is reset and started afresh while the replay writes
        return None  # its rows are not read: the replay must not switch to them

    no_spark(monkeypatch)

    def marker(s):
        found = real_marker(s)
        return replace(found, started_ms=(found.started_ms or 0) + 1) if reset and found is not None else found

    monkeypatch.setattr(replay_job, "rewrite", rewrite_then_reset)
    monkeypatch.setattr(checkpoints, "read_marker", marker)
    before = read_overlays(settings).get(VIEW)
    args = argparse.Namespace(view=VIEW, from_=None, resume=False, cancel=False, json=False)
    try:
        assert cmd_replay(settings, args) == 2
        assert reset, "the replay wrote its rows"
        assert VIEW not in read_marks(settings), "its claim is released"
        assert read_overlays(settings).get(VIEW) == before, "nothing switched"
    finally:
        unmark(settings, VIEW)
        refresh_api(settings)


def test_a_reset_under_way_when_the_replay_would_switch_is_waited_for_and_stops_the_switch(
    settings, stack, monkeypatch
):
    """The replay judged the marker, then switched: a `lambdactl reset-speed` (which removes the
    checkpoint and marker holding the stack lock) between the two told the operator the replay
    "refuses to switch", and it switched. The replay now judges and switches holding that lock."""
    import argparse
    import threading
    from dataclasses import replace

    import lambdactl.replay as replay_cmd
    import speed_layer.replay as replay_job
    from infra.state_lock import stack_lock
    from lambdactl.replay import cmd_replay
    from stores import checkpoints

    real_marker = checkpoints.read_marker
    reset_done = threading.Event()
    waiting = threading.Event()  # the replay said it waits for the lock
    holding = threading.Event()

    def reset_beside():  # as reset-speed: the marker goes while the stack lock is held
        with stack_lock(settings.state_dir):
            holding.set()
            waiting.wait(120)
            reset_done.set()

    resetter = threading.Thread(target=reset_beside, daemon=True)

    def rewrite_while_a_reset_begins(*args, **kwargs):
        resetter.start()
        assert holding.wait(60), "the reset took the stack lock"
        return None

    def marker(s):
        found = real_marker(s)
        return replace(found, started_ms=(found.started_ms or 0) + 1) if reset_done.is_set() and found else found

    said = []

    def say(message: str) -> None:
        said.append(message)
        if "waiting for another" in message:
            waiting.set()

    no_spark(monkeypatch)
    monkeypatch.setattr(replay_job, "rewrite", rewrite_while_a_reset_begins)
    monkeypatch.setattr(checkpoints, "read_marker", marker)
    monkeypatch.setattr(replay_cmd, "_say", say)
    before = read_overlays(settings).get(VIEW)
    args = argparse.Namespace(view=VIEW, from_=None, resume=False, cancel=False, json=False)
    try:
        code = cmd_replay(settings, args)
        waiting.set()
        resetter.join(60)
        assert read_overlays(settings).get(VIEW) == before, f"switched beside the reset: {said}"
        assert code == 2 and VIEW not in read_marks(settings), "its claim is released"
    finally:
        waiting.set()
        unmark(settings, VIEW)
        switched = read_overlays(settings).get(VIEW)
        if switched is not None and switched != before:  # to rows never written: the other tests' answers
            from stores.replays import _overlay_path
            from stores.webhdfs import WebHdfs

            with WebHdfs(settings) as fs:
                fs.delete(_overlay_path(settings, VIEW, switched.started_ms))
        refresh_api(settings)


def test_a_replay_taken_over_while_it_waited_stops_before_reading_kafka(settings, stack, monkeypatch):
    """Two `--resume` at once both claimed (the later write wins the file): the other did all its
    Kafka reading and writing and learnt it only at its switch."""
    import argparse

    import speed_layer.replay as replay_job
    from lambdactl import replay as replay_cli
    from lambdactl.replay import cmd_replay

    taken: list[int] = []
    real_wait = replay_cli._wait_for_split

    def wait_then_taken_over(s, *args, **kwargs):
        spans = real_wait(s, *args, **kwargs)
        if not taken:
            held = read_marks(s)[VIEW]
            other = held.started_ms + 1
            mark(s, VIEW, held.from_ms, other, take_over=True, shadow=shadow_name(VIEW, other))
            taken.append(other)
        return spans

    def no_rewrite(*args, **kwargs):
        raise AssertionError("Kafka was read by a replay whose claim another took over")

    monkeypatch.setattr(replay_cli, "_wait_for_split", wait_then_taken_over)
    monkeypatch.setattr(replay_job, "rewrite", no_rewrite)
    no_spark(monkeypatch)
    args = argparse.Namespace(view=VIEW, from_=None, resume=False, cancel=False, json=False)
    try:
        assert cmd_replay(settings, args) == 2
        assert taken and read_marks(settings)[VIEW].started_ms == taken[0], "the other's claim stays"
    finally:
        unmark(settings, VIEW)
        refresh_api(settings)
