"""Several API worker processes (api.workers > 1): a views reload answered by one is served by every
one when it is answered; a worker that cannot follow is named; a worker that ended is not waited for.
Two apps in one process stand for two workers (each has its own file in the shared directory)."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest

from api import worker_sync
from api.routes import admin
from api.worker_sync import WorkerSync, prepare
from definitions.settings_store import load, persist_view_modules, with_view_modules
from serving_layer.service import StoreUnavailable
from tests.support.tripwire_api import assert_error_shape, make_client, token

RELOAD = "/api/v1/admin/views/reload"
CLICKS = "/api/v1/views/clicks?url=/&granularity=hour"


@pytest.fixture
def declared(module):
    """Persisted settings that are about to declare one more view, `clicks` (the `module` fixture)."""
    folder, name = module
    settings = load()
    return settings, lambda: persist_view_modules(with_view_modules(settings, [name], [str(folder)]))


@pytest.fixture
def directory(tmp_path):
    path = tmp_path / "workers"
    prepare(path)
    return path


@pytest.fixture
def marks_readable(monkeypatch):
    """The speed marker (none yet) and the replay marks (none) read without HDFS."""
    from stores import checkpoints, replays

    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: None)
    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {}))


def tripwires_fail_as_a_store(*clients) -> None:
    for client in clients:
        client.app.state.serving.failure = StoreUnavailable("hbase", "down for the test")


def test_a_reload_answered_by_one_worker_is_served_by_the_other_when_answered(declared, directory):
    settings, declare = declared
    auth = {"Authorization": f"Bearer {token(settings)}"}
    for first in make_client(settings, WorkerSync(directory)):
        for second in make_client(settings, WorkerSync(directory)):
            tripwires_fail_as_a_store(first, second)
            assert second.get(CLICKS).status_code == 404
            declare()
            done = first.post(RELOAD, headers=auth)
            assert done.status_code == 200, done.text
            assert done.json()["added"] == ["clicks"]
            # No waiting here: the answer came once the second worker served the view too (the
            # query reaches its serving layer, a tripwire answering as an unreadable store).
            assert second.get(CLICKS).status_code == 503
            assert "/api/v1/views/clicks" in second.get("/openapi.json").json()["paths"]
            # And the other way round, with nothing declared any more.
            persist_view_modules(with_view_modules(settings, [], []))
            assert second.post(RELOAD, headers=auth).json()["removed"] == ["clicks"]
            assert first.get(CLICKS).status_code == 404


def test_a_worker_that_cannot_read_the_views_is_named_in_a_409(declared, directory, monkeypatch):
    settings, declare = declared
    auth = {"Authorization": f"Bearer {token(settings)}"}
    for first in make_client(settings, WorkerSync(directory)):
        for second in make_client(settings, WorkerSync(directory)):
            tripwires_fail_as_a_store(first, second)

            def broken(app, settings):
                raise ImportError("a module the second worker cannot import")

            # The workers that follow a reload call api.app's reload_views; the route calls its own.
            monkeypatch.setattr("api.app.reload_views", broken)
            declare()
            refused = assert_error_shape(first.post(RELOAD, headers=auth), settings, 409)
            assert "did not switch to the declared views" in refused["detail"]
            assert "cannot import" in refused["detail"]


def test_a_worker_that_does_not_follow_in_time_makes_a_503_that_says_so(declared, directory, monkeypatch):
    settings, declare = declared
    auth = {"Authorization": f"Bearer {token(settings)}"}
    stuck = WorkerSync(directory)  # a live worker (this process) that never looks at the count
    monkeypatch.setattr(admin, "WORKERS_RELOAD_S", 0.3)
    for first in make_client(settings, WorkerSync(directory)):
        tripwires_fail_as_a_store(first)
        declare()
        resp = first.post(RELOAD, headers=auth)
        body = assert_error_shape(resp, settings, 503)
        assert "1 API worker process(es) did not switch to the declared views" in body["detail"]
        assert resp.headers["Retry-After"] == "5"
        stuck.close()
        assert first.post(RELOAD, headers=auth).status_code == 200


def test_the_file_of_a_worker_whose_process_ended_is_removed_and_not_waited_for(directory):
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = directory / f"{worker_sync.WORKER_PREFIX}{int(ended.stdout)}-0000"
    dead.write_text('{"generation": 0, "error": null}')
    live = WorkerSync(directory)
    generation = live.bump()
    assert live.pending(generation) == {}
    assert not dead.exists()


def test_a_worker_started_while_a_reload_is_made_reads_the_views_again():
    """The count is read before the views are: a reload counted after that is followed, even if the
    worker's start-up read the views before the reload was made."""

    async def scenario(path):
        prepare(path)
        starting = WorkerSync(path)  # read the count (0), then "reads the views"
        reloads = []
        async with anyio.create_task_group() as tasks:
            other = WorkerSync(path)
            generation = other.bump()  # another worker reloads meanwhile
            tasks.start_soon(starting.follow, lambda: reloads.append(1), lambda: reloads.append(0))
            assert await other.wait_for(generation, 5) == {}
            tasks.cancel_scope.cancel()
        return reloads

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as scratch:
        assert anyio.run(scenario, Path(scratch)) == [1]


