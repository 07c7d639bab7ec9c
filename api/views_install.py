"""The view routes of a running API: installed at start, replaced when the declared views change."""

from __future__ import annotations

import logging
import threading

from fastapi import FastAPI

from api.routes import views
from definitions.settings import Settings
from definitions.view_loading import load_views
from definitions.views import Registry
from stores.view_versions import versions_of

log = logging.getLogger("lambda.api")
_LOCKS_LOCK = threading.Lock()


def views_lock(app: FastAPI) -> threading.RLock:
    """The lock under which the app's served views and routes change (a reload, a refresh, routes
    made again), so that one never installs views read before another's."""
    with _LOCKS_LOCK:
        lock = getattr(app.state, "views_lock", None)
        if lock is None:
            lock = app.state.views_lock = threading.RLock()
        return lock


def install_views(app: FastAPI, settings: Settings, registry: Registry) -> None:
    """Serve `registry`'s views: the serving layer reads which definition answers each
    (definitions.view_versions), then their routes replace the view routes in place (one assignment,
    so a request sees the old routes or the new ones) and the OpenAPI document is made again. Called
    at start, and by POST /api/v1/admin/views/reload."""
    with views_lock(app):
        _install(app, settings, registry)


def _install(app: FastAPI, settings: Settings, registry: Registry, read_stores: bool = True) -> None:
    serving = getattr(app.state, "serving", None)
    if serving is not None:
        if read_stores:
            serving.reload(registry)
        versions = serving.versions
    else:  # the app is being made: the serving layer reads the stores when it starts, then calls this again
        versions = versions_of(registry, None, None)
    fresh = views.views_router(settings, versions).routes
    routes = list(app.router.routes)
    at = next((i for i, r in enumerate(routes) if getattr(r, "path", "").startswith(views.PREFIX)), len(routes))
    kept = [r for r in routes if not getattr(r, "path", "").startswith(views.PREFIX)]
    app.router.routes = kept[:at] + list(fresh) + kept[at:]
    app.openapi_schema = None
    app.state.views = registry


def reload_views(app: FastAPI, settings: Settings) -> tuple[Registry, Registry]:
    """Read the declared views again (the view modules of the persisted settings, re-imported) and
    serve them; (before, after). Raises ValueError or ImportError when they cannot be loaded, and
    then serves the views it served."""
    from definitions.settings_store import load

    with views_lock(app):
        before = app.state.views
        current = settings.model_copy(update={"views": load().views})
        registry = load_views(current, reload=True)
        install_views(app, current, registry)
        return before, registry


def remake_routes(app: FastAPI) -> None:
    """The served views' routes made again from the versions the serving layer has just read (the
    definitions answering them moved): the stores are not read again."""
    with views_lock(app):
        _install(app, app.state.settings, app.state.views, read_stores=False)


def refresh_views(app: FastAPI) -> Registry:
    """Serve the views served now with the speed marker, the replay marks and the pointer read again
    (`lambdactl replay` calls it when a replay begins and when it switches): no view module is read,
    so a view edited or declared but not yet applied is not served by it. Raises MarksUnread when the
    replay marks could not be read (the last ones read are kept: serving_layer.speed_state)."""
    with views_lock(app):
        install_views(app, app.state.settings, app.state.views)
        failed = app.state.serving.speed.read_error
        if failed is not None:
            log.warning("the speed marker or the replay marks cannot be read again: %s", failed)  # the log only
            raise MarksUnread("the speed marker or the replay marks cannot be read from HDFS")
        return app.state.views


class MarksUnread(RuntimeError):
    """The replay marks could not be read again (its text names no host: it reaches error bodies)."""
