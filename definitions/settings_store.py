"""The persisted settings: what the platform's data was written with, kept in the state directory.

`lambdactl up` writes `<state_dir>/settings.json`: every setting given explicitly (environment,
TOML file) plus the settings that shape stored data (ingest bucket, de-duplication window, view
modules), whatever their source. Every later command and every process the platform starts loads
that file by absolute path (`get_settings`), so a plain shell, a restarted job and an Airflow task
all see the same settings. An explicit setting that contradicts a data-shaping one is refused:
its data would be read with the wrong layout. See docs/operations.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic_settings import EnvSettingsSource, TomlConfigSettingsSource

from definitions.files import write_private
from definitions.service_settings import not_module_names
from definitions.settings import Settings, config_path

FILE_NAME = "settings.json"
MAX_FILE_BYTES = 1 << 20  # the persisted settings are a few kilobytes; a larger file is no platform's
# Settings the stored data depends on: changing one needs the steps in docs/operations.md.
DATA_SHAPING = (
    "ingest_bucket_s",
    "speed.dedupe_window_s",
    "views.modules",
    # What validation accepts (definitions.events): the archiver and the speed layer each judge a
    # record once, when they read it; judged under other limits, it counts in one layer only.
    *(
        f"events.{name}"
        for name in (
            "max_record_bytes",
            "max_nesting_depth",
            "max_url_chars",
            "max_referrer_chars",
            "max_user_id_chars",
            "max_event_id_chars",
            "min_event_time_s",
            "max_future_s",
        )
    ),
)


class SettingsConflict(ValueError):
    """An explicit setting contradicts the persisted one the platform's data was written with."""


def persisted_path(settings: Settings) -> Path:
    return settings.state_dir / FILE_NAME


def _plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def explicit_values(settings: Settings) -> dict[str, Any]:
    """The settings given explicitly (environment, TOML file, keyword arguments), nested."""
    out = _plain(settings.model_dump(exclude_unset=True))
    out["state_dir"] = str(settings.state_dir)  # always persisted, as an absolute path (it locates the file)
    if "jars_dir" in out:  # as an absolute path; unset, the persisted one stays in force
        out["jars_dir"] = str(settings.jars_dir)
    return out


def _section(model: type[BaseModel] | None, key: str) -> type[BaseModel] | None:
    """The settings section `model`'s field `key` holds, or None (a value, a map, no such field)."""
    field = model.model_fields.get(key) if model is not None else None
    kind = field.annotation if field is not None else None
    return kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None


def _key_parts(dotted: str) -> list[str]:
    """A dotted setting name as the keys of the nested document: past a map setting (`spark.conf`,
    `cassandra.replication`) the rest is one entry's key, which may hold dots itself."""
    parts = dotted.split(".")
    model: type[BaseModel] | None = Settings
    for i, part in enumerate(parts[:-1]):
        known = model is not None and part in model.model_fields
        model = _section(model, part)
        if known and model is None:  # a value or a map: the rest names one of its entries
            return [*parts[: i + 1], ".".join(parts[i + 1 :])]
    return parts


