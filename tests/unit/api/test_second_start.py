"""An API started on a port another API already listens on (or its workers, their main process
killed) emptied the running API's directory before it failed to bind: the running workers lost
their settings snapshot (a worker started again then failed at every start), their metrics files
and the reload count (reloads then answered at once while the other worker served old views)."""

from __future__ import annotations

import socket

from api import server


def test_a_second_start_on_a_taken_port_refuses_and_leaves_the_running_apis_files(monkeypatch, tmp_path, caplog):
    from definitions.settings import Settings

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        settings = Settings(state_dir=tmp_path, environment="development")
        settings = settings.model_copy(
            update={"api": settings.api.model_copy(update={"host": "127.0.0.1", "port": port, "workers": 2})}
        )
        directory = server.workers_dir(settings)
        directory.mkdir(parents=True)
        running = [directory / "generation", directory / "settings-1234.json", directory / "worker-1234-ab"]
        for path in running:
            path.write_text("the running API's")
        monkeypatch.setattr(server, "process_settings", lambda _process: settings)
        monkeypatch.setattr(server, "configure_from", lambda *args: None)
        started = []
        monkeypatch.setattr("uvicorn.run", lambda *args, **kwargs: started.append(args))
        assert server.main() == 1
        assert started == []
        assert all(path.read_text() == "the running API's" for path in running)
        assert f"127.0.0.1:{port} is in use" in caplog.text


def test_only_an_address_in_use_is_refused_other_errors_are_left_to_uvicorn():
    """An address not on this host (EADDRNOTAVAIL) was reported as in use."""
    assert server._can_bind("192.0.2.1", 18_123)  # TEST-NET-1: not this host's; uvicorn says so itself
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert not server._can_bind("127.0.0.1", port)
        assert not server._can_bind("localhost", port), "bound as uvicorn binds a name: IPv4"
        assert not server._can_bind("0.0.0.0", port)
