"""TLS material of the local stack: a certificate authority of its own, a server certificate for the
stores' host and a client certificate, made once with `openssl` into `<state_dir>/tls/` (keys
private). The local Kafka broker's SSL listener and the local Cassandra node's client encryption
use them, so that TLS and client-certificate (mutual TLS) settings are checked against real
servers; a deployment uses its own CA and certificates (docs/deployment.md)."""

from __future__ import annotations

import ipaddress
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from definitions.files import write_private
from definitions.section import bare_address
from definitions.settings import Settings
from infra.errors import StackError

DAYS = 825  # what clients accept for a server certificate at most
RENEW_WITHIN_S = 30 * 86_400  # a server certificate this close to its end is made again


@dataclass(frozen=True)
class TlsFiles:
    folder: Path

    @property
    def ca(self) -> Path:  # the authority's certificate (PEM): what clients and servers trust
        return self.folder / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.folder / "ca.key"

    @property
    def server_cert(self) -> Path:
        return self.folder / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.folder / "server.key"

    @property
    def server_keystore(self) -> Path:  # key, then certificate: a PEM key store (Kafka, Cassandra)
        return self.folder / "server-keystore.pem"

    @property
    def server_hosts(self) -> Path:  # the hosts the server certificate names, one per line
        return self.folder / "server-hosts.txt"

    @property
    def client_cert(self) -> Path:
        return self.folder / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.folder / "client.key"


def local_tls(settings: Settings) -> TlsFiles:
    """The local stack's TLS material, made on first use (for the stores' hosts)."""
    # A certificate names an IPv6 address without brackets or zone (as the driver reaches it).
    contacts = (bare_address(host).split("%")[0] for host in settings.cassandra.hosts)
    hosts = {"127.0.0.1", "localhost", settings.kafka.host, *contacts}
    return make_tls(settings.state_dir / "tls", sorted(hosts))


def make_tls(folder: Path, hosts: list[str], name: str = "lambda local") -> TlsFiles:
    """A CA, a server certificate for `hosts` and a client certificate in `folder`, unless there. A
    server certificate made for other hosts (a store's host changed since), or ending within
    RENEW_WITHIN_S, is made again under the same CA: it was kept as made, and the clients' host
    name check failed, or every TLS connection once it expired."""
    files = TlsFiles(folder)
    if files.client_key.exists():
        if not _server_current(files, hosts):
            _server(files, hosts, name)
        return files
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(DAYS),
        "-keyout", str(files.ca_key), "-out", str(files.ca), "-subj", f"/CN={name} CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    files.ca_key.chmod(0o600)
    _server(files, hosts, name)
    # Last: its presence says the whole set was made.
    _signed(files, files.client_key, files.client_cert, "lambda", "subjectAltName=DNS:lambda", "clientAuth")
    return files


def _server(files: TlsFiles, hosts: list[str], name: str) -> None:
    names = ",".join(f"IP:{h}" if _is_ip(h) else f"DNS:{h}" for h in hosts)
    _signed(files, files.server_key, files.server_cert, f"{name} stores", f"subjectAltName={names}", "serverAuth")
    write_private(files.server_keystore, files.server_key.read_text() + files.server_cert.read_text())
    write_private(files.server_hosts, "".join(f"{h}\n" for h in sorted(hosts)))


def _server_current(files: TlsFiles, hosts: list[str]) -> bool:
    """Whether the server certificate names `hosts` and does not end within RENEW_WITHIN_S."""
    try:
        named = files.server_hosts.read_text().split()
    except FileNotFoundError:  # made by an earlier release: for which hosts is not known
        return False
    if named != sorted(hosts):
        return False
    checked = subprocess.run(
        ["openssl", "x509", "-in", str(files.server_cert), "-noout", "-checkend", str(RENEW_WITHIN_S)],
        capture_output=True,
        timeout=60,
    )
    return checked.returncode == 0


def _signed(files: TlsFiles, key: Path, cert: Path, subject: str, names: str, usage: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        request, extensions = Path(scratch) / "req.csr", Path(scratch) / "ext.cnf"
        extensions.write_text(f"basicConstraints=CA:FALSE\n{names}\nextendedKeyUsage={usage}\n")
        _openssl(
            "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(request),
            "-subj", f"/CN={subject}",
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", str(request), "-CA", str(files.ca), "-CAkey", str(files.ca_key),
            "-CAcreateserial", "-days", str(DAYS), "-sha256", "-extfile", str(extensions), "-out", str(cert),
        )  # fmt: skip
    key.chmod(0o600)


def _openssl(*args: str) -> None:
    try:
        done = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise StackError("tls", "openssl is not installed: run `make setup`") from None
    if done.returncode != 0:
        raise StackError("tls", f"openssl {args[0]} failed: {done.stderr.strip()[-500:]}")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
