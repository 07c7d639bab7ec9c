"""POST /api/v1/admin/views/reload: a running API reads the declared views again (the view modules of
the persisted settings) and serves the new set — routes, OpenAPI document, listing — or refuses a set
that cannot be loaded and keeps serving the old one. A view that is being built answers 409 naming
why, with Retry-After. No service is needed: the serving layer is a tripwire (tests/support)."""

from __future__ import annotations

from definitions.settings_store import load, persist_view_modules, with_view_modules
from serving_layer.answers import ViewBuilding
from serving_layer.service import StoreUnavailable
from tests.support.tripwire_api import assert_error_shape, make_client, token

RELOAD = "/api/v1/admin/views/reload"


def test_a_reload_adds_and_removes_view_routes_and_refuses_what_does_not_load(module):
    folder, name = module
    settings = load()
    for client in make_client(settings):
        auth = {"Authorization": f"Bearer {token(settings)}"}
        client.app.state.serving.failure = StoreUnavailable("hbase", "down for the test")
        assert client.get("/api/v1/views/clicks?url=/").status_code == 404
        assert_error_shape(client.post(RELOAD), settings, 401)

        persist_view_modules(with_view_modules(settings, [name], [str(folder)]))
        done = client.post(RELOAD, headers=auth)
        assert done.status_code == 200, done.text
        assert done.json()["added"] == ["clicks"] and done.json()["removed"] == []
        assert "/api/v1/views/clicks" in client.get("/openapi.json").json()["paths"]
        listed = {v["name"]: v for v in client.get("/api/v1/views").json()["views"]}
        assert listed["clicks"]["keys"] == ["url"] and listed["clicks"]["state"] == "unknown"
        # The route is there: the query reaches the serving layer (a tripwire here, failing as a store).
        assert client.get("/api/v1/views/clicks?url=/&granularity=hour").status_code == 503

        persist_view_modules(with_view_modules(settings, [name, "no_such_views_module"], [str(folder)]))
        refused = assert_error_shape(client.post(RELOAD, headers=auth), settings, 409)
        assert "no_such_views_module" in refused["detail"]
        assert "/api/v1/views/clicks" in client.get("/openapi.json").json()["paths"], "the old set still serves"

        persist_view_modules(with_view_modules(settings, [], []))
        done = client.post(RELOAD, headers=auth)
        assert done.json()["removed"] == ["clicks"]
        assert client.get("/api/v1/views/clicks?url=/").status_code == 404
        assert "/api/v1/views/clicks" not in client.get("/openapi.json").json()["paths"]
        assert client.get("/api/v1/views/page_views?url=/&granularity=hour").status_code == 503  # still routed


def test_a_view_being_built_answers_409_with_the_reason_and_retry_after(settings):
    for client in make_client(settings):
        serving = client.app.state.serving
        serving.failure = ViewBuilding("view page_views is being built: no batch version covers it yet")
        resp = client.get("/api/v1/views/page_views?url=/&granularity=hour")
        body = assert_error_shape(resp, settings, 409)
        assert "being built" in body["detail"] and int(resp.headers["Retry-After"]) > 0
        documented = client.get("/openapi.json").json()["paths"]["/api/v1/views/page_views"]["get"]["responses"]
        assert "409" in documented


REFRESH = "/api/v1/admin/views/refresh"


def test_a_refresh_reads_the_stores_again_and_never_the_view_modules(module, monkeypatch):
    """`lambdactl replay` asks the API to read the replay marks again: that must not serve a view
    module edited (or a view declared) but not yet applied."""
    folder, name = module
    settings = load()
    for client in make_client(settings):
        auth = {"Authorization": f"Bearer {token(settings)}"}
        serving = client.app.state.serving
        serving.failure = StoreUnavailable("hbase", "down for the test")
        reread: list[list[str]] = []
        monkeypatch.setattr(serving, "reload", lambda declared, seen=reread: seen.append(declared.names()))
        assert_error_shape(client.post(REFRESH), settings, 401)

        persist_view_modules(with_view_modules(settings, [name], [str(folder)]))  # declared, not applied
        done = client.post(REFRESH, headers=auth)
        assert done.status_code == 200, done.text
        assert "clicks" not in done.json()["views"] and "page_views" in done.json()["views"]
        assert reread == [done.json()["views"]], "the marker, marks and pointer were read again, once"
        assert client.get("/api/v1/views/clicks?url=/").status_code == 404
        assert "/api/v1/views/clicks" not in client.get("/openapi.json").json()["paths"]

        # A module that does not even import is no concern of a refresh.
        persist_view_modules(with_view_modules(settings, [name, "no_such_views_module"], [str(folder)]))
        assert client.post(REFRESH, headers=auth).status_code == 200


def test_a_refresh_that_cannot_read_the_replay_marks_says_so(settings, monkeypatch):
    from stores import checkpoints, replays

    def unreachable(_settings):
        raise ConnectionError("HDFS unreachable")

    monkeypatch.setattr(checkpoints, "read_marker", lambda _settings: None)
    for client in make_client(settings):
        client.app.state.serving.failure = StoreUnavailable("hbase", "down for the test")
        auth = {"Authorization": f"Bearer {token(settings)}"}
        monkeypatch.setattr(replays, "read_replays", unreachable)
        refused = assert_error_shape(client.post(REFRESH, headers=auth), settings, 503)
        assert "replay marks" in refused["detail"] and "unreachable" not in refused["detail"]
        monkeypatch.setattr(replays, "read_replays", lambda _settings: ({}, {}))
        assert client.post(REFRESH, headers=auth).status_code == 200


def test_a_module_that_fails_is_named_without_the_hosts_directories(module):
    """The refusal said the failure in full: an OSError's absolute path (the host's directory
    layout) went to whoever holds the API token, which event producers hold too."""
    folder, name = module
    broken = f"{name}_broken"
    (folder / f"{broken}.py").write_text("open('/srv/private/area51/views.cfg')\n")
    settings = load()
    for client in make_client(settings):
        auth = {"Authorization": f"Bearer {token(settings)}"}
        persist_view_modules(with_view_modules(settings, [broken], [str(folder)]))
        refused = assert_error_shape(client.post(RELOAD, headers=auth), settings, 409)
        assert "/srv/private" not in refused["detail"] and "area51" not in refused["detail"], refused
        assert "views.cfg" in refused["detail"], "the file is still named"
        persist_view_modules(with_view_modules(settings, [], []))