REFRESH = "/api/v1/admin/views/refresh"


def test_a_refresh_answered_by_one_worker_is_made_by_the_other_without_reading_the_view_modules(
    declared, directory, monkeypatch, marks_readable
):
    settings, declare = declared
    auth = {"Authorization": f"Bearer {token(settings)}"}
    for first in make_client(settings, WorkerSync(directory)):
        for second in make_client(settings, WorkerSync(directory)):
            tripwires_fail_as_a_store(first, second)
            reread: list[list[str]] = []
            monkeypatch.setattr(
                second.app.state.serving, "reload", lambda declared, seen=reread: seen.append(declared.names())
            )
            declare()
            done = first.post(REFRESH, headers=auth)
            assert done.status_code == 200, done.text
            assert reread == [done.json()["views"]], "the other worker read the stores again before the answer"
            assert second.get(CLICKS).status_code == 404, "and did not serve the view only declared"


def test_a_worker_behind_a_reload_and_a_refresh_reads_the_views_again():
    """A refresh counted after a reload the worker has not followed yet does not hide the reload."""

    async def scenario(path):
        prepare(path)
        behind = WorkerSync(path)
        made: list[str] = []
        async with anyio.create_task_group() as tasks:
            other = WorkerSync(path)
            other.bump()  # a views reload
            generation = other.bump(views=False)  # then a refresh, before the first worker looked
            tasks.start_soon(behind.follow, lambda: made.append("reload"), lambda: made.append("refresh"))
            assert await other.wait_for(generation, 5) == {}
            generation = other.bump(views=False)
            assert await other.wait_for(generation, 5) == {}
            tasks.cancel_scope.cancel()
        return made

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as scratch:
        assert anyio.run(scenario, Path(scratch)) == ["reload", "refresh"]


def test_a_worker_asked_to_refresh_before_it_followed_a_reload_makes_the_reload(declared, directory, marks_readable):
    """A refresh answered by a worker that has not yet followed a reload counted just before (its
    loop looks every 0.2 s, a reload takes seconds) makes that reload: counting the refresh must not
    hide it, or `views apply` would be answered while this worker keeps the old routes."""
    settings, declare = declared
    auth = {"Authorization": f"Bearer {token(settings)}"}
    for behind in make_client(settings, WorkerSync(directory)):
        tripwires_fail_as_a_store(behind)
        elsewhere = WorkerSync(directory)  # another worker, which reloaded (its views are read)
        declare()
        elsewhere.bump()
        elsewhere.close()
        done = behind.post(REFRESH, headers=auth)
        assert done.status_code == 200, done.text
        assert "clicks" in done.json()["views"]
        assert behind.get(CLICKS).status_code == 503, "the declared view is routed (its store is down here)"


