"""The versions of the declared views on a running platform (definitions.view_versions), read from
the speed layer's marker (the definitions it maintains) and the pointer (which storage name answers
a changed view)."""

from __future__ import annotations

from definitions.settings import Settings
from definitions.view_loading import load_views
from definitions.view_versions import Versions, resolve
from definitions.views import Registry
from stores.checkpoints import Marker
from stores.pointer import Pointer

_UNREAD = object()


def versions_of(declared: Registry, marker: Marker | None, pointer: Pointer | None) -> Versions:
    return resolve(
        declared,
        pointer.aliases if pointer is not None else None,
        marker.recorded() if marker is not None else None,
        marker.definitions if marker is not None else None,
    )


def read_versions(settings: Settings, declared: Registry | None = None, marker=_UNREAD, pointer=_UNREAD) -> Versions:
    """The versions of `declared` (default: the views the settings declare); the marker and the
    pointer are read unless given. Raises what reading HDFS or HBase raises."""
    from stores.checkpoints import read_marker
    from stores.registry import version_store

    if declared is None:
        declared = load_views(settings)
    if marker is _UNREAD:
        marker = read_marker(settings)
    if pointer is _UNREAD:
        pointer = version_store(settings).pointer()
    return versions_of(declared, marker, pointer)
