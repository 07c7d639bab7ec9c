"""`up` checks each program it must start (its jars, its ports) before it applies the supervisor's
configuration, and a program that fails its check keeps only itself down. The update stops every
program whose entry changed; a stranger on one program's port then made `up` stop there, leaving
every stopped program down (no service: supervisord is a stand-in that keeps the states)."""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from definitions.settings import Settings, copies_beyond_one
from infra import services as svc
from infra import stack as stack_module
from infra.errors import StackError
from infra.stack import Stack


class Supervisord:
    """Programs' states before and after the update, and what `up` asked of it, in order."""

    def __init__(self) -> None:
        self.states = {"archiver": "RUNNING", "airflow": "STOPPED"}
        self.calls: list[str] = []

    def running(self) -> bool:
        return True

    def answering(self) -> bool:
        return True

    def all_info(self):
        return {name: {"statename": state} for name, state in self.states.items()}

    def ensure(self, programs, env, last=(), replace_hung=True):
        self.calls.append("apply")
        self.states["archiver"] = "STOPPED"  # its entry changed (a log setting, say): the update stops it
        return "updated"

    def start(self, name: str) -> None:
        self.calls.append(f"start {name}")
        self.states[name] = "RUNNING"

    @contextmanager
    def lock(self):
        yield


def _stack_of(fake: Supervisord, tmp_path, monkeypatch) -> Stack:
    """A stack of the archiver and Airflow whose supervisord is `fake` (no JDK, nothing rendered)."""
    stack = Stack(Settings(state_dir=tmp_path, stack={"managed_services": ["archiver", "airflow"]}))
    stack.supervisord = fake
    monkeypatch.setattr(stack_module, "find_java", lambda _home: SimpleNamespace(home="/java"))
    monkeypatch.setattr(Stack, "prepare", lambda self, service, java: ["true"])
    return stack


def test_a_stranger_on_one_programs_port_keeps_only_that_program_down(tmp_path, monkeypatch):
    fake = Supervisord()
    stack = _stack_of(fake, tmp_path, monkeypatch)

    def preflight(self, service) -> None:
        fake.calls.append(f"check {service.name}")
        if service.name == "airflow":
            raise StackError("airflow", "cannot start: port 8080 (web) on 127.0.0.1 is already in use by pid 4242")

    monkeypatch.setattr(Stack, "_preflight", preflight)
    members = [svc.BY_NAME["archiver"], svc.BY_NAME["airflow"]]
    outcome: dict[str, str] = {}
    with pytest.raises(StackError, match="port 8080"):
        stack._start_supervised(members, outcome, lambda _message: None)
    assert fake.calls == ["check airflow", "apply", "start archiver"], fake.calls
    assert fake.states == {"archiver": "RUNNING", "airflow": "STOPPED"}


@pytest.mark.parametrize(
    "settings_given, words",
    [
        ({"api": {"port": 8080}}, "port 8080 is api's"),  # Airflow's web port
        ({"kafka": {"port": 9094, "sasl_listener_port": 9094}}, "port 9094 is kafka's"),
    ],
)
def test_two_services_set_to_one_port_are_refused_before_anything_starts(tmp_path, settings_given, words):
    """Both passed the preflight (nothing listened yet): one then died at every restart."""
    from infra.stack import port_collisions

    settings = Settings(state_dir=tmp_path / "state", environment="development", **settings_given)
    stack = Stack(settings)
    found = port_collisions([(s.name, s.host(settings), s.ports(settings)) for s in stack.services])
    assert found and any(words in f for f in found), found
    with pytest.raises(StackError, match="two services are set to listen on one port"):
        stack.up()


@pytest.mark.parametrize(
    "given, words",
    [
        ({"kafka": {"replication_factor": 3}}, "kafka.replication_factor"),
        ({"cassandra": {"replication_factor": 2}}, "cassandra.replication_factor"),
        ({"cassandra": {"replication": {"datacenter1": 3}}}, "cassandra.replication"),
    ],
)
def test_more_copies_than_the_stacks_own_store_holds_are_refused_before_anything_starts(tmp_path, given, words):
    """The stack's own stores are one broker and one node: a topic with 3 copies was never created,
    and every write of a keyspace with 3 copies failed as Unavailable (the speed layer's restarts).
    Judged at `up`, on the settings merged with the persisted ones (which may take the store out of
    stack.managed_services)."""
    settings = Settings(state_dir=tmp_path / "state", environment="development", **given)
    with pytest.raises(StackError, match=rf"{re.escape(words)} \(\d copies\)|{re.escape(words)} \(\d\)"):
        Stack(settings).up()
    others = Settings(state_dir=tmp_path / "state", **given, stack={"managed_services": ["archiver", "api"]})
    assert copies_beyond_one(others, [s.name for s in Stack(others).services]) is None


