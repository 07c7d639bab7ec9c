"""`lambdactl views apply` refuses clearly, before changing anything it cannot finish: modules that
do not import, and a speed layer this stack does not run. No service is needed."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from definitions.settings import Settings
from infra.errors import StackError
from infra.stack import Stack
from lambdactl.cli import main
from tests.support.shell import plain_shell


def test_a_process_the_stack_does_not_supervise_cannot_be_restarted_and_the_error_says_which(tmp_path):
    settings = Settings(state_dir=tmp_path / "state", stack={"managed_services": ["kafka"]})
    with pytest.raises(StackError, match=r"speed-layer.*not a supervised process"):
        Stack(settings).restart("speed-layer")


def test_apply_of_a_module_that_does_not_import_exits_2_naming_it(tmp_path, monkeypatch, caplog):
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setenv("LAMBDA_ENVIRONMENT", "development")
    assert main(["views", "apply", "--modules", "no_such_views_module_xyz"]) == 2
    assert "no_such_views_module_xyz" in caplog.text
    persisted = tmp_path / "state" / "settings.json"
    assert not persisted.exists() or "no_such_views_module_xyz" not in persisted.read_text(), "nothing was written"


def test_apply_refuses_relative_view_paths(tmp_path, monkeypatch, caplog):
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setenv("LAMBDA_ENVIRONMENT", "development")
    assert main(["views", "apply", "--modules", "x", "--paths", "relative/dir"]) == 2
    assert "relative/dir" in caplog.text


def test_apply_refuses_paths_without_modules(tmp_path, monkeypatch, caplog):
    """--paths alone was dropped without a word: the views were applied from the old paths."""
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setenv("LAMBDA_ENVIRONMENT", "development")
    assert main(["views", "apply", "--paths", str(tmp_path)]) == 2
    assert "--paths is given with --modules or --no-modules only" in caplog.text
    assert main(["views", "apply", "--no-paths"]) == 2
    assert "--no-paths is given with --modules or --no-modules only" in caplog.text


@pytest.mark.parametrize("paths", ["", " ", ","])
def test_apply_refuses_paths_naming_no_directory(paths, tmp_path, monkeypatch, caplog):
    """`--paths "$P"` with P unset cleared the persisted views.paths: the modules were then looked up
    among the installed packages, where another version of one may be."""
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setenv("LAMBDA_ENVIRONMENT", "development")
    assert main(["views", "apply", "--modules", "x", "--paths", paths]) == 2
    assert "--paths names no directory" in caplog.text and "--no-paths" in caplog.text
    assert not (tmp_path / "state" / "settings.json").exists(), "nothing was written"


def test_no_paths_searches_no_directory_and_takes_no_paths(tmp_path, monkeypatch, caplog):
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setenv("LAMBDA_ENVIRONMENT", "development")
    assert main(["views", "apply", "--modules", "no_such_views_module_xyz", "--no-paths"]) == 2
    assert "no_such_views_module_xyz" in caplog.text  # looked up (and not found) without a directory
    with pytest.raises(SystemExit):
        main(["views", "apply", "--modules", "x", "--no-paths", "--paths", str(tmp_path)])


@pytest.mark.parametrize("timeout", ["nan", "inf", "-1", "0"])
def test_apply_refuses_a_timeout_that_never_runs_out(timeout, tmp_path, monkeypatch, capsys):
    """`--timeout nan` made every deadline check false: a stuck speed layer kept apply waiting, and
    holding the views lock, for ever."""
    plain_shell(monkeypatch, tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["views", "apply", "--timeout", timeout])
    assert exit_.value.code == 2
    assert "--timeout" in capsys.readouterr().err
    assert not (tmp_path / "state" / "settings.json").exists(), "nothing was written"


class _MovingStore:
    """A pointer store another writer moves `moves` times between a read and the swap."""

    def __init__(self, moves: int):
        self.value, self.moves, self.swaps = 0, moves, 0

    def pointer(self):
        return self.value

    def swap(self, current, new):
        from stores.pointer import PointerMoved

        if self.moves:
            self.moves -= 1
            self.value += 100  # another writer's swap
            raise PointerMoved("moved")
        assert current == self.value
        self.value, self.swaps = new, self.swaps + 1


def test_a_pointer_change_is_made_again_on_the_pointer_a_batch_moved_meanwhile():
    from lambdactl.batch import move_pointer

    store = _MovingStore(moves=2)
    assert move_pointer(store, lambda p: p + 1) == 201
    assert (store.value, store.swaps) == (201, 1), "applied once, to the newest pointer"
    assert move_pointer(store, lambda p: None) is None and store.swaps == 1, "nothing to do writes nothing"


def test_a_pointer_that_keeps_moving_stops_the_command_naming_what_to_do():
    from lambdactl.batch import move_pointer

    with pytest.raises(SystemExit, match="pointer kept moving: run the clean-up again"):
        move_pointer(_MovingStore(moves=99), lambda p: p + 1, "run the clean-up again")


def test_an_api_that_takes_the_request_and_never_answers_stops_the_apply(monkeypatch):
    """A view module whose reload hangs inside the API: the apply took the timeout for an API not
    running and went on to switch and retire, the API never having served the new views."""
    import socket

    from lambdactl import views

    with socket.socket() as stuck:  # connections are accepted by the kernel; nothing ever answers
        stuck.bind(("127.0.0.1", 0))
        stuck.listen(8)
        port = stuck.getsockname()[1]
        settings = Settings(api={"port": port})
        monkeypatch.setattr(views, "API_ANSWER_S", 0.5)
        with pytest.raises(SystemExit, match="did not answer within 0.5s .*restart it"):
            views._ask_api(settings, "reload", "serve the declared views")
        assert views._ask_api(settings, "refresh", "read the replay marks again", refused_is_fatal=False) is None
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        closed = free.getsockname()[1]
    assert views._ask_api(Settings(api={"port": closed}), "reload", "serve the declared views") is None, "not running"


@pytest.mark.parametrize("modules", ["", " ", ",", " , "])
def test_an_empty_modules_list_is_refused_and_no_modules_says_it(tmp_path, monkeypatch, caplog, modules):
    """`--modules "$VIEWS"` with the variable unset retired every view a module declared (their
    realtime rows deleted; their history only a batch run brings back): retiring them all takes
    --no-modules."""
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setenv("LAMBDA_ENVIRONMENT", "development")
    assert main(["views", "apply", "--modules", modules]) == 2
    assert "--modules names no module" in caplog.text and "--no-modules" in caplog.text
    assert not (tmp_path / "state" / "settings.json").exists(), "nothing was written"


def test_no_modules_and_modules_together_are_refused(tmp_path, monkeypatch):
    plain_shell(monkeypatch, tmp_path)
    with pytest.raises(SystemExit) as refused:
        main(["views", "apply", "--modules", "x", "--no-modules"])
    assert refused.value.code == 2


@pytest.mark.parametrize(
    "body, error",
    [("VIEWS = [\n", "SyntaxError"), ("VIEWS = [undefined_name]\n", "NameError"), ("1 / 0\n", "ZeroDivisionError")],
)
def test_apply_of_a_module_that_fails_as_it_loads_exits_2_naming_why(tmp_path, monkeypatch, caplog, body, error):
    """Only ImportError and ValueError were refusals: a module with a syntax error (or any error at
    import) came out as '`views` failed … (is the stack up?)', exit 1."""
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setenv("LAMBDA_ENVIRONMENT", "development")
    folder = tmp_path / "views"
    folder.mkdir()
    (folder / "broken_views_mod.py").write_text(body)
    assert main(["views", "apply", "--modules", "broken_views_mod", "--paths", str(folder)]) == 2
    assert "the declared views cannot be loaded" in caplog.text and error in caplog.text
    assert "is the stack up" not in caplog.text
    persisted = tmp_path / "state" / "settings.json"
    assert not persisted.exists() or "broken_views_mod" not in persisted.read_text(), "nothing was written"


def test_apply_after_a_reset_of_the_speed_layer_waits_for_its_fresh_start(tmp_path, monkeypatch, caplog):
    """Between `lambdactl reset-speed` and the next `up` no marker records what the speed layer
    maintains: an applied view was set "serving" since time 0 with no history and answered from no
    rows as exact, until a fresh start that nothing checked."""

    from stores import checkpoints, registry
    from stores.pointer import Pointer, ViewEntry

    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setenv("LAMBDA_ENVIRONMENT", "development")
    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: None)
    served = Pointer(entries={"page_views": ViewEntry("page_views_v3", 3, 1_000)})
    monkeypatch.setattr(registry, "version_store", lambda _settings: SimpleNamespace(pointer=lambda: served))
    from lambdactl import views

    monkeypatch.setattr(views, "_speed_layer_maintains", lambda *_: pytest.fail("went on to apply"))
    assert main(["views", "apply"]) == 2
    assert "reset" in caplog.text and "lambdactl up" in caplog.text


def test_a_build_overtaken_by_a_batch_beside_it_plans_again_and_a_failed_verification_says_so(monkeypatch):
    """A DAG run that swapped a newer cutoff while the view's build ran made the build's cutoff
    behind what serves: the apply stopped with "is the stack up?"; and so did a failed verification."""

    from batch_layer import job
    from lambdactl import views
    from stores import checkpoints, registry
    from stores.batch_writer import VerificationError
    from stores.pointer import Overtaken

    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: None)
    monkeypatch.setattr(registry, "version_store", lambda _settings: SimpleNamespace(pointer=lambda: None))
    monkeypatch.setattr(views.time, "sleep", lambda _s: None)
    cutoffs = iter([60_000, 120_000])
    monkeypatch.setattr(job, "choose_cutoff", lambda *_: next(cutoffs))
    ran: list[int] = []

    def run_batch(settings, cutoff, names):
        ran.append(cutoff)
        if cutoff == 60_000:
            raise Overtaken("cutoff 60000 is behind what serves page_views")
        return SimpleNamespace(version=7, cutoff_ms=cutoff)

    monkeypatch.setattr(job, "run_batch", run_batch)
    building = [SimpleNamespace(name="page_views", since_ms=0)]
    views._build(Settings(), building, time.monotonic() + 60)
    assert ran == [60_000, 120_000], "planned again at a newer cutoff"

    # The batch beside it served the view being built: done, with no second batch over the master dataset.
    from stores.pointer import Pointer, ViewEntry

    served = Pointer(entries={"page_views": ViewEntry("page_views_v9", 9, 90_000)})
    monkeypatch.setattr(registry, "version_store", lambda _settings: SimpleNamespace(pointer=lambda: served))
    cutoffs, ran[:] = iter([60_000]), []
    views._build(Settings(), building, time.monotonic() + 60)
    assert ran == [60_000]

    def unverified(settings, cutoff, names):
        raise VerificationError("page_views_v8: 10 rows written, 9 read back")

    monkeypatch.setattr(job, "choose_cutoff", lambda *_: 180_000)
    monkeypatch.setattr(job, "run_batch", unverified)
    with pytest.raises(SystemExit, match=r"verification.*9 read back.*serving is unchanged.*views apply"):
        views._build(Settings(), building, time.monotonic() + 60)


def test_retiring_says_which_names_it_retired_and_whether_rows_were_left(monkeypatch):
    """`apply` exited 0 after "not all deleted", and named every retiring storage name as retired by it,
    older ones a replay still held included."""
    from lambdactl import batch, views
    from stores import registry
    from stores.pointer import Pointer, ViewEntry

    said: list[str] = []
    monkeypatch.setattr(views, "_say", said.append)
    current = Pointer(
        entries={"page_views": ViewEntry("page_views_v3", 3, 1_000), "clicks": ViewEntry("clicks_v3", 3, 1_000)},
        retiring=("old_view",),
    )
    moved: list[Pointer] = []
    monkeypatch.setattr(registry, "version_store", lambda _settings: None)
    monkeypatch.setattr(batch, "move_pointer", lambda _store, change, *_: moved.append(change(current)) or moved[-1])
    monkeypatch.setattr(batch, "delete_retiring", lambda _settings: False)
    assert views._retire(Settings(), ["page_views"]) is False
    assert said == ["retired clicks: pointer entries removed"]
    assert set(moved[0].retiring) == {"old_view", "clicks"}


def test_a_completed_retirement_drops_the_retired_tables_at_once(monkeypatch):
    """The tables of a retired view went only at the next batch run's retention. Once its realtime
    rows are deleted, `apply` runs retention itself; with rows left it does not (the name is still
    retiring, and retention would keep that table anyway). A failing retention fails nothing."""
    from lambdactl import batch, views
    from stores import registry
    from stores.pointer import Pointer, ViewEntry

    current = Pointer(
        entries={"page_views": ViewEntry("page_views_v3", 3, 1_000), "clicks": ViewEntry("clicks_v3", 3, 1_000)}
    )
    kept: list[int] = []

    def retain(keep):
        kept.append(keep)
        return ["clicks_v2", "clicks_v3"]

    said: list[str] = []
    monkeypatch.setattr(views, "_say", said.append)
    monkeypatch.setattr(batch, "_say", said.append)
    monkeypatch.setattr(registry, "version_store", lambda _settings: SimpleNamespace(retain=retain))
    monkeypatch.setattr(batch, "move_pointer", lambda _store, change, *_: change(current))
    settings = Settings()
    monkeypatch.setattr(batch, "delete_retiring", lambda _settings: False)
    assert views._retire(settings, ["page_views"]) is False
    assert kept == []
    monkeypatch.setattr(batch, "delete_retiring", lambda _settings: True)
    assert views._retire(settings, ["page_views"]) is True
    assert kept == [settings.batch.keep_versions]
    assert said[-1] == "dropped batch tables no pointer entry names: clicks_v2, clicks_v3"
    # A name still retiring (an apply killed during the wait, run again): retention once its rows are gone.
    current = Pointer(entries={"page_views": ViewEntry("page_views_v3", 3, 1_000)}, retiring=("clicks",))
    assert views._retire(settings, ["page_views"]) is True
    assert len(kept) == 2
    # Nothing to retire, or a retiring name declared again (taken off with no wait): no retention.
    for current in (
        Pointer(entries={"page_views": ViewEntry("page_views_v3", 3, 1_000)}),
        Pointer(entries={"page_views": ViewEntry("page_views_v3", 3, 1_000)}, retiring=("clicks",)),
    ):
        assert views._retire(settings, ["page_views", "clicks"] if current.retiring else ["page_views"]) is True
    assert len(kept) == 2

    def unreachable(keep):
        raise OSError("HBase Thrift unreachable")

    monkeypatch.setattr(registry, "version_store", lambda _settings: SimpleNamespace(retain=unreachable))
    assert views._retire(settings, ["page_views"]) is True, "the retirement is done; the next retention drops them"


def test_apply_of_a_view_whose_filter_the_layers_cannot_use_exits_2_naming_it(tmp_path, monkeypatch, caplog):
    """Spark judged a filter only in the layers' queries: `where="country = 1"` (text cast to a number
    on each event) was applied, then stopped the speed layer for every view at every restart, and
    failed every batch run."""
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setenv("LAMBDA_ENVIRONMENT", "development")
    folder = tmp_path / "views"
    folder.mkdir()
    (folder / "filtered_views_mod.py").write_text(
        "from definitions.views import View\n"
        "VIEWS = [\n"
        "    View('by_country', keys=('url',), aggregation='count', where='country = 1'),\n"
        "    View('fine', keys=('url',), aggregation='count', where=\"event_type = 'click'\"),\n"
        "]\n"
    )
    assert main(["views", "apply", "--modules", "filtered_views_mod", "--paths", str(folder)]) == 2
    assert (
        "refused, nothing changed: a view's filter cannot be used: view by_country: where 'country = 1'" in caplog.text
    )
    assert "CAST_INVALID_INPUT" in caplog.text and "view fine" not in caplog.text
    persisted = tmp_path / "state" / "settings.json"
    assert not persisted.exists() or "filtered_views_mod" not in persisted.read_text(), "nothing was written"
