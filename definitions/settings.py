"""The platform's one settings object.

Values come, highest priority first, from: keyword arguments, environment variables
(``LAMBDA_`` prefix, ``__`` between nested names, e.g. ``LAMBDA_KAFKA__PORT=19092``),
a TOML file (``$LAMBDA_CONFIG``, else ``lambda.toml`` in the working directory when present),
the settings persisted in the state directory by the first ``lambdactl up`` (see
definitions.settings_store; `get_settings` reads them), then the local defaults of each section
(definitions/*_settings.py, definitions/store_connections.py). Every local default binds to
127.0.0.1. Unknown keys are refused, so a typo fails at load instead of being ignored.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from definitions.layer_settings import (
    CASSANDRA_MAX_TTL_S,
    ArchiverSettings,
    BatchSettings,
    EventLimits,
    SpeedSettings,
)
from definitions.section import REPO_ROOT, no_truth_for_numbers
from definitions.service_settings import (
    DEFAULT_AIRFLOW_PASSWORD,
    DEFAULT_TOKEN,
    AirflowSettings,
    ApiSettings,
    ViewSettings,
)
from definitions.spark_settings import SparkSettings
from definitions.stack_settings import AIRFLOW_COMPANIONS, LoggingSettings, StackSettings
from definitions.store_connections import CassandraSettings, HBaseSettings, HdfsSettings, KafkaSettings
from definitions.store_settings import StoresSettings

# Map settings whose keys are case-sensitive names.
CASED_KEYS = ("spark.conf", "cassandra.replication")

__all__ = ["AIRFLOW_COMPANIONS", "LoggingSettings", "Settings", "StackSettings", "get_settings"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="LAMBDA_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        hide_input_in_errors=True,
        allow_inf_nan=False,
    )
    # What this process was given explicitly (environment, TOML file), when loaded over persisted
    # settings (definitions.settings_store.load): what `persist` writes back, and nothing else.
    _given: dict[str, Any] | None = PrivateAttr(default=None)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Settings:
        """A copy; the sections `update` replaces count as given explicitly (what `persist` writes)."""
        copy = super().model_copy(update=update, deep=deep)
        if update and self._given is not None:
            from definitions.settings_store import _plain

            changed = {name: getattr(copy, name) for name in update}
            plain = {name: _plain(v.model_dump() if isinstance(v, BaseModel) else v) for name, v in changed.items()}
            copy._given = {**self._given, **plain}
        return copy

    # "development" accepts the development token and Airflow password; any other value refuses to
    # start the API and Airflow with them. The Makefile (demo, tests) says "development" explicitly.
    environment: str = "production"
    # Data, logs and pid files of every local service live under this one directory.
    state_dir: Path = REPO_ROOT / ".lambda" / "state"
    # Where `make setup` puts the jars resolved by infra/maven.
    jars_dir: Path = REPO_ROOT / ".lambda" / "jars"

    @field_validator("state_dir", "jars_dir", mode="before")
    @classmethod
    def _a_folder_named(cls, value: Any) -> Any:
        """An empty value would be the current folder (a `down` from another one would not find the
        stack); `~` is expanded by a shell, not here: `~/x` would be a folder named `~`."""
        text = value if isinstance(value, str) else None
        if text is not None and not text.strip():
            raise ValueError("is empty: give a folder, or leave the setting out for its default")
        if text is not None and text.startswith("~"):
            raise ValueError(f"starts with '~', which is not expanded here: give the full path, not {text[:100]!r}")
        return value

    @field_validator("state_dir", "jars_dir")
    @classmethod
    def _no_control_characters(cls, path: Path, info: ValidationInfo) -> Path:
        """The paths are written into the stores' configuration files: a line break would add lines;
        `#` starts a comment in Cassandra's YAML (its five data directories became one, outside the
        state directory), `,` separates Kafka's log directories, `:` is no part of a Hadoop path,
        ` ;` starts a comment in supervisord's configuration, which strips quotes around values; a
        backslash is an escape in Java properties (Kafka's log.dirs), `${…}` is expanded by Hadoop
        and log4j, `%` is a logback pattern, `?` ends the file URI of Cassandra's configuration (these
        last four in the state directory only: the stores' files are there). Checked as given and
        where its symbolic links lead: what is written is the resolved path (_absolute_paths)."""
        refused = "#,:;'\"\\%$?" if info.field_name == "state_dir" else "#,:;'\""
        for text, where in ((str(path), ""), (str((Path.cwd() / path).resolve()), " where its links lead")):
            if any(ord(c) < 32 or ord(c) == 127 for c in text):
                raise ValueError(f"must not contain a line break or another control character{where}")
            odd = sorted({c for c in text if c in refused})
            if odd:
                raise ValueError(
                    f"must not contain {' or '.join(repr(c) for c in odd)}{where}: the stores' configurations split "
                    "or expand there (Java properties read a backslash as an escape, Hadoop and log4j expand ${…}, "
                    "supervisord strips quotes, logback reads % as a pattern, a file URI ends at ?)"
                )
        return path

    ingest_bucket_s: int = Field(3600, ge=1, le=366 * 86_400)

    kafka: KafkaSettings = KafkaSettings()
    hdfs: HdfsSettings = HdfsSettings()
    hbase: HBaseSettings = HBaseSettings()
    cassandra: CassandraSettings = CassandraSettings()
    spark: SparkSettings = SparkSettings()
    archiver: ArchiverSettings = ArchiverSettings()
    batch: BatchSettings = BatchSettings()
    speed: SpeedSettings = SpeedSettings()
    events: EventLimits = EventLimits()
    api: ApiSettings = ApiSettings()
    airflow: AirflowSettings = AirflowSettings()
    views: ViewSettings = ViewSettings()
    stack: StackSettings = StackSettings()
    logging: LoggingSettings = LoggingSettings()
    # Which adapter plays each store role: a built-in short name or `package.module.ClassName`.
    stores: StoresSettings = StoresSettings()

    @property
    def tick_interval_s(self) -> float:
        """How often the archiver's ticker sends a tick to each partition of `events`."""
        explicit = self.archiver.tick_interval_s
        return explicit if explicit is not None else min(60.0, max(5.0, self.ingest_bucket_s / 6))

    @property
    def realtime_ttl_s(self) -> int:
        """How long realtime rows live: speed.ttl_s, or by default three days and at least ten batch
        intervals, so many scheduled runs in a row can fail before a row could expire unabsorbed."""
        return self.speed.ttl_s if self.speed.ttl_s is not None else max(3 * 86_400, 10 * self.batch.interval_s)

    @model_validator(mode="before")
    @classmethod
    def _no_truth_for_numbers(cls, data: Any) -> Any:
        return no_truth_for_numbers(cls, data)

    @model_validator(mode="before")
    @classmethod
    def _cased_keys_given_whole(cls, data: Any) -> Any:
        """A map setting given one key per environment variable (LAMBDA_SPARK__CONF__<key>) reaches
        the settings with the key lower-cased: Spark's option names and Cassandra's data centres are
        case-sensitive, and the entry would name another option, or a data centre with no node."""
        for name in CASED_KEYS:
            prefix = f"LAMBDA_{name.replace('.', '__')}__".upper()
            for variable in os.environ:
                key = variable[len(prefix) :]
                if variable.upper().startswith(prefix) and key != key.lower():
                    raise ValueError(
                        f"{name}: {variable} would reach the settings with its key lower-cased; give the whole "
                        f"map as JSON instead: {prefix[:-2]}='{{\"{key}\": ...}}'"
                    )
        return data

    @model_validator(mode="after")
    def _realtime_rows_outlive_batches(self) -> Settings:
        floor = 2 * self.batch.interval_s + self.speed.stale_margin_s + 3_600
        if self.realtime_ttl_s < floor:
            raise ValueError(
                f"speed.ttl_s ({self.realtime_ttl_s}s) must be at least two batch intervals plus "
                f"speed.stale_margin_s plus an hour ({floor}s): realtime rows must outlive any "
                "plausible batch delay"
            )
        if self.realtime_ttl_s > CASSANDRA_MAX_TTL_S:
            raise ValueError(
                f"the realtime rows' TTL ({self.realtime_ttl_s}s, ten batch.interval_s when speed.ttl_s is unset) "
                f"must be at most {CASSANDRA_MAX_TTL_S}s (Cassandra's limit, 20 years): the speed layer could not "
                "create its tables"
            )
        if self.ingest_bucket_s > self.batch.interval_s:
            raise ValueError("ingest_bucket_s must not exceed batch.interval_s")
        if self.batch.cleanup_settle_s < self.api.pointer_cache_s + 5:
            raise ValueError(
                f"batch.cleanup_settle_s ({self.batch.cleanup_settle_s:g}s) must exceed api.pointer_cache_s "
                f"({self.api.pointer_cache_s:g}s) by 5s at least: the clean-up would delete realtime rows an "
                "answer from the previous pointer still needs"
            )
        if self.stack.stuck_after_s < 3 * self.tick_interval_s:
            raise ValueError(
                f"stack.stuck_after_s ({self.stack.stuck_after_s:g}s) must be at least three tick intervals "
                f"({self.tick_interval_s:g}s each): an idle streaming job would look stuck"
            )
        slowest = max(self.archiver.trigger_s, self.speed.trigger_s)
        if self.stack.stuck_after_s < 3 * slowest:
            raise ValueError(
                f"stack.stuck_after_s ({self.stack.stuck_after_s:g}s) must be at least three triggers of the "
                f"streaming jobs ({slowest:g}s): a job finishing a micro-batch per trigger would look stuck"
            )
        return self

    @model_validator(mode="after")
    def _hdfs_paths_apart(self) -> Settings:
        """Each job's HDFS paths are its own: a checkpoint inside another's (or the master dataset)
        would be read as that job's state."""
        paths = {
            "archiver.master_path": self.archiver.master_path,
            "archiver.completeness_path": self.archiver.completeness_path,
            "archiver.checkpoint_dir": self.archiver.checkpoint_dir,
            "speed.checkpoint_dir": self.speed.checkpoint_dir,
            "stack.progress_dir": self.stack.progress_dir,
            # Report retention deletes any file there named like a report: none of the others'.
            "batch.reports_path": self.batch.reports_path,
        }
        named = [(p.rstrip("/") or "/", name) for name, p in paths.items()]
        for path, name in named:
            for other, other_name in named:
                if other_name != name and (other == path or other.startswith(path.rstrip("/") + "/")):
                    raise ValueError(f"{other_name} ({other}) must not be {name} ({path}) or inside it")
        return self

    @model_validator(mode="after")
    def _absolute_paths(self) -> Settings:
        """One spelling per folder, whatever the command was given: relative to where it runs, `..`
        and symbolic links resolved. The stack tags its processes with the state folder's path and
        finds them again by it, as text (infra/process.py)."""
        for name in ("state_dir", "jars_dir"):
            object.__setattr__(self, name, (Path.cwd() / getattr(self, name)).resolve())
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = config_path()
        if config_file is not None:
            sources.append(_TomlFile(settings_cls, toml_file=config_file))
        return tuple(sources)


class SettingsFileError(ValueError):
    """The TOML settings file is missing, unreadable or not TOML: the message names the file."""


class _TomlFile(TomlConfigSettingsSource):
    """The TOML settings file; an error reading it names the file (tomllib's does not)."""

    def _read_file(self, file_path: Path) -> dict[str, Any]:
        try:
            doc = super()._read_file(file_path)
            readable_by_all = readable_by_every_user(file_path)
        except (OSError, ValueError, RecursionError) as exc:  # TOMLDecodeError, UnicodeDecodeError: ValueErrors
            raise SettingsFileError(f"the settings file {file_path} is not readable TOML: {exc}") from None
        secrets = secret_settings(doc) if readable_by_all else []
        if secrets:
            raise SettingsFileError(
                f"the settings file {file_path} is not read: every user can read it, and it holds "
                f"{', '.join(secrets)}; `chmod o-r {file_path}`, or give them in the environment (LAMBDA_…)"
            )
        return doc


def readable_by_every_user(path: Path) -> bool:
    """Whether any user can read `path`: it is readable by others, and so is every folder above it
    (a file in a folder only its owner enters is not)."""
    path = path.resolve()
    if not path.stat().st_mode & stat.S_IROTH:
        return False
    return all(folder.stat().st_mode & stat.S_IXOTH for folder in path.parents)


def secret_settings(doc: dict[str, Any]) -> list[str]:
    """The secrets (tokens, passwords, the database URL, Spark options Spark itself hides) a settings
    document gives, by name."""
    from definitions.spark_settings import REDACTION

    hidden = re.compile(REDACTION["spark.redaction.regex"])
    spark_conf = (doc.get("spark") or {}).get("conf") if isinstance(doc.get("spark"), dict) else None
    found = (
        [f"spark.conf.{k}" for k in spark_conf or {} if hidden.search(str(k))] if isinstance(spark_conf, dict) else []
    )
    for section, values in doc.items():
        field = Settings.model_fields.get(section)
        model = field.annotation if field is not None else None
        if not isinstance(values, dict) or not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue
        for key in values:
            inner = model.model_fields.get(key)
            if inner is not None and inner.annotation is SecretStr:
                found.append(f"{section}.{key}")
    return found


def default_secrets(settings: Settings) -> list[str]:
    """The settings still holding their development defaults: refused outside development."""
    found = []
    if settings.api.token.get_secret_value() == DEFAULT_TOKEN:
        found.append("api.token (LAMBDA_API__TOKEN)")
    if settings.api.admin_token.get_secret_value() == DEFAULT_TOKEN:
        found.append("api.admin_token (LAMBDA_API__ADMIN_TOKEN)")
    if settings.airflow.admin_password.get_secret_value() == DEFAULT_AIRFLOW_PASSWORD:
        found.append("airflow.admin_password (LAMBDA_AIRFLOW__ADMIN_PASSWORD)")
    return found


# Airflow's login (its simple auth manager) is a password with no lock-out: outside development one
# of fewer characters is refused.
MIN_PASSWORD_CHARS = 12


def weak_password(settings: Settings) -> str | None:
    """Why `airflow.admin_password` is too weak to start Airflow with, or None (never the password)."""
    if settings.environment == "development":
        return None
    length = len(settings.airflow.admin_password.get_secret_value())
    if length >= MIN_PASSWORD_CHARS:
        return None
    return (
        f"airflow.admin_password (LAMBDA_AIRFLOW__ADMIN_PASSWORD) is too short: at least {MIN_PASSWORD_CHARS} "
        "characters outside development"
    )


def copies_beyond_one(settings: Settings, services: Iterable[str]) -> str | None:
    """Why the copies asked of a store the stack runs itself (one broker, one node) cannot be held, or
    None: a topic with 3 copies was never created, and every write of a keyspace with 3 copies failed
    as Unavailable (the speed layer restarting until the supervisor gave up)."""
    running = set(services)
    if "kafka" in running and settings.kafka.replication_factor > 1:
        return (
            f"kafka.replication_factor ({settings.kafka.replication_factor}) must be 1 while the stack runs Kafka "
            "itself (its one broker holds one copy): set it to 1, or take kafka out of stack.managed_services"
        )
    c = settings.cassandra
    copies = max(c.replication.values(), default=c.replication_factor)
    if "cassandra" in running and copies > 1:
        name = "cassandra.replication" if c.replication else "cassandra.replication_factor"
        return (
            f"{name} ({copies} copies) must be 1 while the stack runs Cassandra itself (its one node holds one "
            "copy): set it to 1, or take cassandra out of stack.managed_services"
        )
    return None


def config_path() -> Path | None:
    """The TOML settings file in force, or None."""
    explicit = os.environ.get("LAMBDA_CONFIG")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise SettingsFileError(f"LAMBDA_CONFIG names {path}, which is not a file")
    else:
        path = Path.cwd() / "lambda.toml"
        if not path.is_file():
            return None
    from definitions.files import open_to_others

    # It names the Java and the view modules every process runs, and `up` persists what it says.
    problem = open_to_others(path)
    if problem:
        raise SettingsFileError(f"the settings file {path} is not read: {problem}")
    return path


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, loaded once: the persisted settings of the state directory (written
    by the first `lambdactl up`) under the explicit ones (definitions.settings_store)."""
    from definitions.settings_store import load

    return load()


def process_settings(process: str) -> Settings:
    """get_settings for a process's entry point: settings it cannot load end it at once (exit 2)
    with one line naming what is wrong, not a traceback at every restart (logging is not set up yet:
    the line goes to stderr, which the supervisor writes to the process's log)."""
    from definitions.settings_store import SettingsConflict

    try:
        return get_settings()
    except (SettingsConflict, ValueError, OSError, RecursionError) as exc:
        print(f"{process}: refusing to start: the settings cannot be loaded: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