def test_the_default_ports_do_not_collide(tmp_path):
    from infra.stack import port_collisions

    settings = Settings(state_dir=tmp_path / "state")
    stack = Stack(settings)
    assert port_collisions([(s.name, s.host(settings), s.ports(settings)) for s in stack.services]) == []
    assert port_collisions([("a", "127.0.0.1", {"x": 1}), ("b", "10.0.0.1", {"y": 1})]) == []
    assert port_collisions([("a", "0.0.0.0", {"x": 1}), ("b", "10.0.0.1", {"y": 1})]) == ["port 1 is a's x and b's y"]
    # Two spellings of the loopback address: one socket, and the second to start died at every restart.
    for one, other in (("localhost", "127.0.0.1"), ("LOCALHOST", "localhost."), ("::1", "localhost"), ("[::1]", "::1")):
        assert port_collisions([("a", one, {"x": 1}), ("b", other, {"y": 1})]) == ["port 1 is a's x and b's y"]
    # Two sockets of their own.
    for one, other in (("127.0.0.2", "localhost"), ("127.0.0.1", "::1")):
        assert port_collisions([("a", one, {"x": 1}), ("b", other, {"y": 1})]) == []


def test_an_up_of_some_services_after_the_supervisor_died_leaves_the_others_orphans_alone(tmp_path, monkeypatch):
    """Its new supervisor would run beside the orphans of the others (status then shows them as not
    running), and the next whole `up` would start a second archiver beside the first."""
    settings = Settings(state_dir=tmp_path, stack={"managed_services": ["kafka", "archiver", "api"]})
    stack = Stack(settings, ["api"])
    fake = Supervisord()
    fake.running = lambda: False  # type: ignore[method-assign]
    stack.supervisord = fake  # type: ignore[assignment]
    monkeypatch.setattr(stack.supervisor, "orphan_programs", lambda: {"kafka", "archiver", "api"})
    ended: list = []
    monkeypatch.setattr(stack.supervisor, "end_orphans", lambda *a, **k: ended.append(k) or 0)
    monkeypatch.delenv("LAMBDA_STACK_STATE_DIR", raising=False)
    with pytest.raises(StackError, match="archiver, kafka it started run") as err:
        stack._start_supervised([svc.BY_NAME["api"]], {}, lambda _message: None)
    assert "`lambdactl up`" in str(err.value) and ended == [] and fake.calls == [], "nothing ended, nothing started"


def test_views_the_platform_cannot_load_are_refused_before_anything_is_persisted(tmp_path, monkeypatch):
    """A views folder every user can change was refused by each platform process at its start:
    `up` persisted it, started the stores, then the API and the speed layer died at every restart."""
    from definitions.settings_store import persisted_path

    def start(*_args):  # nothing is started by a unit test, whatever `up` gets to
        raise AssertionError("up went on to start the stack")

    monkeypatch.setattr(Stack, "_running_stores_moved", lambda self: [])
    monkeypatch.setattr(Stack, "_up_supervised", start)

    folder = tmp_path / "views"
    folder.mkdir()
    folder.chmod(0o777)
    settings = Settings(
        state_dir=tmp_path / "state",
        environment="development",
        views={"modules": [], "paths": [str(folder)]},
    )
    with pytest.raises(StackError, match=rf"the declared views cannot be loaded: views.paths: {folder} can be changed"):
        Stack(settings).up()
    assert not persisted_path(settings).exists(), "nothing persisted"


def test_a_view_module_edited_to_a_filter_the_layers_cannot_use_is_refused_before_anything_starts(
    tmp_path, monkeypatch
):
    """A module applied with a good filter, then edited on disk: every process loads the new text at
    its start, and the speed layer died at every restart (for every view) while `up` waited for it."""
    from definitions.settings_store import persisted_path

    def start(*_args):
        raise AssertionError("up went on to start the stack")

    monkeypatch.setattr(Stack, "_running_stores_moved", lambda self: [])
    monkeypatch.setattr(Stack, "_up_supervised", start)
    folder = tmp_path / "views"
    folder.mkdir(mode=0o755)
    (folder / "edited_filter_views.py").write_text(
        "from definitions.views import View\n"
        "VIEWS = [View('recent', keys=('url',), aggregation='count', where='event_time > now()')]\n"
    )
    settings = Settings(
        state_dir=tmp_path / "state",
        environment="development",
        views={"modules": ["edited_filter_views"], "paths": [str(folder)]},
    )
    try:
        with pytest.raises(
            StackError, match=r"a view's filter cannot be used: view recent: where .*Now depends on when"
        ):
            Stack(settings).up()
    finally:
        sys.modules.pop("edited_filter_views", None)
    assert not persisted_path(settings).exists(), "nothing persisted"


