"""Bring the local stack up, report on it, take it down.

`up` is idempotent: a service whose process is alive and healthy is left alone. Services are
launched together and waited for concurrently, each against its own deadline; a service that
dies or stays unhealthy is reported by name, with the reason and the tail of its log.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from definitions.files import private_dir, refuse_untrusted
from definitions.settings import Settings
from infra import services as svc
from infra import stack_down, stack_status
from infra import stack_waits as waits
from infra.errors import StackError
from infra.java import JavaRuntime, find_java
from infra.process import STATE_TAG, ProcessSupervisor, port_owner
from infra.restarts import Budget
from infra.spark_services import cluster_services
from infra.stack_status import ServiceStatus
from infra.stack_waits import one_error
from infra.state_lock import stack_lock
from infra.supervision import StackProcesses
from infra.supervisor_config import NAME as SUPERVISOR
from infra.supervisor_config import SETTINGS_DIGEST, Program, entry_digests, loaded_digest
from stores.restarts import read_status, summary

log = logging.getLogger(__name__)


# localhost resolves to 127.0.0.1 and to ::1, and a server told localhost may listen on either (two
# sockets of their own: 127.0.0.1 and ::1 are apart).
_LOCALHOST_IS = frozenset({"127.0.0.1", "::1"})


def _spelled_once(host: str) -> str:
    name = host.lower().rstrip(".")
    return name[1:-1] if name.startswith("[") and name.endswith("]") else name


def _one_address(host: str, other: str) -> bool:
    if host == other or {host, other} & {"0.0.0.0", "::", ""}:
        return True
    return (host == "localhost" and other in _LOCALHOST_IS) or (other == "localhost" and host in _LOCALHOST_IS)


def port_collisions(listening: list[tuple[str, str, dict[str, int]]]) -> list[str]:
    """Where two of (service, host, {label: port}) are set to listen on one port of one address
    (a wildcard address holds the port on every address)."""
    taken: dict[int, list[tuple[str, str, str]]] = {}
    out = []
    for name, given, ports in listening:
        host = _spelled_once(given)
        for label, port in ports.items():
            for other, other_host, other_label in taken.get(port, []):
                if _one_address(host, other_host):
                    out.append(f"port {port} is {other}'s {other_label} and {name}'s {label}")
            taken.setdefault(port, []).append((name, host, label))
    return out


def code_places(settings: Settings) -> list[tuple[str, Path]]:
    """(setting, path) of what settings name that the platform's processes run, where it exists on
    this machine: the Java, the jars of every classpath, the executors' Python, Airflow's virtualenv
    and home (its plugins and configuration). A path of a cluster's nodes only is theirs to check."""
    named = [
        ("stack.java_home", settings.stack.java_home),
        ("jars_dir", str(settings.jars_dir)),
        ("spark.python", settings.spark.python),
        ("airflow.venv", str(settings.airflow.venv)),
        ("airflow.home", settings.airflow.home),
    ]
    return [(setting, Path(path)) for setting, path in named if path and os.path.exists(path)]


def _where(host: str, ports: dict[str, int]) -> str:
    return f"{host} " + ", ".join(f"{label} {port}" for label, port in sorted(ports.items()))


