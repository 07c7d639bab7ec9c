"""The store adapters, chosen from settings: the one way the layers build them.

Each role of the `stores` settings (definitions/store_settings.py) names its adapter by a built-in
short name or by a dotted path `package.module.ClassName`, imported when first built:

| setting | built-in (default) | built by | protocol (stores/adapters.py) |
|---|---|---|---|
| `stores.batch_views` | `hbase`: stores.batch_reader.BatchViewReader | `batch_view_reader` | BatchViewReaderAdapter |
| `stores.realtime_reader` | `cassandra`: stores.realtime.RealtimeReader | `realtime_reader` | RealtimeReaderAdapter |
| `stores.realtime_writer` | `cassandra`: stores.realtime.RealtimeWriter | `realtime_writer`, `process_realtime_writer` | RealtimeWriterAdapter |
| `stores.versions` | `hbase`: stores.batch_views.VersionStore | `version_store` | VersionStoreAdapter |

A choice that cannot be loaded raises AdapterNotFound naming the setting, its value and why.
Building an adapter may connect to its store (as the built-in realtime ones do); resolving one does not.
"""

from __future__ import annotations

import importlib
from typing import Any

from definitions.settings import Settings
from definitions.store_settings import BUILTIN_ADAPTERS, Role, is_dotted_path
from stores.adapters import (
    PROTOCOLS,
    BatchViewReaderAdapter,
    RealtimeReaderAdapter,
    RealtimeWriterAdapter,
    VersionStoreAdapter,
)

_MISSING = object()


class AdapterNotFound(ValueError):
    """The adapter a `stores.*` setting names cannot be loaded: `setting`, `value` and `reason` say which and why."""

    def __init__(self, role: Role, value: str, reason: str) -> None:
        self.setting = f"stores.{role}"
        self.value = value
        self.reason = reason
        super().__init__(f"{self.setting} = {value!r}: {reason}")


def resolve(role: Role, value: str) -> type[Any]:
    """The class `value` names for `role`: a built-in short name, or `package.module.ClassName` imported."""
    builtins = BUILTIN_ADAPTERS[role]
    if value in builtins:
        path = builtins[value]
    elif is_dotted_path(value):
        path = value
    else:
        raise AdapterNotFound(
            role,
            value,
            f"not a built-in adapter (known: {', '.join(sorted(builtins))}) nor a dotted path package.module.ClassName",
        )
    module_name, _, attribute = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        if isinstance(exc, ModuleNotFoundError) and missing and f"{module_name}.".startswith(f"{missing}."):
            raise AdapterNotFound(role, value, f"no module named {missing!r}") from exc
        # The module exists but its own imports fail (a driver not installed, say).
        raise AdapterNotFound(role, value, f"module {module_name!r} failed to import: {exc}") from exc
    except Exception as exc:  # its own code failed as it ran (a syntax error, say): not a store outage
        raise AdapterNotFound(
            role, value, f"module {module_name!r} failed as it was imported: {type(exc).__name__}: {exc}"
        ) from exc
    found = getattr(module, attribute, _MISSING)
    if found is _MISSING:
        raise AdapterNotFound(role, value, f"module {module_name!r} has no attribute {attribute!r}")
    if not isinstance(found, type):
        raise AdapterNotFound(role, value, f"{path} is a {type(found).__name__}, not a class")
    protocol = PROTOCOLS.get(role)
    lacking = [name for name in _methods(protocol) if not callable(getattr(found, name, None))] if protocol else []
    if lacking:
        raise AdapterNotFound(
            role, value, f"{path} lacks {', '.join(lacking)} of the {role} interface (stores/adapters.py)"
        )
    return found


def _methods(protocol: type) -> list[str]:
    """The public methods a role's protocol (stores/adapters.py) declares."""
    return sorted(name for name, member in vars(protocol).items() if not name.startswith("_") and callable(member))


def adapter_class(settings: Settings, role: Role) -> type[Any]:
    """The class the settings choose for `role` (AdapterNotFound when it cannot be loaded)."""
    return resolve(role, getattr(settings.stores, role))


def batch_view_reader(settings: Settings, pool_size: int, wait_s: float) -> BatchViewReaderAdapter:
    """The serving layer's reader of batch views and the pointer (`stores.batch_views`), holding up to
    `pool_size` connections and waiting up to `wait_s` for a free one."""
    return adapter_class(settings, "batch_views")(settings, pool_size, wait_s)


def realtime_reader(settings: Settings, timeout_s: float = 10.0) -> RealtimeReaderAdapter:
    """A reader of the realtime views for the merge (`stores.realtime_reader`), with its own
    connection (closed by its close()) whose requests time out after `timeout_s`."""
    return adapter_class(settings, "realtime_reader")(settings, timeout_s=timeout_s)


def realtime_writer(settings: Settings) -> RealtimeWriterAdapter:
    """The speed layer's writer of realtime rows (`stores.realtime_writer`)."""
    return adapter_class(settings, "realtime_writer")(settings)


def late_drops_marks(settings: Settings) -> Any | None:
    """What tells the realtime readers at once that the speed layer recorded rows it dropped as late
    (stores.realtime_writes.LateDropsMarks, moving a mark their `generation()` returns), or None for
    a store other than the built-in one: answers then learn of the drops at their next read of the
    speed layer's checkpoint marker (within a minute)."""
    if adapter_class(settings, "realtime_writer") is not resolve("realtime_writer", "cassandra"):
        return None
    from stores.realtime_writes import LateDropsMarks

    return LateDropsMarks(settings)


_PROCESS_WRITERS: dict[str, RealtimeWriterAdapter] = {}


def process_realtime_writer(settings: Settings) -> RealtimeWriterAdapter:
    """This process's realtime writer for `settings`, built at first use and kept for the process's
    life: how the speed layer's executors (Python workers reused from task to task) hold one
    connection to the store instead of one per task."""
    key = settings.model_dump_json()
    writer = _PROCESS_WRITERS.get(key)
    if writer is None:
        writer = _PROCESS_WRITERS[key] = _built_through_outages(settings)
    return writer


def _built_through_outages(settings: Settings) -> RealtimeWriterAdapter:
    """realtime_writer, tried again with backoff while its store cannot be reached, for up to
    `speed.store_outage_s` (as the writes themselves are): a brief outage delays the micro-batch
    instead of failing it. An adapter that cannot be loaded fails at once."""
    import logging
    import time

    deadline = time.monotonic() + settings.speed.store_outage_s
    attempt = 0
    while True:
        attempt += 1
        try:
            return realtime_writer(settings)
        except AdapterNotFound:
            raise
        except Exception as exc:
            if time.monotonic() >= deadline:
                raise
            logging.getLogger(__name__).warning(
                "the realtime writer cannot connect (attempt %d): %s: %s; retrying", attempt, type(exc).__name__, exc
            )
            time.sleep(min(2**attempt, 10))


def version_store(settings: Settings) -> VersionStoreAdapter:
    """The batch versions, run records and pointer (`stores.versions`)."""
    return adapter_class(settings, "versions")(settings)
