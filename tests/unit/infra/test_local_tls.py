"""The local stack's TLS material: a CA, a server certificate for the stores' hosts, a client
certificate; keys private; made once."""

from __future__ import annotations

import ssl
import subprocess

from infra.local_tls import make_tls


def extensions(cert, names: str) -> str:
    """The certificate's extensions `names` (comma-separated), as openssl prints them."""
    return subprocess.run(
        ["openssl", "x509", "-in", cert, "-noout", "-ext", names], capture_output=True, text=True, check=True
    ).stdout


def test_the_certificates_chain_to_the_ca_name_the_hosts_and_keep_their_keys_private(tmp_path):
    files = make_tls(tmp_path / "tls", ["127.0.0.1", "localhost", "stores.internal"])
    for cert in (files.server_cert, files.client_cert):
        done = subprocess.run(["openssl", "verify", "-CAfile", files.ca, cert], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    text = extensions(files.server_cert, "subjectAltName,extendedKeyUsage")
    assert "IP Address:127.0.0.1" in text and "DNS:localhost" in text and "DNS:stores.internal" in text
    assert "TLS Web Server Authentication" in text
    for key in (files.ca_key, files.server_key, files.client_key, files.server_keystore):
        assert key.stat().st_mode & 0o077 == 0, f"{key.name} is readable by others"
    assert (tmp_path / "tls").stat().st_mode & 0o077 == 0
    keystore = files.server_keystore.read_text()
    assert keystore.startswith("-----BEGIN PRIVATE KEY-----") and "BEGIN CERTIFICATE" in keystore
    # Python's TLS stack (kafka-python, cassandra-driver) loads the client's pair.
    ssl.create_default_context(cafile=str(files.ca)).load_cert_chain(files.client_cert, files.client_key)


def test_made_once(tmp_path):
    first = make_tls(tmp_path / "tls", ["127.0.0.1"])
    ca = first.ca.read_bytes()
    again = make_tls(tmp_path / "tls", ["127.0.0.1"])
    assert again.ca.read_bytes() == ca


def test_an_ipv6_contact_point_is_named_as_the_driver_reaches_it(tmp_path):
    """A bracketed one went into the certificate as DNS:[::1], which no TLS check matches."""
    from definitions.settings import Settings
    from infra.local_tls import local_tls

    settings = Settings(_env_file=None, state_dir=tmp_path / "state", cassandra={"hosts": ["[::1]", "fe80::7%lo"]})
    files = local_tls(settings)
    text = extensions(files.server_cert, "subjectAltName")
    assert "IP Address:0:0:0:0:0:0:0:1" in text and "IP Address:FE80:0:0:0:0:0:0:7" in text, text
    assert "[" not in text and "%" not in text


def test_a_server_certificate_for_other_hosts_or_near_its_end_is_made_again_under_the_same_ca(tmp_path, monkeypatch):
    """It was kept as first made: after a store's host changed, every client's host name check failed
    against it, and 825 days on every TLS connection did."""
    from infra import local_tls

    first = make_tls(tmp_path / "tls", ["127.0.0.1"])
    ca, client = first.ca.read_bytes(), first.client_cert.read_bytes()
    moved = make_tls(tmp_path / "tls", ["127.0.0.1", "stores.example"])
    assert "DNS:stores.example" in extensions(moved.server_cert, "subjectAltName")
    assert moved.ca.read_bytes() == ca and moved.client_cert.read_bytes() == client, "what clients hold stays"
    done = subprocess.run(["openssl", "verify", "-CAfile", moved.ca, moved.server_cert], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (
        "stores.example" in moved.server_keystore.read_text() or moved.server_keystore.read_text().count("BEGIN") == 2
    )
    kept = moved.server_cert.read_bytes()
    assert make_tls(tmp_path / "tls", ["stores.example", "127.0.0.1"]).server_cert.read_bytes() == kept, "made once"
    monkeypatch.setattr(local_tls, "RENEW_WITHIN_S", (local_tls.DAYS + 1) * 86_400)  # as if it ended within that
    assert make_tls(tmp_path / "tls", ["127.0.0.1", "stores.example"]).server_cert.read_bytes() != kept