class Stack:
    def __init__(self, settings: Settings, names: Iterable[str] | None = None) -> None:
        self.settings = settings
        wanted = list(names) if names is not None else [*settings.stack.managed_services, *cluster_services(settings)]
        unknown = [n for n in wanted if n not in svc.BY_NAME]
        if unknown:
            raise StackError(", ".join(unknown), f"unknown service; known: {', '.join(svc.BY_NAME)}")
        self.services = [s for s in svc.ALL if s.name in wanted]
        self.whole_stack = names is None
        # Seconds each service took to become healthy in the last `up` (started services only).
        self.ready_after: dict[str, float] = {}
        # Every process of the stack runs under supervisord: each managed one is in its configuration.
        # (A Spark cluster's daemons too: a stack of some services only must not take them out of it.)
        kept = {*settings.stack.managed_services, *cluster_services(settings)}
        self.programs = [s for s in svc.ALL if s.name in kept or s in self.services]
        # Every store, also one these settings do not run (a larger cluster's worker): stopped last.
        self.store_names = [s.name for s in svc.ALL if s.phase == 0]
        self.supervisor = StackProcesses(settings, [p.name for p in self.programs])
        self.supervisord = self.supervisor.supervisord
        # Set when the command is interrupted: every wait for a service's health ends at its next poll.
        self.cancelled = threading.Event()

    # --- up ----------------------------------------------------------------------------------

    def up(self, on_progress: Callable[[str], None] | None = None) -> dict[str, str]:
        """Start what is not running, wait until every service is healthy; what each did.

        The stores come up first; on the whole stack they are then bootstrapped (topics, tables,
        keyspace) before the platform's own processes start. One `up` or `down` at a time.
        """
        say = on_progress or (lambda msg: log.info("%s", msg))
        self.cancelled.clear()
        with stack_lock(self.settings.state_dir, say):
            return self._up(say)

    def _up(self, say: Callable[[str], None]) -> dict[str, str]:
        from definitions.settings import copies_beyond_one, default_secrets, weak_password
        from definitions.settings_store import SettingsConflict, persist

        insecure = default_secrets(self.settings) if self.settings.environment != "development" else []
        if insecure and any(s.name in ("api", "airflow") for s in self.services):
            raise StackError(
                "settings",
                f"environment is {self.settings.environment!r} but {', '.join(insecure)} "
                "still hold the development defaults: set them to secrets, or set "
                "LAMBDA_ENVIRONMENT=development on a development machine",
            )
        weak = weak_password(self.settings) if any(s.name.startswith("airflow") for s in self.services) else None
        if weak:
            raise StackError("settings", weak)
        copies = copies_beyond_one(self.settings, (s.name for s in self.services))
        if copies:
            raise StackError("settings", copies)
        collisions = port_collisions([(s.name, s.host(self.settings), s.ports(self.settings)) for s in self.services])
        if collisions:  # each would pass the preflight (nothing listens yet), and one would then die
            raise StackError("settings", "two services are set to listen on one port: " + "; ".join(collisions))
        given = self.settings._given
        if self.settings.environment == "development" and given is not None and "environment" not in given:
            say(
                "environment is development, from the persisted settings (an earlier up): the development "
                "token and Airflow password are accepted; `lambdactl config --unset environment` ends that"
            )
        if any(s.phase != 0 for s in self.services):  # every platform process loads the declared views
            from definitions.view_filters import declared_filter_problems
            from definitions.view_loading import load_views

            try:
                registry = load_views(self.settings)
            except (ValueError, ImportError) as exc:
                raise StackError("settings", f"the declared views cannot be loaded: {exc}") from None
            # A module edited since it was applied; checked on the JDK the stack runs on.
            java = str(find_java(self.settings.stack.java_home).home) if any(v.where for v in registry) else ""
            problems = declared_filter_problems(self.settings, registry, java)
            if problems:
                raise StackError("settings", f"a view's filter cannot be used: {'; '.join(problems)}")
        for setting, path in code_places(self.settings):
            try:
                refuse_untrusted(path, setting, "nothing is run from it", ancestors=True)
            except ValueError as exc:
                raise StackError("settings", str(exc)) from None
        moved = self._running_stores_moved()
        if moved:  # checked before anything is persisted: the running stack keeps its settings
            raise StackError(
                ", ".join(name for name, _ in moved),
                "running under other settings: "
                + "; ".join(what for _, what in moved)
                + ". A store takes new settings when started again: `lambdactl down`, then `up` with them "
                "(or leave them out to use the running ones)",
            )
        private_dir(self.settings.state_dir)
        try:
            where = persist(self.settings)
        except SettingsConflict as exc:  # another `up` persisted other data-shaping values meanwhile
            raise StackError("settings", str(exc)) from None
        say(f"settings persisted in {where}: every process of the stack loads them")
        outcome: dict[str, str] = {}
        stores = [s for s in self.services if s.phase == 0]
        if stores:
            self._up_supervised(stores, outcome, say)
        if self.whole_stack and stores:
            from infra.bootstrap import bootstrap

            bootstrap(self.settings)
        platform = [s for s in self.services if s.phase > 0]
        if platform:
            self._up_supervised(platform, outcome, say)
        return outcome

    def _running_stores_moved(self) -> list[tuple[str, str]]:
        """The running stores these settings would look for at another host or port than the one
        they were started with (the persisted settings): (name, what differs)."""
        from definitions.settings_store import persisted_settings

        before = persisted_settings(self.settings)
        if before is None:
            return []
        out = []
        for service in self.services:
            if service.phase != 0 or self.supervisor.process(service.name) is None:
                continue
            was, now = (
                (service.host(before), service.ports(before)),
                (service.host(self.settings), service.ports(self.settings)),
            )
            if was != now:
                out.append((service.name, f"{service.name} runs at {_where(*was)}, these settings say {_where(*now)}"))
        return out

    def _up_supervised(self, members: list, outcome: dict[str, str], say: Callable[[str], None]) -> None:
        """Processes under supervisord: started once, then restarted by it when they exit. (A store
        an earlier release started with a pid file of its own runs on as it is until `down`.)"""
        with self.supervisord.lock():
            since = self._start_supervised(members, outcome, say)
        waits.await_all(
            self,
            members,
            outcome,
            say,
            lambda s: (
                waits.await_supervised(self, s, since)
                if self.supervisor.supervised(s.name)
                else waits.await_healthy(self, s)
            ),
        )

    def _start_supervised(self, members: list, outcome: dict[str, str], say: Callable[[str], None]) -> float:
        timeout = self.settings.stack.stop_timeout_s
        unsupervised = set()  # stores an earlier release started with pid files of their own, running
        for service in members:  # a process started before the supervisor (its own pid file) moves under it
            if self.supervisor.pid_file(service.name).exists():
                old = ProcessSupervisor.process(self.supervisor, service.name)
                if old is not None and service.phase == 0:  # a store runs on until `down`
                    outcome[service.name] = "already running"
                    unsupervised.add(service.name)
                    continue
                if old is not None:
                    say(
                        f"{service.name}: runs outside the supervisor (pid {old.pid}); restarting it under the supervisor"
                    )
                ProcessSupervisor.stop(self.supervisor, service.name, timeout)
        members = [s for s in members if s.name not in unsupervised]
        if not self.supervisord.running() and os.environ.get(STATE_TAG) != str(self.settings.state_dir):
            # Processes of a supervisor that died (killed, say) run on without it: end them first,
            # the stores after the others. Of some services only, none: a new supervisor would run
            # beside the others' orphans, and the next `up` start them twice.
            others = self.supervisor.orphan_programs() - {s.name for s in self.services}
            if others and not self.whole_stack:
                raise StackError(
                    SUPERVISOR,
                    f"the supervisor is not running, and {', '.join(sorted(others))} it started run(s) on without "
                    "it: `lambdactl up` (the whole stack) stops and starts them again under a new one",
                )
            killed = self.supervisor.end_orphans(self.settings.stack.stop_timeout_s, last=self.store_names)
            if killed:
                say(f"the supervisor was not running: ended {killed} process(es) it had left behind")
        # Checked before the configuration is applied (which stops the programs whose entries changed)
        # and each on its own: a port a stranger holds keeps that program down, not every other too.
        # A supervisor that runs but does not answer says nothing of what runs: its programs hold their
        # ports until `ensure` replaces it (stopping them all), so they are checked after that.
        answering = self.supervisord.answering()
        hung = not answering and self.supervisord.running()
        running = self.supervisord.all_info() if answering else {}
        refused = {} if hung else self._preflights(members, running)
        if refused and len(refused) == len(members) and not self.supervisord.running():
            raise one_error(list(refused.values()))  # nothing to start: no supervisor left behind either
        java = find_java(self.settings.stack.java_home)
        env = self._environment(java)
        for p in self.programs:  # supervisord starts each in its directory
            p.dirs(self.settings).root.mkdir(parents=True, exist_ok=True)
        digests = self._settings_digests(running, {s.name for s in members}, say)
        programs = [
            Program(
                p.name,
                p.command(self.settings, java),
                p.dirs(self.settings).root,
                {
                    "JAVA_HOME": env["JAVA_HOME"],
                    "LAMBDA_STATE_DIR": env["LAMBDA_STATE_DIR"],
                    STATE_TAG: str(self.settings.state_dir),
                    **({SETTINGS_DIGEST: digest} if (digest := digests.get(p.name)) is not None else {}),
                },
                p.stops,
                store=p.phase == 0,
            )
            for p in self.programs
        ]
        how = self.supervisord.ensure(programs, env, last=self.store_names, replace_hung=self.whole_stack)
        if how != "unchanged":
            budget = Budget.from_settings(self.settings)
            record = self.supervisor.record(SUPERVISOR)
            say(
                f"supervisor: {how} (pid {record.pid if record else '?'}); it restarts a process that exits, "
                f"{budget.describe()}"
            )
        # Read after the update: a program whose command changed was stopped by it, and starts again here.
        info = self.supervisord.all_info()
        if hung:
            refused = self._preflights(members, info)
        known = read_status(self.settings.state_dir)["processes"]
        to_start = []
        for service in members:
            state = info.get(service.name, {}).get("statename")
            entry = known.get(service.name, {})
            if state in ("RUNNING", "STARTING", "BACKOFF"):
                outcome[service.name] = "already running"
            elif entry.get("next_restart_at") and state in ("EXITED", "FATAL"):
                outcome[service.name] = "restarting"  # the supervisor restarts it in a moment
                say(f"{service.name}: {summary(entry)}")
            else:
                to_start.append(service)
        since = time.time()
        for service in to_start:
            if service.name in refused:
                continue
            self.prepare(service, java)  # its configuration, rendered only for a start: a running one keeps its files
            self.supervisord.start(service.name)
            outcome[service.name] = "started"
            record = self.supervisor.record(service.name)
            say(f"{service.name}: started under the supervisor (pid {record.pid if record else '?'})")
        if refused:
            raise one_error(list(refused.values()))
        return since

    def _preflights(self, members: Sequence[svc.Service], running: Mapping[str, Mapping]) -> dict[str, StackError]:
        """Of `members` the supervisor does not run (`running`: its programs' info), each one whose
        _preflight refuses it, with why."""
        refused: dict[str, StackError] = {}
        for service in members:
            if running.get(service.name, {}).get("statename") not in ("RUNNING", "STARTING", "BACKOFF"):
                try:
                    self._preflight(service)
                except StackError as exc:
                    refused[service.name] = exc
        return refused

    def _settings_digests(
        self, running: dict[str, dict], starting: set[str], say: Callable[[str], None]
    ) -> dict[str, str | None]:
        """Per platform program, the settings digest its entry carries: of the persisted settings it
        reads (PlatformProcess.reads) for one this phase of `up` starts (a running one started with
        others is then stopped by the update, and started again here), and the one its entry has
        for any other (no entry changed, so none stopped that this phase would not start again).
        The stores' settings reach them through their commands and configuration files."""
        from definitions.settings_store import persisted_digest

        entries = entry_digests(self.settings.state_dir)
        out: dict[str, str | None] = {}
        changed = []
        for p in self.programs:
            if p.phase == 0:
                continue
            if p.name not in starting:
                out[p.name] = entries.get(p.name)
                continue
            out[p.name] = now = persisted_digest(self.settings, getattr(p, "reads", ()), getattr(p, "ignores", ()))
            info = running.get(p.name, {})
            # supervisord's own child (the session leader) has the entry's environment as it started
            # it; the program under it may have made its own (Airflow's does).
            leader = info.get("pid") if info.get("statename") in ("RUNNING", "STARTING", "BACKOFF") else None
            if leader and loaded_digest(leader) != now:
                changed.append(p.name)
        if changed:
            it = "it" if len(changed) == 1 else "they"
            say(
                f"settings changed since {it} started: {', '.join(changed)}; restarting {'it' if it == 'it' else 'them'}"
            )
        return out

    def _preflight(self, service: svc.Service) -> None:
        service.check_jars(self.settings)
        host = service.host(self.settings)
        for label, port in service.ports(self.settings).items():
            owner = port_owner(host, port)
            if owner is not None:
                raise StackError(
                    service.name, f"cannot start: port {port} ({label}) on {host} is already in use by {owner}"
                )

    def _environment(self, java: JavaRuntime) -> dict[str, str]:
        # The stack's processes load the persisted settings of this state directory and nothing
        # else: no LAMBDA_* variable of the shell that ran `up` reaches them (settings_store).
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAMBDA_")}
        env.update(JAVA_HOME=str(java.home), LAMBDA_STATE_DIR=str(self.settings.state_dir))
        return env

    def prepare(self, service: svc.Service | svc.PlatformProcess, java: JavaRuntime) -> list[str]:
        """Render the service's configuration (and format its storage once); its command line."""
        dirs = service.dirs(self.settings)
        dirs.conf.mkdir(parents=True, exist_ok=True)
        service.render(self.settings, dirs, java)
        return service.command(self.settings, java)

    # --- down and status (infra.stack_down, infra.stack_status) ----------------------------------

    def stop(self, name: str) -> bool:
        """Stop one supervised process and keep it stopped until the next `up` (stack_down.stop)."""
        return stack_down.stop(self, name)

    def restart(self, name: str) -> float:
        """Stop one supervised process and start it again; the seconds until it was healthy."""
        return stack_down.restart(self, name)

    def down(self, on_progress: Callable[[str], None] | None = None) -> dict[str, str]:
        say = on_progress or (lambda msg: log.info("%s", msg))
        with stack_lock(self.settings.state_dir, say):
            return stack_down.down(self, say)

    def status(self, probe: bool = True) -> list[ServiceStatus]:
        return stack_status.status(self, probe)