def test_a_relative_views_folder_is_refused_when_the_settings_are_read(tmp_path):
    """Each process runs in a folder of its own: it found the modules of a relative folder elsewhere."""
    with pytest.raises(ValueError, match=r"(?s)views.paths.*must be absolute paths"):
        Settings(state_dir=tmp_path / "state", views={"modules": [], "paths": ["views"]})


@pytest.mark.parametrize(
    "setting, given",
    [
        ("stack.java_home", lambda d: {"stack": {"java_home": str(d / "jdk")}}),
        ("jars_dir", lambda d: {"jars_dir": d / "jars"}),
        ("spark.python", lambda d: {"spark": {"python": str(d / "python3")}}),
        ("airflow.venv", lambda d: {"airflow": {"venv": d / "venv"}}),
        ("airflow.home", lambda d: {"airflow": {"home": str(d / "home")}}),
    ],
)
def test_code_a_setting_names_in_a_folder_others_can_change_is_refused_before_anything_runs(
    tmp_path, monkeypatch, setting, given
):
    """The Java every store runs, the jars on every classpath, the executors' Python, Airflow's
    virtualenv and home (its plugins): each is run by every process of the platform, so one another
    user can replace is refused, as the views folders are, before anything is persisted or started."""
    from definitions.settings_store import persisted_path

    def start(*_args):
        raise AssertionError("up went on to start the stack")

    monkeypatch.setattr(Stack, "_running_stores_moved", lambda self: [])
    monkeypatch.setattr(Stack, "_up_supervised", start)
    shared = tmp_path / "shared"
    shared.mkdir()
    for name in ("jdk", "jars", "venv", "home"):
        (shared / name).mkdir()
    (shared / "python3").write_text("")
    shared.chmod(0o777)
    settings = Settings(state_dir=tmp_path / "state", environment="development", **given(shared))
    with pytest.raises(StackError, match=rf"{setting}: {shared} can be changed by every user"):
        Stack(settings).up()
    assert not persisted_path(settings).exists(), "nothing persisted"
    shared.chmod(0o755)
    trusted = Stack(settings)
    with pytest.raises(AssertionError, match="up went on"):
        trusted.up()


class HungSupervisord(Supervisord):
    """Runs, does not answer, until `up` replaces it: its programs held their ports until then."""

    def __init__(self) -> None:
        super().__init__()
        self.states = {"archiver": "RUNNING", "airflow": "RUNNING"}
        self.hung = True

    def answering(self) -> bool:
        return not self.hung

    def all_info(self):
        return {} if self.hung else super().all_info()

    def ensure(self, programs, env, last=(), replace_hung=True):
        self.calls.append("replace")
        assert replace_hung
        self.hung = False
        self.states = {name: "STOPPED" for name in self.states}  # replaced: every program it ran stopped
        return "started"


def test_a_supervisor_that_does_not_answer_is_replaced_before_the_ports_are_judged(tmp_path, monkeypatch):
    """Every port was held by the stack's own programs when `up` judged them: it then replaced the
    supervisor (stopping every program), started none again, and failed naming processes it had
    just stopped — a whole-stack outage from an `up`."""
    fake = HungSupervisord()
    stack = _stack_of(fake, tmp_path, monkeypatch)

    def preflight(self, service) -> None:
        fake.calls.append(f"check {service.name}")
        if fake.states.get(service.name) == "RUNNING":  # its own process holds the port
            raise StackError(service.name, f"cannot start: a port of {service.name} is already in use by pid 4242")

    monkeypatch.setattr(Stack, "_preflight", preflight)
    members = [svc.BY_NAME["archiver"], svc.BY_NAME["airflow"]]
    stack._start_supervised(members, {}, lambda _message: None)
    assert fake.calls == ["replace", "check archiver", "check airflow", "start archiver", "start airflow"], fake.calls
    assert fake.states == {"archiver": "RUNNING", "airflow": "RUNNING"}
