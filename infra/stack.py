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
import xmlrpc.client
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psutil

from definitions.files import private_dir
from definitions.settings import Settings
from infra import services as svc
from infra.diagnoses import likely_causes
from infra.errors import StackError
from infra.java import JavaRuntime, find_java
from infra.process import STATE_TAG, ProcessSupervisor, port_owner
from infra.restarts import Budget
from infra.spark_services import cluster_services
from infra.state_lock import stack_lock
from infra.supervision import NAME as SUPERVISOR
from infra.supervision import Program, StackProcesses
from stores.restarts import read_status, restart_report, summary

log = logging.getLogger(__name__)


@dataclass
class ServiceStatus:
    name: str
    running: bool
    pid: int | None
    rss_mb: float
    healthy: bool
    detail: str
    uptime_s: float = 0.0
    # Restarts the supervisor made, and the last one's reason.
    restarts: int = 0
    restart_detail: str = ""


def one_error(errors: list[StackError]) -> StackError:
    """The failures of several services as one error naming each."""
    if len(errors) == 1:
        return errors[0]
    return StackError(", ".join(e.service for e in errors), "\n\n".join(str(e) for e in errors))


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    try:
        members = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for member in members:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            pass
    return total


def port_collisions(listening: list[tuple[str, str, dict[str, int]]]) -> list[str]:
    """Where two of (service, host, {label: port}) are set to listen on one port of one address
    (a wildcard address holds the port on every address)."""
    taken: dict[int, list[tuple[str, str, str]]] = {}
    out = []
    for name, host, ports in listening:
        for label, port in ports.items():
            for other, other_host, other_label in taken.get(port, []):
                if host == other_host or {host, other_host} & {"0.0.0.0", "::", ""}:
                    out.append(f"port {port} is {other}'s {other_label} and {name}'s {label}")
            taken.setdefault(port, []).append((name, host, label))
    return out


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
        from definitions.settings import default_secrets
        from definitions.settings_store import persist

        insecure = default_secrets(self.settings) if self.settings.environment != "development" else []
        if insecure and any(s.name in ("api", "airflow") for s in self.services):
            raise StackError(
                "settings",
                f"environment is {self.settings.environment!r} but {', '.join(insecure)} "
                "still hold the development defaults: set them to secrets, or set "
                "LAMBDA_ENVIRONMENT=development on a development machine",
            )
        collisions = port_collisions([(s.name, s.host(self.settings), s.ports(self.settings)) for s in self.services])
        if collisions:  # each would pass the preflight (nothing listens yet), and one would then die
            raise StackError("settings", "two services are set to listen on one port: " + "; ".join(collisions))
        given = self.settings._given
        if self.settings.environment == "development" and given is not None and "environment" not in given:
            say(
                "environment is development, from the persisted settings (an earlier up): the development "
                "token and Airflow password are accepted; `lambdactl config --unset environment` ends that"
            )
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
        say(f"settings persisted in {persist(self.settings)}: every process of the stack loads them")
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

    def _await_all(self, members: list, outcome: dict[str, str], say: Callable[[str], None], wait) -> None:
        """Wait for every member concurrently; raise naming each that did not become healthy. An
        interrupt (Ctrl-C) ends every wait at its next poll, not at its deadline."""
        pool = ThreadPoolExecutor(max_workers=max(1, len(members)))
        try:
            futures = {s.name: pool.submit(wait, s) for s in members}
            errors = []
            for name, future in futures.items():
                try:
                    detail, waited = future.result()
                    if outcome[name] == "started":
                        self.ready_after[name] = waited
                        say(f"{name}: healthy after {waited:.0f}s ({detail})")
                except StackError as exc:
                    errors.append(exc)
        except BaseException:
            self.cancelled.set()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        if errors:
            raise one_error(errors)

    def _up_supervised(self, members: list, outcome: dict[str, str], say: Callable[[str], None]) -> None:
        """Processes under supervisord: started once, then restarted by it when they exit. (A store
        an earlier release started with a pid file of its own runs on as it is until `down`.)"""
        with self.supervisord.lock():
            since = self._start_supervised(members, outcome, say)
        self._await_all(
            members,
            outcome,
            say,
            lambda s: (
                self._await_supervised(s, since) if self.supervisor.supervised(s.name) else self._await_healthy(s)
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
        running = self.supervisord.all_info() if self.supervisord.answering() else {}
        refused: dict[str, StackError] = {}
        for service in members:
            if running.get(service.name, {}).get("statename") not in ("RUNNING", "STARTING", "BACKOFF"):
                try:
                    self._preflight(service)
                except StackError as exc:
                    refused[service.name] = exc
        if refused and len(refused) == len(members) and not self.supervisord.running():
            raise one_error(list(refused.values()))  # nothing to start: no supervisor left behind either
        java = find_java(self.settings.stack.java_home)
        env = self._environment(java)
        for p in self.programs:  # supervisord starts each in its directory
            p.dirs(self.settings).root.mkdir(parents=True, exist_ok=True)
        programs = [
            Program(
                p.name,
                p.command(self.settings, java),
                p.dirs(self.settings).root,
                {
                    "JAVA_HOME": env["JAVA_HOME"],
                    "LAMBDA_STATE_DIR": env["LAMBDA_STATE_DIR"],
                    STATE_TAG: str(self.settings.state_dir),
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

    def _await_supervised(self, service, since: float) -> tuple[str, float]:
        """Poll until healthy; fail when the supervisor gave up on it, or at the deadline."""
        started = time.monotonic()
        deadline = started + service.timeout_s(self.settings)
        last_error = "no answer yet"
        while True:
            entry = read_status(self.settings.state_dir)["processes"].get(service.name, {})
            if (entry.get("gave_up_at") or 0) >= since:
                raise self._loop_failure(service, entry)
            state = self.supervisord.all_info().get(service.name, {}).get("statename")
            if state is None and not self.supervisord.running():
                raise self._failure(service, "the supervisor stopped running")
            if state == "STOPPED":
                raise self._failure(service, "was stopped before becoming healthy")
            if state in ("RUNNING", "STARTING"):
                try:
                    return service.check(self.settings), time.monotonic() - started
                except Exception as exc:  # a probe may fail in any client-specific way while starting
                    last_error = f"{type(exc).__name__}: {exc}"
            else:
                last_error = f"{state or 'not started'}; {summary(entry)}"
            if time.monotonic() > deadline:
                raise self._failure(
                    service, f"not healthy within {service.timeout_s(self.settings):.0f}s (last: {last_error})"
                )
            self._pause(service)

    def _loop_failure(self, service, entry: dict) -> StackError:
        last = entry.get("last_exit") or {}
        # More lines than the restart listener keeps: a JVM's cause sits above its stack trace.
        tail = self.supervisor.tail(service.name, 60) or "\n".join(last.get("log_tail", []))
        causes = likely_causes(tail)
        return StackError(
            service.name,
            (
                f"keeps dying: the supervisor gave up after {entry.get('restarts', 0)} restart(s) "
                f"({Budget.from_settings(self.settings).describe()}); last exit: {last.get('reason')}"
                + (f"; likely cause: {causes[0]}" if causes else "")
                + f" (log: {self.supervisor.log_file(service.name)}; restarts: {self.settings.state_dir / 'logs' / 'restarts.log'})"
            ),
            tail,
        )

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

    def _await_healthy(self, service: svc.Service) -> tuple[str, float]:
        """Poll the probe of a store an earlier release started (its own pid file) until it answers;
        (what answered, seconds waited)."""
        started = time.monotonic()
        deadline = started + service.timeout_s(self.settings)
        last_error = "no answer yet"
        while True:
            if self.supervisor.process(service.name) is None:
                code = self.supervisor.exit_code(service.name)
                raise self._failure(
                    service, f"exited{'' if code is None else f' with code {code}'} before becoming healthy"
                )
            try:
                return service.check(self.settings), time.monotonic() - started
            except Exception as exc:  # a probe may fail in any client-specific way while starting
                last_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() > deadline:
                raise self._failure(
                    service, f"not healthy within {service.timeout_s(self.settings):.0f}s (last probe: {last_error})"
                )
            self._pause(service)

    def _pause(self, service) -> None:
        """A second between two polls of a wait; StackError at once when the command was interrupted."""
        if self.cancelled.wait(1.0):
            raise StackError(service.name, "the wait for it was interrupted")

    def _failure(self, service: svc.Service, what: str) -> StackError:
        tail = self.supervisor.tail(service.name, 40)
        causes = likely_causes(tail)
        reason = what + (f"; likely cause: {causes[0]}" if causes else "")
        return StackError(service.name, f"{reason} (log: {self.supervisor.log_file(service.name)})", tail)

    # --- down --------------------------------------------------------------------------------

    def stop(self, name: str) -> bool:
        """Stop one of the stack's supervised processes and keep it stopped until the next `up`
        starts it (Supervisord.take_out: not even a restart the listener had pending starts it);
        whether it ran. StackError when it is not one of them, or supervisord does not answer (a
        process it left behind may still run)."""
        if not any(p.name == name for p in self.programs):
            raise StackError(name, f"not a supervised process; those are {', '.join(p.name for p in self.programs)}")
        self._refuse_unsupervised(name)
        if not self.supervisord.answering():
            raise StackError(
                name,
                "supervisord does not answer, and a process it started may still run: `lambdactl up` first",
            )
        with self.supervisord.lock():
            ran = self.supervisor.process(name) is not None
            self.supervisord.take_out(name)
        if self.supervisor.process(name) is not None:
            raise StackError(name, "still running after it was stopped")
        return ran

    def restart(self, name: str) -> float:
        """Stop one of the stack's supervised processes and start it again; the seconds until it
        was healthy. StackError when it is not one of them, or does not come back healthy."""
        service = next((p for p in self.programs if p.name == name), None)
        if service is None:
            raise StackError(name, f"not a supervised process; those are {', '.join(p.name for p in self.programs)}")
        self._refuse_unsupervised(name)
        self.cancelled.clear()
        # Under the stack lock: an `up` or `down` in another shell is not undone half-way. (Callers
        # holding views.lock take it first: lambdactl views apply, lambdactl reset-speed.)
        with stack_lock(self.settings.state_dir, lambda msg: log.info("%s", msg)), self.supervisord.lock():
            if not self.supervisord.answering():
                raise StackError(name, "the supervisor is not answering: start the stack with `lambdactl up`")
            try:  # asked directly: all_info() is empty both on a failed call and with no program left
                listed = {info["name"] for info in self.supervisord.rpc().getAllProcessInfo()}
            except (OSError, xmlrpc.client.Error) as exc:
                raise StackError(
                    name, f"the supervisor did not list its programs ({type(exc).__name__}): try again"
                ) from None
            if name not in listed:
                raise StackError(
                    name,
                    "not under the supervisor now (`lambdactl reset-speed` or `down` took it out): "
                    "`lambdactl up` adds it back and starts it",
                )
            try:
                self.supervisord.stop(name)
            except BaseException:  # also when interrupted: a program stopped here is started again
                try:
                    self.supervisord.start(name)
                except Exception as exc:  # the first failure is the one to report
                    log.warning("starting %s again after its stop failed: %s", name, exc)
                raise
            since = time.time()
            self.supervisord.start(name)
        return self._await_supervised(service, since)[1]

    def _refuse_unsupervised(self, name: str) -> None:
        """StackError when `name` runs outside the supervisor (a store an earlier release started
        with a pid file of its own): starting it under the supervisor would run it twice."""
        if not self.supervisor.supervised(name) and self.supervisor.process(name) is not None:
            raise StackError(
                name,
                "runs outside the supervisor (started by an earlier release): `lambdactl down`, then `lambdactl up` "
                "starts it under the supervisor",
            )

    def down(self, on_progress: Callable[[str], None] | None = None) -> dict[str, str]:
        say = on_progress or (lambda msg: log.info("%s", msg))
        with stack_lock(self.settings.state_dir, say):
            return self._down(say)

    def _down(self, say: Callable[[str], None]) -> dict[str, str]:
        timeout = self.settings.stack.stop_timeout_s
        outcome = {}
        # The platform's processes first (the supervisor must not restart them while the stores go).
        running = {
            n for n, i in self.supervisord.all_info().items() if i["statename"] in ("RUNNING", "STARTING", "BACKOFF")
        }
        stores = self.store_names  # stopped once what uses them is
        asked = [s.name for s in self.services if s.name in running]
        with self.supervisord.lock():
            if self.whole_stack:
                if self.supervisord.shutdown(last=stores):
                    say("supervisor: stopped, and every process it ran")
            else:  # also when none of them ran (given up, say): a supervisor left with nothing to run goes
                if asked:
                    self.supervisord.stop_at_once(last=stores, only=asked)
                if self._nothing_supervised() and self.supervisord.shutdown():
                    say("supervisor: stopped (no other process of the stack runs)")
        for name in asked:
            outcome[name] = "stopped"
        if self.whole_stack:  # what a supervisor that died left running, the stores after the others
            left = self.supervisor.orphan_programs()
            ended = self.supervisor.end_orphans(timeout, last=self.store_names)
            if ended:
                say(f"stopped {ended} process(es) a supervisor that is gone had left running")
                outcome.update({s.name: "stopped" for s in self.services if s.name in left})
        members = list(self.services)
        if self.whole_stack:  # a Spark cluster started under other settings goes too, and a store an
            # earlier `up` started before it was taken out of stack.managed_services (its pid file says)
            members = list(dict.fromkeys([*members, svc.SPARK_MASTER, *svc.SPARK_WORKERS, *svc.ALL]))
        with ThreadPoolExecutor(max_workers=max(1, len(members))) as pool:
            # Platform processes started before the supervisor still have pid files of their own.
            stopped = dict(
                zip(
                    [s.name for s in members],
                    pool.map(
                        lambda s: (
                            self.supervisor.pid_file(s.name).exists()
                            and ProcessSupervisor.stop(self.supervisor, s.name, timeout)
                        ),
                        members,
                    ),
                )
            )
        for name, ran in stopped.items():
            if ran:
                outcome[name] = "stopped"
            elif name not in (s.name for s in self.services):
                continue
            outcome.setdefault(name, "was not running")
            if outcome[name] == "stopped":
                say(f"{name}: stopped")
        if self.whole_stack:
            killed = self.supervisor.end_orphans(timeout, last=self.store_names)
            if killed:
                say(f"ended {killed} orphaned process(es) of this state dir")
        return outcome

    def _nothing_supervised(self) -> bool:
        """supervisord answers, runs no program, and has no restart pending for one."""
        info = self.supervisord.all_info()
        if not info or any(i["statename"] in ("RUNNING", "STARTING", "BACKOFF", "STOPPING") for i in info.values()):
            return False
        known = read_status(self.settings.state_dir)["processes"]
        return not any(known.get(name, {}).get("next_restart_at") for name in info)

    # --- status ------------------------------------------------------------------------------

    def status(self, probe: bool = True) -> list[ServiceStatus]:
        result = []
        restarts = restart_report(self.settings) if self.programs else {}
        supervisor_runs = self.supervisord.running() if self.programs else False
        supervisor_answers = self.supervisord.answering() if supervisor_runs else False
        for service in self.services:
            proc = self.supervisor.process(service.name)
            unsupervised = proc is None and (proc := self.supervisor.left_running(service.name)) is not None
            row = restarts.get(service.name, {}) if self.supervisor.supervised(service.name) else {}
            count, why = (
                row.get("restarts_total", 0),
                (row.get("summary", "") if row.get("restarts_total") or row.get("gave_up") else ""),
            )
            if proc is None:
                if not self.supervisor.supervised(service.name):
                    detail = "not running"
                elif not supervisor_runs:  # a restart it had planned will not come: no stale "restarting in"
                    last, why = row.get("last_reason"), why if row.get("gave_up") else ""
                    detail = "not running (nor is the supervisor: run `lambdactl up`)" + (
                        f"; last exit: {last}" if last else ""
                    )
                elif not supervisor_answers:
                    detail = "unknown: supervisord runs but does not answer (its programs may run on)"
                    why = why if row.get("gave_up") else ""
                else:
                    detail = why or "not running"
                result.append(ServiceStatus(service.name, False, None, 0.0, False, detail, 0.0, count, why))
                continue
            healthy, detail = False, ""
            if probe:
                try:
                    detail = service.check(self.settings)
                    healthy = True
                except Exception as exc:  # report, never raise, from status
                    detail = str(exc) if str(exc).startswith("stuck: ") else f"unhealthy: {type(exc).__name__}: {exc}"
            if unsupervised:
                detail = (
                    f"running without the supervisor (it was killed): nothing restarts it if it exits; "
                    f"`lambdactl up` replaces it ({detail})"
                )
            rss = (_tree_rss(proc) if unsupervised else self.supervisor.rss_bytes(service.name)) / 2**20
            result.append(
                ServiceStatus(
                    service.name, True, proc.pid, rss, healthy, detail, time.time() - proc.create_time(), count, why
                )
            )
        if any(self.supervisor.supervised(s.name) for s in self.services):
            result.append(self._supervisor_status())
        return result

    def _supervisor_status(self) -> ServiceStatus:
        proc = ProcessSupervisor.process(self.supervisor, SUPERVISOR)
        budget = Budget.from_settings(self.settings)
        if proc is None:
            return ServiceStatus(
                SUPERVISOR,
                False,
                None,
                0.0,
                False,
                "not running: nothing restarts a process of the stack that exits (run `lambdactl up`)",
            )
        answers = self.supervisord.answering()
        listener = self.supervisord.listener_state() if answers else "UNKNOWN"
        detail = (
            "supervisord does not answer"
            if not answers
            else f"supervisord runs, but its restart listener is {listener}: nothing restarts a process "
            "that exits (see logs/restarts.log; `lambdactl up` starts it again)"
            if listener not in ("RUNNING", "STARTING")  # BACKOFF: it exited; UNKNOWN: supervisord has no such program
            else f"supervisord restarts the stack's processes, {budget.describe()}, backoff "
            f"{budget.backoff_s:.0f}s doubling to {budget.backoff_max_s:.0f}s"
        )
        answers = answers and listener in ("RUNNING", "STARTING")
        try:
            rss = proc.memory_info().rss / 2**20
        except psutil.Error:
            rss = 0.0
        return ServiceStatus(SUPERVISOR, True, proc.pid, rss, answers, detail, time.time() - proc.create_time())
