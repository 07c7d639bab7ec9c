"""TLS settings reach a real Cassandra node: the local node accepts TLS clients on its port
(optional encryption, a client certificate from the local stack's CA required), and the platform's
driver set up only by the `cassandra.*` settings talks to it over TLS; a client without a trusted
certificate, or that does not trust the node's CA, is refused."""

from __future__ import annotations

import socket

import pytest
from cassandra.cluster import NoHostAvailable

from definitions.store_connections import CassandraSettings
from infra.local_tls import local_tls, make_tls
from stores.clients import cassandra_cluster


def over_tls(settings, cafile, certfile=None, keyfile=None):
    if not settings.cassandra.local_client_tls:
        pytest.skip("cassandra.local_client_tls is off: the local node accepts no TLS clients")
    fields = {
        **settings.cassandra.model_dump(),
        "ssl": True,
        "ssl_cafile": str(cafile),
        "ssl_certfile": str(certfile or ""),
        "ssl_keyfile": str(keyfile or ""),
    }
    return settings.model_copy(update={"cassandra": CassandraSettings(**fields)})


def test_the_driver_talks_to_the_node_over_mutual_tls(settings, stack):
    tls = local_tls(settings)
    cluster = cassandra_cluster(over_tls(settings, tls.ca, tls.client_cert, tls.client_key))
    try:
        session = cluster.connect()
        assert session.execute("SELECT release_version FROM system.local").one().release_version
        # The node itself says the connection is encrypted: its view of this client's connections.
        local_ports = {
            conn._socket.getsockname()[1]
            for conn in [cluster.control_connection._connection]
            if isinstance(conn._socket, socket.socket)
        }
        rows = session.execute("SELECT port, ssl_enabled FROM system_views.clients")
        ours = [r for r in rows if r.port in local_ports]
        assert ours and all(r.ssl_enabled for r in ours), [tuple(r) for r in rows]
    finally:
        cluster.shutdown()


def test_a_client_without_a_trusted_certificate_is_refused(settings, stack, tmp_path):
    tls = local_tls(settings)
    stranger = make_tls(tmp_path / "other", ["127.0.0.1"], name="another")
    for chosen in (
        over_tls(settings, tls.ca),  # no client certificate
        over_tls(settings, tls.ca, stranger.client_cert, stranger.client_key),  # one from another CA
        over_tls(settings, stranger.ca, tls.client_cert, tls.client_key),  # the node's CA not trusted
    ):
        cluster = cassandra_cluster(chosen, timeout_s=5)
        try:
            with pytest.raises(NoHostAvailable):
                cluster.connect()
        finally:
            cluster.shutdown()