def _get(doc: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = doc
    for part in _key_parts(dotted):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _set(doc: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = _key_parts(dotted)
    node = doc
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


def _merge(
    base: Mapping[str, Any], over: Mapping[str, Any], model: type[BaseModel] | None = Settings
) -> dict[str, Any]:
    """`over` on `base`, section by section; a value, and a map setting whole (the entries it no
    longer gives are gone: a data centre renamed, a Spark option taken out)."""
    out = dict(base)
    for key, value in over.items():
        section = _section(model, key)
        both = section is not None and isinstance(value, Mapping) and isinstance(out.get(key), Mapping)
        out[key] = _merge(out[key], value, section) if both else value
    return out


def read_persisted(path: Path) -> dict[str, Any] | None:
    if not path.exists() and not path.is_symlink():
        return None
    if not path.is_file():  # a directory, a FIFO (reading it would hang), a dangling link
        raise SettingsConflict(f"the persisted settings {path} are not a regular file; fix or remove it")
    _check_owned(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise SettingsConflict(f"the persisted settings {path} cannot be read ({type(exc).__name__}: {exc})") from None
    if size > MAX_FILE_BYTES:
        raise SettingsConflict(
            f"the persisted settings {path} are larger than {MAX_FILE_BYTES} bytes ({size}): no platform wrote "
            "them; fix or remove the file"
        )
    try:
        doc = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_unique_keys)
    except (OSError, ValueError, RecursionError) as exc:  # unreadable, not UTF-8 or JSON, nested too deep
        raise SettingsConflict(
            f"the persisted settings {path} are not readable JSON ({type(exc).__name__}: {exc}); fix or remove the file"
        ) from None
    if not isinstance(doc, dict):
        raise SettingsConflict(f"the persisted settings {path} do not hold a JSON object; fix or remove the file")
    return doc


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique: of two values for a setting, neither is taken silently."""
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise ValueError(f"the key {twice[:100]!r} is given twice")
    return doc


def _check_owned(path: Path) -> None:
    """The persisted settings name the modules every process imports (views.modules) and the Java it
    runs: a file another user can change, or another user's, is refused, naming what is wrong."""
    from definitions.files import open_to_others

    problem = open_to_others(path)
    if problem:
        raise SettingsConflict(f"{problem}: the settings are not read from it")


def conflicts(persisted: Mapping[str, Any], given: Mapping[str, Any]) -> list[str]:
    out = []
    for key in DATA_SHAPING:
        had, old = _get(persisted, key)
        says, new = _get(given, key)
        if had and says and old != new:
            out.append(f"{key} is {json.dumps(old)} in the persisted settings, this command says {json.dumps(new)}")
    return out


def load() -> Settings:
    """The effective settings: defaults < persisted file < TOML file and environment.
    SettingsConflict when an explicit setting contradicts a data-shaping persisted one."""
    from definitions.files import UntrustedStateDir, refuse_untrusted_state_dir

    explicit = Settings()
    if explicit.state_dir.exists():
        try:
            refuse_untrusted_state_dir(explicit.state_dir)
        except UntrustedStateDir as exc:
            raise SettingsConflict(str(exc)) from None
    path = persisted_path(explicit)
    persisted = read_persisted(path)
    if persisted is None:
        return explicit
    given = explicit_values(explicit)
    stale = persisted.get("jars_dir")
    if "jars_dir" not in given and isinstance(stale, str) and not Path(stale).is_dir():
        # Persisted by an earlier release with every command's default: the checkout has moved since.
        persisted = {k: v for k, v in persisted.items() if k != "jars_dir"}
    found = conflicts(persisted, given)
    if found:
        raise SettingsConflict(
            f"refusing to run: {'; '.join(found)} ({path}). The platform's data was written with the persisted "
            "value: leave the setting out (or set it to that value) to use it; to change it, follow "
            "'Changing a data-shaping setting' in docs/operations.md."
        )
    try:  # the given values are valid on their own (`explicit`), not necessarily with the file's
        settings = Settings(**_merge(persisted, given))
    except ValidationError as exc:
        raise SettingsConflict(
            f"the persisted settings {path}, with the ones given here, are refused; fix the value named below in "
            f"that file, or where it was given: {exc}"
        ) from None
    settings._given = given
    return settings


def persist(settings: Settings) -> Path:
    """Write the persisted settings: the values this process was given explicitly over the earlier
    persisted ones, plus the data-shaping values in force where the file has none (where it has
    one, it wins: `views apply` may have changed `views.modules` since this process loaded it).
    Read, changed and written under `settings.lock`, so writers at once lose none of each other's
    values; created with owner-only permissions: the file may hold secrets. SettingsConflict when
    the file has a data-shaping value this process was given another of (persisted since it loaded)."""
    path = persisted_path(settings)
    given = settings._given if settings._given is not None else explicit_values(settings)
    with _settings_lock(settings):
        persisted = read_persisted(path) or {}
        found = conflicts(persisted, given)
        if found:  # another command persisted its own value since this one loaded the settings
            raise SettingsConflict(
                f"refusing to persist: {'; '.join(found)} ({path}); another command persisted it since this "
                "one read the settings. Leave the setting out (or set it to that value), or follow 'Changing "
                "a data-shaping setting' in docs/operations.md."
            )
        doc = _merge(persisted, given)
        for key in DATA_SHAPING:
            had, value = _get(persisted, key)
            _set(doc, key, value if had else _plain(_get(settings.model_dump(), key)[1]))
        return _write_persisted(path, doc)


def unset(settings: Settings, key: str) -> bool:
    """Take `key` (a dotted setting name, or a whole section) out of the persisted settings, so its
    default applies again unless the environment or the TOML file gives it; False when the file did
    not hold it. Refused (SettingsConflict) for the data-shaping settings and the state and jars
    directories: the platform's data was written with them (docs/operations.md)."""
    kept = (*DATA_SHAPING, "views.paths", "state_dir", "jars_dir")  # the view modules are imported from views.paths
    if any(key == k or k.startswith(key + ".") for k in kept):
        raise SettingsConflict(
            f"{key} is not taken out of the persisted settings: the platform's data was written with it "
            "(to change it, follow 'Changing a data-shaping setting' in docs/operations.md)"
        )
    path = persisted_path(settings)
    with _settings_lock(settings):
        doc = read_persisted(path) or {}
        *parents, last = _key_parts(key)
        node: Any = doc
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or last not in node:
            return False
        valid_before = _validates(doc)
        del node[last]
        if valid_before:  # a file that did not validate is being mended: any step of that is taken
            try:
                _FileOnly(**doc)
            except ValueError as exc:
                raise SettingsConflict(
                    f"taking {key} out would leave settings that do not validate ({exc}); nothing was changed"
                ) from None
        _write_persisted(path, doc)
    return True


def _write_persisted(path: Path, doc: dict[str, Any]) -> Path:
    """Write the persisted settings; a link (settings kept elsewhere, linked into the state folder)
    stays one: its target is written, which read_persisted checked no other user can change. One
    larger than read_persisted takes is refused, naming its largest setting: every later command
    would refuse the file."""
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    size = len(text.encode("utf-8"))
    if size > MAX_FILE_BYTES:
        largest, _ = max(_leaves(doc), key=lambda leaf: len(json.dumps(leaf[1])))
        raise SettingsConflict(
            f"refusing to persist settings larger than {MAX_FILE_BYTES} bytes ({size}), most of it {largest}: "
            "no command could read them back; nothing was changed"
        )
    write_private(path.resolve() if path.is_symlink() else path, text)
    return path


def _validates(doc: dict) -> bool:
    try:
        _FileOnly(**json.loads(json.dumps(doc)))  # a copy: validation must not change the document
    except ValueError:
        return False
    return True


def write_snapshot(settings: Settings, path: Path) -> Path:
    """`settings` whole (secrets too, owner-only), for processes that must run with exactly these
    (read_snapshot): the API's worker processes, which uvicorn may start again at any time."""
    return write_private(path, json.dumps(_plain(settings.model_dump())))


class _FileOnly(Settings):
    """Settings from the values given to it alone (no environment, no TOML file)."""

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, **others):  # type: ignore[override]
        return (init_settings,)


def persisted_settings(settings: Settings) -> Settings | None:
    """What the persisted file alone says (defaults elsewhere): what the running stack was started
    with. None when there is no file or it does not validate (load() says why)."""
    try:
        doc = read_persisted(persisted_path(settings))
        return None if doc is None else _FileOnly(**doc)
    except (SettingsConflict, ValueError):
        return None


def running_longest(settings: Settings, value: Callable[[Settings], float]) -> float:
    """The larger of `value` of these settings and of the persisted ones alone, which the running
    stack's services took: for a wait a command (told another value by its environment or a TOML
    file) keeps so that what a service still does is over."""
    running = persisted_settings(settings)
    return value(settings) if running is None else max(value(settings), value(running))


def persisted_digest(settings: Settings, keys: Iterable[str] = (), ignores: Iterable[str] = ()) -> str:
    """A short digest of the persisted settings (what every process of the stack loads): of `keys`
    (dotted setting names, or whole sections), or without them of all but `views` (applied by
    `lambdactl views apply`) and the sections among `ignores`; "" when there is no file."""
    import hashlib

    doc = read_persisted(persisted_path(settings))
    if doc is None:
        return ""
    wanted = sorted(set(keys))
    left_out = {"views", *ignores}
    part = {k: _get(doc, k) for k in wanted} if wanted else {k: v for k, v in doc.items() if k not in left_out}
    return hashlib.sha256(json.dumps(part, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_snapshot(path: Path) -> Settings:
    """The settings write_snapshot wrote: every value given, none taken from elsewhere."""
    _check_owned(path)
    return Settings(**json.loads(path.read_text(encoding="utf-8")))


def _settings_lock(settings: Settings):
    from definitions.files import state_lock

    return state_lock(settings.state_dir, "settings.lock", "change of the persisted settings")


def _leaves(doc: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, name + ".")
        else:
            yield name, value


def provenance(settings: Settings) -> list[tuple[str, Any, str]]:
    """(setting, value, where it came from) for every setting in force; secrets masked."""
    env = EnvSettingsSource(Settings, env_prefix="LAMBDA_", env_nested_delimiter="__")()
    file_path = config_path()
    from_file = TomlConfigSettingsSource(Settings, toml_file=file_path)() if file_path else {}
    persisted = read_persisted(persisted_path(settings)) or {}
    rows = []
    for name, value in _leaves(json.loads(settings.model_dump_json())):
        if _get(env, name)[0]:
            source = "environment"
        elif _get(from_file, name)[0]:
            source = f"file {file_path}"
        elif _get(persisted, name)[0]:
            source = f"persisted {persisted_path(settings)}"
        else:
            source = "default"
        if value and SECRET_NAME.search(name):
            value = "**********"  # a secret in a free-form map (spark.conf "spark.authenticate.secret")
        elif isinstance(value, str):
            value = masked_inside(value)
        elif isinstance(value, list):  # hdfs.webhdfs_urls may carry a gateway's login
            value = [masked_inside(v) if isinstance(v, str) else v for v in value]
        rows.append((name, value, source))
    return rows


def masked_inside(text: str) -> str:
    """`text` with the secrets inside it masked: a JVM system property whose name says secret
    (`-Djavax.net.ssl.keyStorePassword=…`, the whole shell word however quoted, as Spark splits
    JVM options), a URL's password (`https://user:…@host`) and a query parameter whose name says
    secret (`?password=…`, `&sig=…`). Linear in the length of `text`."""

    def word(m: re.Match[str]) -> str:
        prop = _PROPERTY.fullmatch(re.sub(r"""\\"|["']""", "", m[0]))  # the word unquoted
        return f"-D{prop[1]}=**********" if prop and prop[2] and SECRET_NAME.search(prop[1]) else m[0]

    text = _WORD.sub(word, text)
    text = _URL_PASSWORD.sub(r"\1**********\2", text)
    return _QUERY_SECRET.sub(
        lambda m: f"{m[1]}=**********" if m[2] and (SECRET_NAME.search(m[1]) or m[1].lower() == "sig") else m[0], text
    )


# A shell word as Spark's splitCommandString reads one: unquoted characters, '…', "…" (with \"
# inside), an unclosed last quote running to the end.
_WORD = re.compile(r"""(?:"(?:\\.|[^"\\])*"?|'[^']*'?|[^\s"'])+""")
_PROPERTY = re.compile(r"-D([^=]+)=(.*)", re.DOTALL)
# A URL's password: up to the last @ before the path (an unencoded @ in it included).
_URL_PASSWORD = re.compile(r"(://[^\s/@:]*:)[^\s/]*(@)")
_QUERY_SECRET = re.compile(r"(?<=[?&;])([^\s=&;#?]+)=([^\s&;#]*)")


# Option names whose values are secrets: Spark's own pattern (spark.redaction.regex), and the names
# cloud stores give their keys (fs.azure.account.key.<account>, google.cloud.auth...keyfile, ...).
SECRET_NAME = re.compile(
    r"(?i)secret|password|passwd|token|access[.]?key|account[.]key|keyfile|credential"
    r"|private[._-]?key|encryption[._-]?key|api[._-]?key|executorEnv[.]"
)


def with_view_modules(settings: Settings, modules: list[str], paths: list[str] | None = None) -> Settings:
    """`settings` with `views.modules` (and `views.paths` unless None) replaced, checked but not
    persisted: `lambdactl views apply --modules` loads the views from these before it writes them."""
    bad = not_module_names(modules)
    if bad:
        raise SettingsConflict(f"views.modules: not module names: {bad}")
    folders = [Path(p) for p in paths] if paths is not None else list(settings.views.paths)
    relative = [str(p) for p in folders if not p.is_absolute() or not p.is_dir()]
    if relative:
        raise SettingsConflict(f"views.paths: not absolute paths of directories: {relative}")
    views = settings.views.model_copy(update={"modules": list(modules), "paths": folders})
    return settings.model_copy(update={"views": views})


def persist_view_modules(settings: Settings) -> Path:
    """Write `settings.views` (modules and paths) into the persisted settings: the data-shaping
    `views.modules` changes only this way, by `lambdactl views apply`, which also brings the
    running platform's data along (the speed layer, the batch views and the API)."""
    path = persisted_path(settings)
    with _settings_lock(settings):
        doc = read_persisted(path) or {}
        _set(doc, "views.modules", list(settings.views.modules))
        _set(doc, "views.paths", [str(p) for p in settings.views.paths])
        return _write_persisted(path, doc)