def test_a_worker_that_cannot_read_the_replay_marks_is_named_without_internals(declared, directory, monkeypatch):
    settings, _ = declared
    auth = {"Authorization": f"Bearer {token(settings)}"}
    from stores import checkpoints, replays

    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: None)
    for first in make_client(settings, WorkerSync(directory)):
        for second in make_client(settings, WorkerSync(directory)):
            tripwires_fail_as_a_store(first, second)
            cut_off = settings.model_copy()  # the settings the second worker reads HDFS with
            second.app.state.serving.speed.settings = cut_off

            def second_fails(asked, cut_off=cut_off):
                if asked is cut_off:  # the answering worker reads them; the other cannot
                    raise ConnectionError("HTTPConnectionPool(host='namenode.internal', port=9870)")
                return {}, {}

            monkeypatch.setattr(replays, "read_replays", second_fails)
            refused = assert_error_shape(first.post(REFRESH, headers=auth), settings, 409)
            assert "replay marks" in refused["detail"] and "namenode.internal" not in refused["detail"]


def test_a_refresh_counted_while_a_reload_is_not_followed_yet_is_not_reported_as_served():
    """Worker W is asked to refresh, finds no reload due, reads the stores; meanwhile worker X counts a
    reload. W's refresh is counted after it: W must not report that count (it has not read the
    views X's reload asks for), so X's reload waits for W, and W's loop makes the reload."""

    async def scenario(path):
        prepare(path)
        w, x = WorkerSync(path), WorkerSync(path)
        assert w.reload_due() is None
        reload_count = x.bump()  # X reloads meanwhile
        refresh_count = w.bump(views=False)
        assert refresh_count == reload_count + 1
        assert set(x.pending(reload_count)) == {w.file.name.removeprefix(worker_sync.WORKER_PREFIX)}
        x.close()  # X's own following of W's refresh is not what this test is about
        made: list[str] = []
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(w.follow, lambda: made.append("reload"), lambda: made.append("refresh"))
            assert await w.wait_for(refresh_count, 5) == {}
            tasks.cancel_scope.cancel()
        return made

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as scratch:
        assert anyio.run(scenario, Path(scratch)) == ["reload"]


def test_a_worker_that_failed_to_follow_tries_again_without_being_asked(monkeypatch):
    """A worker whose reload or refresh failed (a store down a moment, a module file being written)
    says why, keeps serving what it served, and tries again after a pause, doubled while it keeps
    failing: the workers do not stay split until the next reload is asked for."""
    monkeypatch.setattr(worker_sync, "RETRY_FIRST_S", 0.05)

    async def scenario(path):
        prepare(path)
        follower, other = WorkerSync(path), WorkerSync(path)
        made: list[str] = []

        def reload():
            made.append("reload")
            if len(made) < 3:
                raise ConnectionError("down for a moment")

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(follower.follow, reload, lambda: made.append("refresh"))
            generation = other.bump()
            failed = await other.wait_for(generation, 5)
            assert list(failed.values()) == ["it could not read them (ConnectionError: down for a moment)"]
            assert follower.served < generation, "a failed reload is not reported as served"
            with anyio.fail_after(5):
                while other.pending(generation):
                    await anyio.sleep(0.01)
            tasks.cancel_scope.cancel()
        return made

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as scratch:
        assert anyio.run(scenario, Path(scratch)) == ["reload", "reload", "reload"]


def test_an_error_of_an_earlier_count_does_not_fail_a_later_reload_at_once(tmp_path):
    """A worker that failed to follow count 1 (and waits to try again) is not yet a failure for count
    2: the waiter of 2 waits for it, and it follows 2 (here: at once)."""
    prepare(tmp_path)
    behind, asking = WorkerSync(tmp_path), WorkerSync(tmp_path)
    first = asking.bump()
    behind.report(first, "ConnectionError: down for a moment")
    assert asking.pending(first) == {
        behind.file.name.removeprefix(worker_sync.WORKER_PREFIX): (
            "it could not read them (ConnectionError: down for a moment)"
        )
    }
    second = asking.bump()
    assert list(asking.pending(second).values()) == ["it has not read them yet"]
    behind.report(second)
    assert asking.pending(second) == {}


