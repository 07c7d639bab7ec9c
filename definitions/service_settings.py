"""The settings of the services beside the layers (sections `api`, `airflow` and `views` of
definitions.settings.Settings)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator

from definitions.section import ANY_ADDRESS, REPO_ROOT, AbsoluteDir, ListenHost, Port, PublicUrl, printable
from definitions.section import Section as _Section
from definitions.store_connections import LOCAL_HOST

DEFAULT_TOKEN = "dev-token-change-me"
MIN_TOKEN_CHARS = 16
BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750's b64token
DEFAULT_AIRFLOW_PASSWORD = "admin"


class ApiSettings(_Section):
    host: ListenHost = LOCAL_HOST
    port: Port = 8000
    # Where a browser reaches the API (the Airflow UI's report links): behind a proxy, or from
    # outside a container whose host name only other containers know; empty: host and port.
    public_url: PublicUrl = ""
    # Bearer token for POST /api/v1/events and admin routes. The service refuses to start with
    # the default outside development.
    token: SecretStr = SecretStr(DEFAULT_TOKEN)
    # Bearer token for the admin routes (trigger a recomputation, reload the views) only, so that
    # event producers cannot; empty: the admin routes take `token` too.
    admin_token: SecretStr = SecretStr("")
    cors_origins: list[str] = []
    # Host names (or addresses) a request's Host header may name; "*": any. Empty: this machine's
    # loopback names, `host` and `public_url`'s host, or any when `host` is every address
    # (0.0.0.0). A web page whose name its owner points at 127.0.0.1 (DNS rebinding) reads nothing.
    allowed_hosts: list[Annotated[str, Field(pattern=r"^(\*|[A-Za-z0-9._:%\[\]-]{1,253})$")]] = Field(
        [], max_length=100
    )
    max_buckets: int = Field(2_000, ge=1, le=1_000_000)

    @field_validator("token", "admin_token")
    @classmethod
    def _token_is_a_bearer_token(cls, token: SecretStr, info: ValidationInfo) -> SecretStr:
        """An empty token would let a request without credentials through; one a client cannot send
        in an Authorization header would lock every client out."""
        value = token.get_secret_value()
        if info.field_name == "admin_token" and not value:
            return token
        if len(value) < MIN_TOKEN_CHARS or not BEARER_TOKEN.fullmatch(value):
            raise ValueError(
                f"api.{info.field_name} must be at least {MIN_TOKEN_CHARS} characters of A-Z a-z 0-9 - . _ ~ + / "
                "(then = signs), as a bearer token is; make one with "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        if info.field_name == "admin_token" and value == info.data.get("token", SecretStr("")).get_secret_value():
            raise ValueError("api.admin_token must differ from api.token (leave it empty to use api.token)")
        return token

    def admin_secret(self) -> str:
        """The token the admin routes take."""
        return self.admin_token.get_secret_value() or self.token.get_secret_value()

    def host_names(self) -> frozenset[str] | None:
        """The host names (lower case, an IPv6 address without brackets) a request's Host header may
        name (allowed_hosts); None: any."""
        if "*" in self.allowed_hosts:
            return None
        if not self.allowed_hosts and self.host in ANY_ADDRESS:
            return None
        public = urlsplit(self.public_url).hostname if self.public_url else None
        # `host` itself too, every address included: the platform's own clients (lambdactl, the
        # health probes) ask http://<api.host>:<api.port>; no web page can name it for another site.
        named = [*self.allowed_hosts, self.host, *([public] if public else [])]
        return frozenset({"localhost", "127.0.0.1", "::1", *(n.strip("[]").lower() for n in named)})

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts_without_ports(cls, hosts: list[str]) -> list[str]:
        for host in hosts:
            if host.count(":") == 1:  # an IPv6 address has more
                raise ValueError(
                    f"api.allowed_hosts: give {host!r} without its port (a Host header's port is not compared)"
                )
        return hosts

    max_events_per_request: int = Field(1_000, ge=1, le=1_000_000)
    # Bytes of a request body; larger bodies are answered 413 before they are read.
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1_024, le=2**30)
    # Bytes of request bodies one worker process holds at once (read, until answered); a body that
    # finds no room is answered 429 at once. At least one body of max_body_bytes; unset: 64 MiB, or
    # one such body if larger.
    max_bodies_mib: int | None = Field(None, ge=1, le=65_536)
    # Queries may ask about event times from this instant (epoch seconds; 2000-01-01T00:00:00Z) …
    earliest_query_time_s: int = Field(946_684_800, ge=0, le=253_402_300_799)
    # … up to this far ahead of now.
    max_query_ahead_s: int = Field(7 * 86_400, ge=0, le=100 * 366 * 86_400)  # now + this: a year before 9999
    # View queries served at once; a query waits up to `query_queue_s` for a slot, then gets 429.
    max_concurrent_queries: int = Field(8, ge=1, le=1_024)
    query_queue_s: float = Field(2.0, ge=0, le=600)
    # View queries one client address of another host has running or waiting at once, per worker
    # process; more are answered 429 at once. Behind a reverse proxy on this host, uvicorn takes the
    # address from its X-Forwarded-For; behind one elsewhere, every client is the proxy: raise it to
    # max_concurrent_queries there.
    max_queries_per_client: int = Field(4, ge=1, le=1_024)
    hbase_pool_size: int = Field(8, ge=1, le=1_024)
    # How long a query waits for a free pooled HBase connection before HBase counts as unavailable.
    hbase_pool_wait_s: float = Field(5.0, gt=0, le=600)
    health_timeout_s: float = Field(60, gt=0, le=3_600)
    # How long a read of the pointer is reused (0: read per query). The realtime clean-up waits
    # `batch.cleanup_settle_s` after a swap, so an answer from a pointer this old stays exact.
    pointer_cache_s: float = Field(1.0, ge=0, le=10)
    # How often each API worker reads the speed layer's checkpoint marker and the replay marks again
    # (HDFS): how soon it sees a view the speed layer began maintaining, or a replay's switch. A
    # replay keeps the rows its switch replaced this + 10 s + batch.cleanup_settle_s before deleting
    # them (serving_layer.speed_state.replaced_rows_kept_s): the API and lambdactl must agree on it.
    speed_recheck_s: float = Field(60.0, ge=1, le=3_600)
    # Memory for what queries read from batch tables (they never change once served); 0: none.
    batch_cache_mib: int = Field(64, ge=0, le=65_536)
    # Memory for what queries read from the realtime store, kept until the store is written again
    # (serving_layer.speed_cache); 0: none.
    speed_cache_mib: int = Field(32, ge=0, le=65_536)
    # The most data one read of a query may hold (about what Python holds: 200 bytes a row, its key
    # twice, its sketch): a top-N reads every key its window saw (realtime rows since the cutoff; the
    # batch keys of its buckets), a series its sketches; a query beside a switched replay reads its
    # realtime rows twice. A window holding more is a 422 asking for a narrower one, not a worker's
    # memory.
    max_read_mib: int = Field(64, ge=1, le=65_536)
    # How often, at most, the API asks the realtime store whether it was written since (one small
    # read): an answer shows a realtime write at most this long after it ended.
    realtime_check_s: float = Field(0.05, ge=0.005, le=1)
    # Processes answering on the port (uvicorn's workers, sharing its socket). A view reload reaches
    # every one (api/worker_sync.py); the query slots and the caches above are per process.
    workers: int = Field(2, ge=1, le=16)

    def bodies_bytes(self) -> int:
        """The bytes of request bodies one worker holds at once (max_bodies_mib)."""
        if self.max_bodies_mib is not None:
            return self.max_bodies_mib * 2**20
        return max(64 * 2**20, self.max_body_bytes)

    @model_validator(mode="after")
    def _room_for_a_body(self) -> ApiSettings:
        if self.max_bodies_mib is not None and self.max_bodies_mib * 2**20 < self.max_body_bytes:
            raise ValueError(
                f"api.max_bodies_mib ({self.max_bodies_mib}) holds no body of api.max_body_bytes "
                f"({self.max_body_bytes}): every such body would be refused"
            )
        return self


class AirflowSettings(_Section):
    """Airflow 3, in its own virtualenv, scheduling and triggering the batch recomputation."""

    host: ListenHost = LOCAL_HOST
    port: Port = 8080
    # Where a browser reaches Airflow's UI (the run's address the recompute route answers); empty:
    # host and port.
    public_url: PublicUrl = ""
    venv: AbsoluteDir = REPO_ROOT / ".venv-airflow"
    # AIRFLOW_HOME; empty: a directory in the state dir.
    home: str = ""
    # Any SQLAlchemy URL; empty: SQLite in AIRFLOW_HOME.
    database_url: SecretStr = SecretStr("")
    # Airflow reads its users as "name:role,name:role": no comma, colon or blank in the name.
    admin_user: str = Field("admin", pattern=r"^[^,:\s]{1,256}$")
    admin_password: SecretStr = SecretStr(DEFAULT_AIRFLOW_PASSWORD)
    # Task slots of the LocalExecutor (one worker process of ~130 MB each): the DAG runs one task at a
    # time, one run at a time (max_active_runs=1).
    parallelism: int = Field(1, ge=1, le=256)
    # The id dags/lambda_batch_recompute.py declares: the API triggers and reads its runs by it.
    dag_id: Literal["lambda_batch_recompute"] = "lambda_batch_recompute"
    health_timeout_s: float = Field(300, gt=0, le=3_600)
    # The scheduler or DAG processor is alive while its last heartbeat is at most this old (Airflow's
    # scheduler threshold is given the same value). Airflow 3.1 stores a heartbeat one heartbeat (5 s)
    # late, so a heartbeat is 5-10 s old on an idle machine: at least 15.
    heartbeat_stale_s: int = Field(30, ge=15, le=3_600)
    # A new install's DAG is active: it runs every batch.interval_s. True creates it paused (the
    # Makefile's tests: no scheduled run in their way). Either way a pause set later is kept.
    paused_at_creation: bool = False
    # Task logs, DAG-processor logs and run records older than this go (`lambdactl housekeeping`,
    # daily by the lambda_housekeeping DAG).
    keep_history_days: int = Field(30, ge=1, le=3_650)

    @field_validator("home", "database_url", "admin_user")
    @classmethod
    def _not_expanded_by_airflow(cls, value: str | SecretStr, info: ValidationInfo) -> str | SecretStr:
        """Airflow expands `$NAME` and a leading `~` in every value it reads from its environment
        (AIRFLOW__…, AIRFLOW_HOME): a password with `$` in the database URL, or a home named with
        one, became another value there than here. The home is absolute: every process (the
        platform's and Airflow's, each started from its own directory) must find the same one."""
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        printable(text)
        if info.field_name == "home" and "%" in text:
            raise ValueError("must not contain %: Airflow reads % in the paths it builds on its home as interpolation")
        if "$" in text:
            hint = " (in a URL, write it percent-encoded: %24)" if info.field_name == "database_url" else ""
            raise ValueError(f"must not contain $: Airflow expands $NAME in the values it reads{hint}")
        if text.startswith("~"):
            raise ValueError("must not start with ~: Airflow expands it to a home directory")
        if info.field_name == "home" and text and not os.path.isabs(text):
            raise ValueError("must be an absolute path (empty: a directory in the state directory)")
        return value


def not_module_names(modules: list[str]) -> list[str]:
    """The entries of `modules` that are no absolute module name (a-b, .x, x..y)."""
    return [m for m in modules if not all(part.isidentifier() for part in m.split("."))]


class ViewSettings(_Section):
    # Modules that declare more views (a module-level `VIEWS` list of definitions.views.View),
    # added to the built-in ones.
    modules: list[str] = []
    # Directories searched for those modules first (absolute paths); empty: installed packages only.
    paths: list[Path] = []

    @field_validator("modules")
    @classmethod
    def _module_names(cls, modules: list[str]) -> list[str]:
        """Imported by every process at start: a name import_module cannot take ('.x' is relative,
        'a-b' no identifier) stopped `lambdactl up` with a traceback."""
        bad = not_module_names(modules)
        if bad:
            raise ValueError(f"not module names: {bad}")
        return modules

    @field_validator("paths")
    @classmethod
    def _absolute(cls, paths: list[Path]) -> list[Path]:
        """Each process runs in a folder of its own: a relative folder named other modules in each."""
        relative = [str(p) for p in paths if not p.is_absolute()]
        if relative:
            raise ValueError(f"must be absolute paths: {relative}")
        return paths
