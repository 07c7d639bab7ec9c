"""The view routes of a running API: installed at start, replaced when the declared views change."""

from __future__ import annotations

from fastapi import FastAPI

from api.routes import views
from definitions.settings import Settings
from definitions.views import Registry, load_views
from stores.view_versions import versions_of


def install_views(app: FastAPI, settings: Settings, registry: Registry) -> None:
    """Serve `registry`'s views: the serving layer reads which definition answers each
    (definitions.view_versions), then their routes replace the view routes in place (one assignment,
    so a request sees the old routes or the new ones) and the OpenAPI document is made again. Called
    at start, and by POST /api/v1/admin/views/reload."""
    serving = getattr(app.state, "serving", None)
    if serving is not None:
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

    before = app.state.views
    current = settings.model_copy(update={"views": load().views})
    registry = load_views(current, reload=True)
    install_views(app, current, registry)
    return before, registry


def refresh_views(app: FastAPI) -> Registry:
    """Serve the views served now with the speed marker, the replay marks and the pointer read again
    (`lambdactl replay` calls it when a replay begins and when it switches): no view module is read,
    so a view edited or declared but not yet applied is not served by it. Raises MarksUnread when the
    replay marks could not be read (the last ones read are kept: serving_layer.speed_state)."""
    install_views(app, app.state.settings, app.state.views)
    failed = app.state.serving.speed.marks_error
    if failed is not None:
        raise MarksUnread(failed)
    return app.state.views


class MarksUnread(RuntimeError):
    """The replay marks could not be read again (why: for the log and the worker's report)."""