def test_a_follow_that_ends_after_the_workers_own_reload_reports_the_count_it_serves(tmp_path):
    """The loop follows count 1 while the worker's own route reloads and counts 2: when the loop's
    reload ends (well or not), the worker still reports 2, which it serves, and nothing failed at 2."""
    prepare(tmp_path)
    worker, other = WorkerSync(tmp_path), WorkerSync(tmp_path)
    first = other.bump()  # counted by another worker; this one's loop starts following it
    other.close()
    second = worker.bump()  # this worker's own reload, done meanwhile
    worker.report(first)  # the loop's reload of count 1 ends
    assert worker.pending(second) == {}
    worker.report(first, "ImportError: a module being written")  # or it failed
    assert worker.pending(second) == {}


def test_a_worker_whose_state_directory_fails_a_moment_keeps_following(monkeypatch):
    """An OSError reading the count or writing the worker's file (a full disk, EIO) ended the follow
    task for good, unlogged: that worker never followed another reload, and every reload answered
    by the other waited 30 s for it and answered 503."""
    monkeypatch.setattr(worker_sync, "RETRY_FIRST_S", 0.05)

    async def scenario(path):
        prepare(path)
        follower, other = WorkerSync(path), WorkerSync(path)
        made: list[str] = []
        writes = {"failing": 2}
        real_report = WorkerSync.report

        def report(self, generation, error=None):
            if self is follower and writes["failing"] > 0:
                writes["failing"] -= 1
                raise OSError(28, "No space left on device")
            real_report(self, generation, error)

        monkeypatch.setattr(WorkerSync, "report", report)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(follower.follow, lambda: made.append("reload"), lambda: made.append("refresh"))
            generation = other.bump()
            with anyio.fail_after(5):
                while other.pending(generation):
                    await anyio.sleep(0.01)
            assert writes["failing"] == 0 and follower.served == generation
            later = other.bump()
            with anyio.fail_after(5):
                while other.pending(later):
                    await anyio.sleep(0.01)
            tasks.cancel_scope.cancel()
        return made

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as scratch:
        made = anyio.run(scenario, Path(scratch))
    assert made[-1] == "reload" and len(made) >= 2


def test_a_reload_counted_after_another_reads_the_views_again_after_its_count(declared, directory, monkeypatch):
    """A worker read the views, then counted: another worker's reload of newer views, counted in
    between, was answered as served by every worker while this one served the older views under a
    higher count. A reload that finds another counted meanwhile reads the views again, after it."""
    settings, declare = declared
    auth = {"Authorization": f"Bearer {token(settings)}"}
    real_reload = admin.reload
    other = WorkerSync(directory)
    reads: list[int] = []
    other_counted: list[int] = []
    for first in make_client(settings, WorkerSync(directory)):
        sync = first.app.state.worker_sync

        def reload(app, settings, sync=sync):
            reads.append(sync.generation())  # the count as the views are read
            if not other_counted:
                other_counted.append(other.bump())  # another worker's reload, counted while this one reads
                other.close()
            return real_reload(app, settings)

        monkeypatch.setattr(admin, "reload", reload)
        tripwires_fail_as_a_store(first)
        declare()
        assert first.post(RELOAD, headers=auth).status_code == 200
        assert reads == [0, 2], "read again once its own count (2) was past the other's (1)"
        assert sync.served == 2
        reads.clear()
        assert first.post(RELOAD, headers=auth).status_code == 200
        assert reads == [2], "nothing counted meanwhile: read once"


def test_a_worker_that_failed_to_follow_says_so_again_after_its_directory_failed_a_moment(tmp_path):
    """The write made again after a failed one said the worker serves its count, erasing the error
    it had recorded: a waiter then waited out its 30 s instead of naming the failure."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch)
        prepare(path)
        worker, other = WorkerSync(path), WorkerSync(path)
        generation = other.bump()
        worker.report(generation, "ImportError: a module it cannot import")
        assert worker.last_report == (generation, "ImportError: a module it cannot import")
        worker.report(*worker.last_report)  # what the follow loop writes again after a stall
        assert list(other.pending(generation).values()) == [
            "it could not read them (ImportError: a module it cannot import)"
        ]
