"""Bring the local stack up, report on it, take it down.

`up` is idempotent: a service whose process is alive and healthy is left alone. Services are
launched together and waited for concurrently, each against its own deadline; a service that
dies or stays unhealthy is reported by name, with the reason and the tail of its log.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from definitions.settings import Settings
from infra import services as svc
from infra.errors import StackError
from infra.java import JavaRuntime, find_java
from infra.process import ProcessSupervisor, port_owner

log = logging.getLogger(__name__)

# What a dying service's log says, and what to tell a person about it.
_DIAGNOSES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"Address already in use|BindException|Failed to bind|port is already in use", re.I), "a port it needs is already in use"),
    (re.compile(r"OutOfMemoryError|Cannot allocate memory|insufficient memory", re.I), "out of memory: raise its heap in settings or free memory"),
    (re.compile(r"ConfigurationException|Invalid yaml|Invalid configuration|ConfigException|IllegalArgumentException: .*conf", re.I), "bad configuration"),
    (re.compile(r"ClassNotFoundException|NoClassDefFoundError|Could not find or load main class", re.I), "missing classes: run `make setup` to resolve the jars"),
    (re.compile(r"UnsupportedClassVersionError|Unsupported major.minor", re.I), "wrong Java version"),
    (re.compile(r"InconsistentFSStateException|Incompatible clusterIDs|Invalid cluster.id", re.I), "stored data does not match this cluster: remove the service's data dir in the state dir"),
]


@dataclass
class ServiceStatus:
    name: str
    running: bool
    pid: int | None
    rss_mb: float
    healthy: bool
    detail: str
    uptime_s: float = 0.0


class Stack:
    def __init__(self, settings: Settings, names: Iterable[str] | None = None) -> None:
        self.settings = settings
        wanted = list(names) if names is not None else list(settings.stack.managed_services)
        unknown = [n for n in wanted if n not in svc.BY_NAME]
        if unknown:
            raise StackError(", ".join(unknown), f"unknown service; known: {', '.join(svc.BY_NAME)}")
        self.services = [s for s in svc.ALL if s.name in wanted]
        self.whole_stack = names is None
        # Seconds each service took to become healthy in the last `up` (started services only).
        self.ready_after: dict[str, float] = {}
        self.supervisor = ProcessSupervisor(settings.state_dir)

    # --- up ----------------------------------------------------------------------------------

    def up(self, on_progress: Callable[[str], None] | None = None) -> dict[str, str]:
        """Start what is not running, wait until every service is healthy; what each did.

        The stores come up first; on the whole stack they are then bootstrapped (topics, tables,
        keyspace) before the platform's own processes start.
        """
        from definitions.settings_store import persist

        say = on_progress or (lambda msg: log.info("%s", msg))
        self.settings.state_dir.mkdir(parents=True, exist_ok=True)
        say(f"settings persisted in {persist(self.settings)}: every process of the stack loads them")
        outcome: dict[str, str] = {}
        self._up_phase([s for s in self.services if s.phase == 0], outcome, say)
        if self.whole_stack:
            from infra.bootstrap import bootstrap

            bootstrap(self.settings)
        platform = [s for s in self.services if s.phase > 0]
        if platform:
            self._up_phase(platform, outcome, say)
        return outcome

    def _up_phase(self, members: list, outcome: dict[str, str], say: Callable[[str], None]) -> None:
        to_start = []
        for service in members:
            if self.supervisor.process(service.name) is not None:
                outcome[service.name] = "already running"
            else:
                to_start.append(service)
        if to_start:
            java = find_java(self.settings.stack.java_home)
            for service in to_start:
                self._preflight(service)
            for service in to_start:
                self._launch(service, java)
                outcome[service.name] = "started"
                say(f"{service.name}: started (pid {self.supervisor.record(service.name).pid})")
        with ThreadPoolExecutor(max_workers=max(1, len(members))) as pool:
            futures = {s.name: pool.submit(self._await_healthy, s) for s in members}
            errors = []
            for name, future in futures.items():
                try:
                    detail, waited = future.result()
                    if outcome[name] == "started":
                        self.ready_after[name] = waited
                        say(f"{name}: healthy after {waited:.0f}s ({detail})")
                except StackError as exc:
                    errors.append(exc)
        if errors:
            raise errors[0] if len(errors) == 1 else StackError(
                ", ".join(e.service for e in errors), "\n\n".join(str(e) for e in errors))

    def _preflight(self, service: svc.Service) -> None:
        service.check_jars(self.settings)
        host = service.host(self.settings)
        for label, port in service.ports(self.settings).items():
            owner = port_owner(host, port)
            if owner is not None:
                raise StackError(service.name, f"cannot start: port {port} ({label}) on {host} is already in use by {owner}")

    def _launch(self, service: svc.Service, java: JavaRuntime) -> None:
        # The stack's processes load the persisted settings of this state directory and nothing
        # else: no LAMBDA_* variable of the shell that ran `up` reaches them (settings_store).
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAMBDA_")}
        env.update(JAVA_HOME=str(java.home), LAMBDA_STATE_DIR=str(self.settings.state_dir))
        self.supervisor.start(service.name, self.prepare(service, java), cwd=service.dirs(self.settings).root, env=env)

    def prepare(self, service: svc.Service, java: JavaRuntime) -> list[str]:
        """Render the service's configuration (and format its storage once); its command line."""
        dirs = service.dirs(self.settings)
        dirs.conf.mkdir(parents=True, exist_ok=True)
        service.render(self.settings, dirs, java)
        return service.command(self.settings, java)

    def _await_healthy(self, service: svc.Service) -> tuple[str, float]:
        """Poll the service's probe until it answers; (what answered, seconds waited)."""
        started = time.monotonic()
        deadline = started + service.timeout_s(self.settings)
        last_error = "no answer yet"
        while True:
            if self.supervisor.process(service.name) is None:
                code = self.supervisor.exit_code(service.name)
                raise self._failure(service, f"exited{'' if code is None else f' with code {code}'} before becoming healthy")
            try:
                return service.check(self.settings), time.monotonic() - started
            except Exception as exc:  # a probe may fail in any client-specific way while starting
                last_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() > deadline:
                raise self._failure(service, f"not healthy within {service.timeout_s(self.settings):.0f}s (last probe: {last_error})")
            time.sleep(1.0)

    def _failure(self, service: svc.Service, what: str) -> StackError:
        tail = self.supervisor.tail(service.name, 40)
        causes = [msg for pattern, msg in _DIAGNOSES if pattern.search(tail)]
        reason = what + (f"; likely cause: {causes[0]}" if causes else "")
        return StackError(service.name, f"{reason} (log: {self.supervisor.log_file(service.name)})", tail)

    # --- down --------------------------------------------------------------------------------

    def down(self, on_progress: Callable[[str], None] | None = None) -> dict[str, str]:
        say = on_progress or (lambda msg: log.info("%s", msg))
        timeout = self.settings.stack.stop_timeout_s
        with ThreadPoolExecutor(max_workers=max(1, len(self.services))) as pool:
            stopped = dict(zip([s.name for s in self.services],
                               pool.map(lambda s: self.supervisor.stop(s.name, timeout), self.services)))
        outcome = {}
        for name, ran in stopped.items():
            outcome[name] = "stopped" if ran else "was not running"
            if ran:
                say(f"{name}: stopped")
        if self.whole_stack:
            killed = self.supervisor.kill_orphans()
            if killed:
                say(f"killed {killed} orphaned process(es) of this state dir")
        return outcome

    # --- status ------------------------------------------------------------------------------

    def status(self, probe: bool = True) -> list[ServiceStatus]:
        result = []
        for service in self.services:
            proc = self.supervisor.process(service.name)
            if proc is None:
                result.append(ServiceStatus(service.name, False, None, 0.0, False, "not running"))
                continue
            healthy, detail = False, ""
            if probe:
                try:
                    detail = service.check(self.settings)
                    healthy = True
                except Exception as exc:  # report, never raise, from status
                    detail = f"unhealthy: {type(exc).__name__}: {exc}"
            rss = self.supervisor.rss_bytes(service.name) / 2**20
            result.append(ServiceStatus(service.name, True, proc.pid, rss, healthy, detail, time.time() - proc.create_time()))
        return result
